"""What the front door's bound tests share: `tokworker api` as a real process on a free loopback port (with
its own RLIMIT_NOFILE when asked), its resident memory read from /proc, a bystander's /health timed, and a
stand-in HTTP engine (vLLM's tokens-only routes on aiohttp, in a thread of the test process) whose
misbehaviour the test chooses: `hang` (never sends response headers), `stall` (sends its headers and one
token, then nothing), `huge_error` (answers 500 and streams an endless body) or `ok` (a short reply)."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import subprocess
import sys
import threading
import time

import msgspec
import requests
from aiohttp import web

from tools.llama_server import free_port, stop


def rss_mb(pid: int) -> float:
    """A process's resident memory in MB (VmRSS)."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def health_seconds(base: str, timeout: float = 10) -> float:
    """Seconds a fresh connection's GET /health took (it must answer 200)."""
    began = time.monotonic()
    response = requests.get(base + "/health", timeout=timeout)
    assert response.status_code == 200, response.status_code
    return time.monotonic() - began


BYSTANDER = """
import sys, time, http.client
host, port = sys.argv[1], int(sys.argv[2])
while True:
    began = time.monotonic()
    try:
        connection = http.client.HTTPConnection(host, port, timeout=30)
        connection.request("GET", "/health")
        ok = connection.getresponse().status == 200
        connection.close()
    except Exception:
        ok = False
    print(time.monotonic() - began if ok else "inf", flush=True)
    time.sleep(0.1)
"""


class Watch:
    """While an attack runs: a bystander process's GET /health on a fresh connection every 0.1 s (`slowest`:
    the slowest answer, inf for none; a process of its own, so the attacking test's own work cannot slow it)
    and the server's RSS (`peak_mb`, polled in a thread)."""

    def __init__(self, base: str, pid: int):
        self.pid = pid
        self.peak_mb = self.before_mb = rss_mb(pid)
        host, port = base.removeprefix("http://").rsplit(":", 1)
        self.bystander = subprocess.Popen([sys.executable, "-c", BYSTANDER, host, port], stdout=subprocess.PIPE,
                                          text=True)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.slowest = 0.0

    def _run(self) -> None:
        while not self.done.wait(0.1):
            self.peak_mb = max(self.peak_mb, rss_mb(self.pid))

    def stop(self) -> None:
        self.done.set()
        self.thread.join(30)
        self.bystander.terminate()
        out, _ = self.bystander.communicate(timeout=30)
        times = [float(line) for line in out.split()]
        assert times, "the bystander asked nothing"
        self.slowest = max(times)


@contextlib.contextmanager
def front_door(*flags: str, log_path, nofile: int | None = None, timeout: float = 120):
    """`tokworker api FLAGS` on a free port (replay engine unless the flags name one); yields (base URL,
    process). `nofile`: the process's RLIMIT_NOFILE, soft and hard."""
    port = free_port()
    command = [sys.executable, "-m", "tokworker.cli", "api", "--port", str(port), "--workers", "1",
               "--served-model-name", "m", *flags]

    def limit():
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, preexec_fn=limit)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"tokworker api exited: {open(log_path, 'rb').read()[-3000:]!r}")
            try:
                if requests.get(base + "/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, "tokworker api did not become healthy"
            time.sleep(0.2)
        yield base, proc
    finally:
        stop(proc, 30)


class StandInEngine:
    """vLLM's tokens-only routes on aiohttp, in a thread of its own; `mode` chooses what POST
    /inference/v1/generate does. `open` counts the generate requests whose connection is still open;
    `error_bytes_sent` what the huge error bodies got written before their reader went away."""

    def __init__(self, mode: str = "ok", port: int = 0):
        self.mode = mode
        self.port = port
        self.open = 0
        self.served = 0
        self.error_bytes_sent = 0
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self.thread.start()
        started.wait(30)
        self.url = f"http://127.0.0.1:{self.port}"

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_post("/inference/v1/generate", self.generate)
        app.router.add_post("/inference/v1/abort_requests", self.abort)
        self.runner = web.AppRunner(app, handler_cancellation=True)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", self.port)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        started.set()
        self.loop.run_forever()

    async def models(self, request):
        return web.json_response({"data": [{"id": "m", "max_model_len": 4096}]})

    async def health(self, request):
        """vLLM's /health: 200 while its engine lives, however busy (a hung generation is not a dead engine)."""
        return web.Response()

    async def abort(self, request):
        return web.json_response({})

    async def generate(self, request):
        body = msgspec.json.decode(await request.read())
        self.open += 1
        try:
            if self.mode == "hang":
                await asyncio.sleep(3600)
            if self.mode == "huge_error":
                response = web.StreamResponse(status=500)
                await response.prepare(request)
                chunk = b"x" * (1 << 16)
                while True:                          # endless: only the reader going away ends it
                    await response.write(chunk)
                    self.error_bytes_sent += len(chunk)
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            if self.mode == "stall":
                event = {"request_id": body["request_id"], "choices": [{"token_ids": [72]}]}
                await response.write(b"data: " + msgspec.json.encode(event) + b"\n\n")
                await asyncio.sleep(3600)
            event = {"request_id": body["request_id"], "choices": [{"token_ids": [72, 101], "finish_reason": "length"}]}
            await response.write(b"data: " + msgspec.json.encode(event) + b"\n\ndata: [DONE]\n\n")
            self.served += 1
            return response
        finally:
            self.open -= 1

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
