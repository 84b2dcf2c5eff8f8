"""`tokworker serve`: the standalone daemon. N worker processes on N endpoints (worker i at base + i), kept
alive by the launcher. SIGTERM drains them (open streams finish, new work is refused with SHUTTING_DOWN,
for at most --drain-timeout seconds) and stops; SIGINT stops at once.

Exit status: 0 after a clean stop, 2 when the command line is wrong (nothing was started), 1 when the
model cannot be served (preflight.py: no chat template, one that does not compile, a parser that does
not fit the vocabulary), the workers cannot start (the worker's own error is logged) or another daemon
serves the endpoint (endpoint_lock.py), so a service manager sees a failed service instead of a restart loop.

API processes on other hosts connect with `TokenizerPool.connect("tcp://host:port", curve_keys=DIR)`;
the first worker's handshake tells them how many workers there are.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

from tokworker.templates.chatml import CHATML_NAME
from tokworker.worker.options import WorkerOptions, validate_options
from tokworker.protocol.endpoints import default_bind, worker_endpoints
from tokworker.worker.security import check_bind

log = logging.getLogger("tokworker.daemon")

STOP_MARGIN_S = 5.0                 # past the drain timeout, before a worker that did not exit is killed


def serve(model_dir: str, workers: int = 1, bind: str | None = None, curve_keys: str | None = None,
          log_level: str = "INFO", **worker_options) -> int:
    """Run the daemon in the foreground; returns the process exit status."""
    from tokworker.worker.endpoint_lock import EndpointInUse, hold_endpoints
    from tokworker.worker.launcher import Launcher, WorkerStartError
    from tokworker.worker.preflight import UnservableModel, check_model

    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s[%(process)d] %(message)s")
    bind = bind or default_bind()
    try:
        options = _worker_options(model_dir, workers, bind, curve_keys, log_level, worker_options)
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    try:
        locks = hold_endpoints([option.bind for option in options])
    except EndpointInUse as exc:
        log.error("%s", exc)
        return 1
    try:
        check_model(options[0].model_dir, options[0].chat_template, options[0].tool_parser,
                    options[0].reasoning_parser, options[0].load_cpu_s, options[0].load_memory_mb)
    except UnservableModel as exc:
        log.error("%s", exc.message, exc_info=log.isEnabledFor(logging.DEBUG))
        locks.release()
        return 1
    stop = threading.Event()
    drain = [False]

    def request_stop(signum, frame):
        drain[0] = signum == signal.SIGTERM
        log.info("received %s; %s", signal.Signals(signum).name, "draining, then stopping" if drain[0] else "stopping")
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    status = 0
    launcher = Launcher(options, inherit_fds=locks.fds)
    try:
        launcher.start()
        while not stop.is_set():
            try:
                if launcher.wait_ready(0.2):
                    break
            except WorkerStartError as exc:
                log.error("cannot serve %s: %s", model_dir, exc)      # its stderr went by just before
                return 1
        if not stop.is_set():
            log.info("serving %s with %d worker(s): %s%s", model_dir, workers, ", ".join(o.bind for o in options),
                     " (CurveZMQ)" if curve_keys else "")
        while not stop.wait(0.2):
            if launcher.failure is not None:
                log.error("a worker cannot start again: %s", launcher.failure)
                status = 1
                break
    finally:
        launcher.stop(grace_s=(options[0].drain_timeout_s if drain[0] else 0.0) + STOP_MARGIN_S, drain=drain[0])
        locks.release()                          # after every worker exited: they held the locks too
    if status == 0:
        log.info("stopped cleanly (%d worker restart(s) while running)", launcher.restarts)
    return status


def _worker_options(model_dir: str, workers: int, bind: str, curve_keys: str | None, log_level: str,
                    worker_options: dict) -> list[WorkerOptions]:
    """The daemon's command line as one WorkerOptions per worker, every part checked (ValueError)."""
    if workers < 1:
        raise ValueError("--workers must be at least 1")
    path = Path(model_dir)
    if not (path.is_file() or (path / "tokenizer.json").exists() or (path / "tekken.json").exists()
            or any(path.glob("*.tiktoken")) or any(path.glob("*.gguf"))):
        raise ValueError(f"{model_dir} holds no tokenizer.json (nor tekken.json, a .gguf, nor a tokenizer file)")
    template = worker_options.get("chat_template")
    if template is not None and template != CHATML_NAME:
        if not Path(template).is_file():
            raise ValueError(f'--chat-template {template} is not a file (give a template file, or "{CHATML_NAME}")')
        worker_options = {**worker_options, "chat_template": str(Path(template).resolve())}  # workers start elsewhere
    endpoints = worker_endpoints(bind, workers)
    for endpoint in endpoints:
        check_bind(endpoint, curve_keys)
    options = [WorkerOptions(model_dir=str(path.resolve()), bind=endpoint, index=i, pool_size=workers,
                             curve_keys=str(Path(curve_keys).resolve()) if curve_keys else None, log_level=log_level,
                             **worker_options)
               for i, endpoint in enumerate(endpoints)]
    for option in options:
        validate_options(option)
    return options
