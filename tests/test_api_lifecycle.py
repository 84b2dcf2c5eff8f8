"""Every admitted request ends exactly once, whatever is cancelled: storms of clients that hang up in each
phase of a request's life (waiting for the pool, while its prompt renders, while the engine takes it,
before its headers, mid-stream, waiting for a whole body) leave no request, stream, engine request or
concurrency slot behind, and a bystander is served throughout. A real front door (tests/api_server.py:
worker processes, real sockets) with a replay engine whose add() can be slowed, so a hang-up lands inside
the engine's add as it does with an HTTP engine that is slow to answer.
Covers tokworker.api.generation and tokworker.api.serving."""

from __future__ import annotations

import asyncio
import random
import threading
import time

import aiohttp
import pytest
import requests

from api_server import running, script
from tokworker.api.options import ApiOptions
from tokworker.engines.replay import ReplayEngine

pytestmark = [pytest.mark.slow, pytest.mark.long]  # storms of hang-ups at the front door on worker processes

MODEL = "tokworker-test"


class SlowAdd(ReplayEngine):
    """The replay engine, whose add() takes `add_delay` seconds first (an engine slow to accept)."""

    add_delay = 0.0

    async def add(self, request_id, prompt_ids, sampling):
        if self.add_delay:
            await asyncio.sleep(self.add_delay)
        await super().add(request_id, prompt_ids, sampling)


def body(stream: bool, scenario: str = "long") -> dict:
    return {"model": MODEL, "stream": stream, "max_tokens": 300,
            "messages": [{"role": "user", "content": f"Please answer. scenario:{scenario}"}]}


async def hang_ups(url: str, count: int, stream: bool, after: tuple[float, float], seed: int) -> None:
    """`count` clients that each send a request and hang up after a random time in `after` seconds."""
    rng = random.Random(seed)

    async def one(session):
        try:
            async with asyncio.timeout(rng.uniform(*after)):
                async with session.post(url + "/v1/chat/completions", json=body(stream)) as response:
                    async for _ in response.content.iter_any():
                        pass
        except (TimeoutError, aiohttp.ClientError):
            pass

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True)) as session:
        await asyncio.gather(*(one(session) for _ in range(count)))


def settled(server, within: float = 5.0) -> dict:
    """The server's books once quiet: requests in flight, pool streams, engine requests."""
    deadline = time.monotonic() + within
    while True:
        books = {"requests": server.api.serving.exchanges, "choices": len(server.api.serving.choices),
                 "streams": server.pool.open_streams, "engine": server.engine.running()}
        if not any(books.values()) or time.monotonic() > deadline:
            return books
        time.sleep(0.02)


@pytest.mark.parametrize("phase, stream, add_delay, after", [
    ("engine add", True, 0.3, (0.01, 0.25)),
    ("engine add, whole", False, 0.3, (0.01, 0.25)),
    ("headers and first steps", True, 0.0, (0.0, 0.05)),
    ("mid-stream", True, 0.0, (0.1, 0.6)),
    ("whole body", False, 0.0, (0.05, 0.6)),
])
def test_hang_ups_in_every_phase_leave_nothing_behind(phase, stream, add_delay, after):
    engine = SlowAdd(script, step_interval=0.005, max_model_len=4096)
    engine.add_delay = add_delay
    options = ApiOptions(served_model_name=[MODEL], max_concurrent_requests=50)
    with running(engine=engine, options=options) as server:
        bystander: list[float] = []
        stop = threading.Event()

        def watch():
            while not stop.is_set():
                began = time.monotonic()
                assert requests.get(server.url + "/health", timeout=5).status_code == 200
                bystander.append(time.monotonic() - began)
                time.sleep(0.05)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        asyncio.run(hang_ups(server.url, 300, stream, after, seed=len(phase)))
        stop.set()
        watcher.join(10)
        assert settled(server) == {"requests": 0, "choices": 0, "streams": 0, "engine": 0}, phase
        assert bystander and max(bystander) < 3.0, max(bystander)    # served throughout: milliseconds, not stuck
        # every slot came back: as many requests as the limit allows are served at once, and then some
        engine.add_delay = 0.0
        with requests.Session() as http:
            for _ in range(3):
                reply = http.post(server.url + "/v1/chat/completions", json=body(False, "plain"), timeout=30)
                assert reply.status_code == 200 and reply.json()["choices"][0]["finish_reason"] == "stop"
        assert settled(server) == {"requests": 0, "choices": 0, "streams": 0, "engine": 0}
