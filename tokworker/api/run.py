"""`tokworker api`: spawn the pool, start the engine, serve HTTP until SIGTERM or SIGINT (either drains; a
second signal stops at once).

    await serve_http(pool_options, ApiOptions(...), engine, host="127.0.0.1", port=8000, limits=ServerLimits())

The server's connections are bounded below the descriptor limit (limits.py): RLIMIT_NOFILE is read at start
and the log says how many client connections it allows.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal

from aiohttp import web

from tokworker.api.limits import RESERVED_DESCRIPTORS, GuardedRunner, connection_limit
from tokworker.api.options import ApiOptions, ServerLimits
from tokworker.api.server import AccessLogger, Api
from tokworker.api.workers_at import WorkersAt
from tokworker.worker.options import GC_YOUNG

log = logging.getLogger("tokworker.api")
ENGINES = ("replay", "llama.cpp", "vllm", "sglang")


def engine_for(name: str, url: str | None = None, *, replay_step_interval: float = 0.01,
               max_model_len: int | None = None, limits=None):
    """The engine named on the command line (ValueError names the known ones); `limits`: an HTTP engine's
    EngineLimits (its defaults when None)."""
    if name == "replay":
        from tokworker.engines.replay import ReplayEngine
        return ReplayEngine(step_interval=replay_step_interval, max_model_len=max_model_len or 32768)
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}: one of {', '.join(ENGINES)}")
    if not url:
        raise ValueError(f"--engine {name} needs --engine-url (where the engine listens)")
    from tokworker.engines.options import EngineLimits
    limits = limits or EngineLimits()
    if name == "llama.cpp":
        from tokworker.engines.llama_cpp import LlamaCppEngine
        return LlamaCppEngine(url, limits=limits)
    if name == "vllm":
        from tokworker.engines.vllm import VllmEngine
        return VllmEngine(url, limits=limits)
    from tokworker.engines.sglang import SglangEngine
    return SglangEngine(url, limits=limits)


async def serve_http(spawn: dict | WorkersAt, options: ApiOptions, engine, *, host: str = "127.0.0.1",
                     port: int = 8000, ready=None, model_root: str = "", signals: bool = True,
                     limits: ServerLimits = ServerLimits()) -> None:
    """Run until SIGTERM or SIGINT (with `signals`: drain: no new requests, those in flight run at most
    options.drain_timeout, then end with finish_reason "abort"; a second signal stops at once), or until
    cancelled. `spawn`: TokenizerPool.spawn's keyword arguments, or the running daemons to connect to
    (WorkersAt). `ready(port)` is called once serving. ValueError when `limits.max_connections` does not
    fit under RLIMIT_NOFILE."""
    from tokworker.frontend import TokenizerPool
    from tokworker.worker.preflight import check_spawn

    remote = isinstance(spawn, WorkersAt)  # running daemons (--workers-at): they checked their model at start
    if not remote:
        check_spawn(spawn)                # what would fail every request fails here, in one line
    reserve = RESERVED_DESCRIPTORS + getattr(engine, "max_connections", 0)
    max_connections, nofile = connection_limit(limits.max_connections, reserve)
    log.info("RLIMIT_NOFILE %d: at most %d client connections (--max-connections), %d descriptors kept for the "
             "pool, the engine and files", nofile, max_connections, nofile - max_connections)
    opening = spawn.connect() if remote else TokenizerPool.spawn(**spawn)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    drain = asyncio.Event()
    if signals:
        def on_signal() -> None:
            """The first SIGTERM or SIGINT (Ctrl-C) drains; a second stops at once."""
            (stop if drain.is_set() else drain).set()
        loop.add_signal_handler(signal.SIGTERM, on_signal)
        loop.add_signal_handler(signal.SIGINT, on_signal)
    async with await opening as pool:
        api = Api(pool, engine, options, model_root=model_root)
        await api.start()
        # the drain has ended every response by cleanup: what still runs then (a second signal) is cut
        runner = GuardedRunner(api.app(), limits, max_connections, handler_cancellation=True,
                               access_log_class=AccessLogger, access_log=logging.getLogger("tokworker.api.access"),
                               shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1]
        gc.collect()
        gc.freeze()                       # what lives now lives as long as the server (frontend's advice)
        # Every step allocates a few container objects per stream (ids lists, the step's dicts) that die
        # young; at the default threshold (700) the collector ran every few steps, a tenth of the loop's CPU.
        gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])
        log.info("serving %s on http://%s:%d with the %s engine", ", ".join(api.names), host, bound, engine.name)
        if ready is not None:
            ready(bound)
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(drain.wait())]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            if drain.is_set() and not stop.is_set():
                log.info("draining (at most %.0f s; a second signal stops at once)", options.drain_timeout)
                draining = asyncio.ensure_future(api.drain())
                await asyncio.wait([draining, waiters[0]], return_when=asyncio.FIRST_COMPLETED)
                draining.cancel()
        finally:
            for waiter in waiters:
                waiter.cancel()
            await runner.cleanup()
            await api.close()

