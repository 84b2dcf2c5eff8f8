"""The API process's CPU for one never-seen long chat, from its body's bytes to its stream's end (issue 31).

A `tokworker api` process (bench/front_door.py's server: the replay engine, one worker, direct streaming,
hermes and qwen3 named) takes never-seen ~4,000-token chats with two tools (bench/vllm_first_text.py's
`long_chats`), one at a time, streamed, max_tokens 1: the reply is one token, so a request is its body read
and decoded, the render-and-open trip, the engine's add, the headers, one step and the end. Reported:
- `api_ms`: the API process's CPU per request (every thread but the replay engine's own, from
  /proc/PID/task/*/schedstat, read before the request and 5 ms after its end), the median over the requests
  and `api_mean_ms` over all of them (`idle_ms_per_request`: what the process spends in those 5 ms when no
  request comes, measured apart); `zmq_ms`: of it, ZeroMQ's background I/O thread; `api_open_ms`: of it, what
  was spent by the time the response's headers reached the client (the body read, decoded and planned, the
  render-and-open trip, the engine's add, the headers: the stream is open; read then, so the hand-over of
  the socket, right after the headers, may fall on either side), the rest being the token's step and the end;
- `workers_ms`: the worker's CPU per request, for scale;
- `floor_api_ms`: the floor under any aiohttp front door for this request, measured beside it: a bare aiohttp
  app reading the body, decoding it into the same Struct and answering one SSE event on a response that
  closes its connection (a direct stream's does: each request is a new connection).
With `--base REV`, REV's tree (git archive into a temporary folder) serves beside this one: the chats go to
both in turn, so before and after meet the same load (`base_*` figures).
With `--sections`, the server's main steps are timed in place (`sections_us`: the event loop thread's CPU
per request in each, inclusive, beside its whole CPU: `loop thread`), a lighter look than a profiler's;
with `--base` too, the base's server times its own bench's sections in the same run (`base_sections_us`).
With `--profile FILE`, the server runs under cProfile (thread CPU time, the event loop's thread) while the
chats are sent, and FILE gets its stats (`python -m pstats FILE`); `--top N` prints the N costliest
functions per request (µs, cumulative and own).

`python -m bench.first_byte_api [--quick] [--base REV] [--sections | --profile FILE [--top N]]`
(`python -m bench --only first_byte_api` runs it without a base.)
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STEP_S = 0.02
FLAGS = ("--direct", "--workers", "1", "--reply", "none", "--parsers")


# what `--sections` times in the server (inclusive CPU of the loop's thread): (module, attribute path)
SECTIONS = [
    ("tokworker.api.limits", "GuardedHandler.connection_made"),
    ("tokworker.api.limits", "GuardedHandler.data_received"),
    ("tokworker.api.limits", "GuardedHandler.connection_lost"), ("tokworker.api.limits", "GuardedServer.__call__"),
    ("tokworker.api.generation", "Generations.handle"), ("tokworker.api.server", "Api.read"),
    ("tokworker.api.server", "Api.decode"), ("tokworker.api.server", "PRICED_CHAT"),
    ("tokworker.api.generation", "Generations._start"), ("tokworker.api.generation", "Generations._render_open"),
    ("tokworker.frontend.prompts", "encode_request"), ("tokworker.api.generation", "Generations._engage"),
    ("aiohttp.web_response", "StreamResponse.prepare"), ("tokworker.api.generation", "_stream_head"),
    ("tokworker.api.generation", "Generations._hand_over"),
    ("tokworker.engines.inprocess", "InProcessEngine.add"), ("tokworker.api.generation", "Generations._finish"),
    ("tokworker.frontend.link", "WorkerLink._on_readable"), ("tokworker.frontend.link", "decode_reply"),
    ("tokworker.frontend.link", "WorkerLink._transmit"), ("tokworker.frontend.client", "TokenizerPool.submit_step"),
    ("tokworker.api.serving", "Serving._deliver"), ("tokworker.engines.base", "Engine.outputs"),
    ("tokworker.api.server", "AccessLogger.log"), ("tokworker.api.metrics", "Metrics.request"),
    ("aiohttp.web_protocol", "RequestHandler.start"), ("aiohttp.web_protocol", "RequestHandler.finish_response"),
    ("tokworker.api.serving", "Serving.run"), ("tokworker.engines.base", "Engine._emit_all"),
    ("tokworker.frontend.link", "WorkerLink._sweep"), ("tokworker.frontend.link", "WorkerLink._kick"),
]


class _Yield:
    def __init__(self, value):
        self.value = value

    def __await__(self):
        return (yield self.value)


def _timed(function, key: str, spent: dict):
    """`function` (plain or async) whose own steps' CPU (the loop thread's) adds up in spent[key]."""
    import functools
    import inspect

    clock = time.thread_time_ns
    if inspect.iscoroutinefunction(function):
        @functools.wraps(function)
        async def timed(*args, **kwargs):
            coroutine, value, error = function(*args, **kwargs), None, None
            while True:
                began = clock()
                try:
                    sent = coroutine.send(value) if error is None else coroutine.throw(error)
                except StopIteration as done:
                    spent[key] += clock() - began
                    return done.value
                spent[key] += clock() - began
                try:
                    value, error = await _Yield(sent), None
                except BaseException as caught:           # noqa: B036 - handed to the coroutine as it came
                    value, error = None, caught
    else:
        @functools.wraps(function)
        def timed(*args, **kwargs):
            began = clock()
            try:
                return function(*args, **kwargs)
            finally:
                spent[key] += clock() - began
    return timed


def _serve_timed(out: str, *args: str) -> None:
    """bench.front_door's server with SECTIONS timed: SIGUSR1 zeroes the sums, SIGUSR2 writes them (ns of
    the loop thread's CPU, and its whole CPU since SIGUSR1) to `out` as JSON."""
    import gc
    import importlib

    spent = dict.fromkeys((f"{module}:{path}" for module, path in SECTIONS), 0)
    spent.update({"gc": 0, "gc collections": 0})
    began = [0]

    def collecting(phase, info):
        if phase == "start":
            began[0] = time.thread_time_ns()
        else:
            spent["gc"] += time.thread_time_ns() - began[0]
            spent["gc collections"] += 1000        # shown per request, as the others (ns -> µs)
    gc.callbacks.append(collecting)
    for module, path in SECTIONS:
        owner = importlib.import_module(module)
        *parents, name = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent)
        setattr(owner, name, _timed(getattr(owner, name), f"{module}:{path}", spent))
    mark = [0]

    def start(*_):
        for key in spent:
            spent[key] = 0
        mark[0] = time.thread_time_ns()

    def stop(*_):
        Path(out).write_text(json.dumps({"loop thread": time.thread_time_ns() - mark[0], **spent}))
    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    _run_server(args)


def _run_server(args) -> None:
    from bench.front_door import _serve

    given = dict(zip(args, args[1:]))
    reply = given.get("--reply")
    _serve(STEP_S, "--direct" in args, int(given.get("--workers", 1)), None if reply == "none" else reply,
           "--parsers" in args)


def _serve_floor() -> None:
    """The floor under an aiohttp front door for this request: a bare aiohttp app (uvloop, no access log) that
    reads the body, decodes it into the same Struct, and answers one SSE event and [DONE] on a response that
    closes its connection (as a direct stream's does). Its port on stdout."""
    import msgspec
    import uvloop
    from aiohttp import web

    from tokworker.api.requests import ChatCompletionRequest

    decoder = msgspec.json.Decoder(ChatCompletionRequest)

    async def chat(request):
        decoder.decode(await request.read())
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        response.enable_chunked_encoding()
        response.force_close()
        await response.prepare(request)
        await response.write(b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\ndata: [DONE]\n\n')
        await response.write_eof()
        return response

    async def main():
        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(site._server.sockets[0].getsockname()[1], 0, flush=True)
        await asyncio.Event().wait()
    uvloop.run(main())


def _serve_profiled(out: str, *args: str) -> None:
    """bench.front_door's server under cProfile of the loop thread's CPU time: SIGUSR1 starts it, SIGUSR2
    stops it and writes its stats to `out`."""
    import cProfile

    profile = cProfile.Profile(time.thread_time)

    def start(*_):
        profile.enable()

    def stop(*_):
        profile.disable()
        profile.dump_stats(out)
    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    _run_server(args)


class Server:
    """A server process from `tree` (None: this one): `mode` "serve" (bench/front_door.py's), "floor" (the bare
    aiohttp app), "serve-profiled" or "serve-timed" (writing to `out`); its pid, engine thread and workers."""

    def __init__(self, tree: Path | None = None, mode: str = "serve", out: str | None = None):
        from bench.front_door import _children

        env = dict(os.environ)
        if tree is not None:
            env["PYTHONPATH"] = str(tree)
        command = {"serve": ["bench.front_door", "serve", str(STEP_S), *FLAGS],
                   "floor": ["bench.first_byte_api", "serve-floor"]}.get(mode) or \
            ["bench.first_byte_api", mode, out, *FLAGS]
        self.process = subprocess.Popen([sys.executable, "-m", *command], stdout=subprocess.PIPE, text=True, env=env,
                                        cwd=tree or REPO)       # the tree's own bench and tokworker first
        port, engine = map(int, self.process.stdout.readline().split())
        self.url = f"http://127.0.0.1:{port}"
        self.pid = self.process.pid
        self.engine = engine or None                # the floor has no engine thread (and no workers)
        self.workers = _children(self.pid)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def _cpu(pid: int, skip: int | None = None, named: str | None = None) -> float:
    from bench.front_door import _cpu as cpu
    return cpu(pid, skip, named)


def _zmq_cpu(pid: int) -> float:
    """CPU seconds of the process's ZeroMQ background threads (their I/O: the sends and receives proper)."""
    return _cpu(pid, named="ZMQbg")


def base_tree(rev: str) -> Path:
    """REV's tree in a temporary folder, importable as `tokworker` (protocol/ and frontend/ linked in as the
    package-dir mapping installs them)."""
    folder = Path(tempfile.mkdtemp(prefix="tokworker-base-"))
    archive = subprocess.run(["git", "archive", rev], cwd=REPO, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    for name in ("protocol", "frontend"):
        (folder / "tokworker" / name).symlink_to(folder / name)
    return folder


async def _requests(servers: dict[str, Server], chats: list[list[dict]]) -> dict:
    """Each chat to every server in turn, one at a time: per server the API process's and workers' CPU."""
    import aiohttp

    from bench.cold_prompt import TOOLS

    found = {name: {"api_s": [], "open_s": [], "workers_s": [], "zmq_s": []} for name in servers}
    names = list(servers)
    sessions = {name: aiohttp.ClientSession() for name in names}
    try:
        for k, chat in enumerate(chats):
            body = json.dumps({"model": "bench", "stream": True, "max_tokens": 1, "tools": TOOLS,
                               "messages": chat}).encode()
            for name in names[k % len(names):] + names[:k % len(names)]:
                server = servers[name]
                api0, work0, zmq0 = _cpu(server.pid, server.engine), sum(_cpu(w) for w in server.workers), \
                    _zmq_cpu(server.pid)
                async with sessions[name].post(server.url + "/v1/chat/completions", data=body,
                                               headers={"Content-Type": "application/json"}) as response:
                    found[name]["open_s"].append(_cpu(server.pid, server.engine) - api0)   # headers are here
                    if response.status != 200:
                        raise RuntimeError(f"{name}: HTTP {response.status}: {(await response.text())[:500]}")
                    async for _ in response.content:
                        pass
                await asyncio.sleep(0.005)          # the process's end of the exchange, after the client's
                found[name]["api_s"].append(_cpu(server.pid, server.engine) - api0)
                found[name]["workers_s"].append(sum(_cpu(w) for w in server.workers) - work0)
                found[name]["zmq_s"].append(_zmq_cpu(server.pid) - zmq0)
    finally:
        for session in sessions.values():
            await session.close()
    return found


def _idle_ms(server: Server, seconds: float = 2.0) -> float:
    """The API process's CPU (engine thread aside) per 5 ms with no request: what the wait after each
    request adds to `api_s` by itself."""
    before = _cpu(server.pid, server.engine)
    time.sleep(seconds)
    return (_cpu(server.pid, server.engine) - before) / seconds * 0.005 * 1e3


def run(quick: bool = False, model_dirs=(), base: str | None = None, profile: str | None = None,
        top: int = 0, sections: bool = False) -> list[dict]:
    from bench.pool import new_chats
    from bench.vllm_first_text import long_chats

    count = 20 if quick else 60
    outs = {}
    if sections:
        profile = outs["this"] = tempfile.mktemp(prefix="tokworker-sections-", suffix=".json")
    servers = {"this": Server(mode="serve-timed" if sections else "serve-profiled" if profile else "serve",
                              out=profile)}
    tree = None
    if base is not None:
        tree = base_tree(base)
        if sections:                        # the base's own sections (its bench's list), timed in the same run
            outs["base"] = tempfile.mktemp(prefix="tokworker-sections-base-", suffix=".json")
        servers["base"] = Server(tree, mode="serve-timed" if sections else "serve", out=outs.get("base"))
    if not (profile or sections):
        servers["floor"] = Server(mode="floor")
    try:
        # the template compiled and the connections open before anything is timed
        asyncio.run(_requests(servers, [new_chats(1, seed=950 + k)[0] for k in range(4)]))
        idle = {name: _idle_ms(server) for name, server in servers.items()}
        timed = list(outs) or (["this"] if profile else [])
        for name in timed:
            os.kill(servers[name].pid, signal.SIGUSR1)
        found = asyncio.run(_requests(servers, long_chats("4k", count, seed=1000)))
        for name in timed:
            os.kill(servers[name].pid, signal.SIGUSR2)
        if timed:
            time.sleep(1)
    finally:
        for server in servers.values():
            server.stop()
        if tree is not None:
            shutil.rmtree(tree)
    row = {"case": "api cpu, 4k chat with two tools, new", "requests": count}
    for name, figures in found.items():
        prefix = "" if name == "this" else f"{name}_"
        row.update({f"{prefix}api_ms": round(statistics.median(figures["api_s"]) * 1e3, 3),
                    f"{prefix}api_mean_ms": round(statistics.mean(figures["api_s"]) * 1e3, 3),
                    f"{prefix}api_open_ms": round(statistics.median(figures["open_s"]) * 1e3, 3)})
        if name != "floor":
            row.update({f"{prefix}zmq_ms": round(statistics.median(figures["zmq_s"]) * 1e3, 3),
                        f"{prefix}workers_ms": round(statistics.median(figures["workers_s"]) * 1e3, 3)})
    row["idle_ms_per_request"] = round(idle["this"], 3)
    row["load_1min"] = round(os.getloadavg()[0], 2)
    for name, out in outs.items():
        spent = json.loads(Path(out).read_text())
        prefix = "" if name == "this" else f"{name}_"
        row[f"{prefix}sections_us"] = {key.split(":")[-1]: round(value / count / 1e3, 1)
                                       for key, value in spent.items()}
    if profile and top and not sections:
        _print_top(profile, count, top)
    return [row]


def _print_top(path: str, requests: int, top: int) -> None:
    """The `top` costliest functions of the profile, per request: cumulative and own µs."""
    import pstats

    stats = pstats.Stats(path).stats
    rows = sorted(stats.items(), key=lambda item: -item[1][3])
    print(f"{'cum us':>9} {'own us':>9} {'calls':>7}  function", file=sys.stderr)
    for (file, line, name), (calls, _, own, cumulative, _) in rows[:top]:
        where = f"{Path(file).parent.name}/{Path(file).name}:{line}" if line else file
        print(f"{cumulative / requests * 1e6:9.1f} {own / requests * 1e6:9.1f} {calls / requests:7.1f}  "
              f"{name} {where}", file=sys.stderr)
    print(file=sys.stderr)
    for (file, line, name), (calls, _, own, cumulative, _) in sorted(rows, key=lambda item: -item[1][2])[:top]:
        where = f"{Path(file).parent.name}/{Path(file).name}:{line}" if line else file
        print(f"{own / requests * 1e6:9.1f} own  {calls / requests:7.1f}  {name} {where}", file=sys.stderr)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve-profiled"]:
        _serve_profiled(sys.argv[2], *sys.argv[3:])
    elif sys.argv[1:2] == ["serve-floor"]:
        _serve_floor()
    elif sys.argv[1:2] == ["serve-timed"]:
        _serve_timed(sys.argv[2], *sys.argv[3:])
    else:
        flags = sys.argv[1:]
        given = dict(zip(flags, flags[1:]))
        for row in run(quick="--quick" in flags, base=given.get("--base"), profile=given.get("--profile"),
                       top=int(given.get("--top", 0)), sections="--sections" in flags):
            print(json.dumps(row))
