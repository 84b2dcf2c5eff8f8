"""The HTTP engine adapters' bounds, through `tokworker api --engine vllm` (a real process) in front of a
stand-in engine that misbehaves: one that never sends its response headers cannot keep connections once
their clients gave up, nor hold a waiting client past --engine-header-timeout-s; one that answers 500 with an
endless body costs the API process only --engine-error-bytes of it."""

from __future__ import annotations

import asyncio
import threading
import time

import aiohttp
import pytest
import requests

from front_doors import StandInEngine, front_door, health_seconds, rss_mb
from tests.work import RESPONSIVE_S
from tools.llama_server import free_port

pytestmark = [pytest.mark.slow, pytest.mark.long]  # misbehaving engines behind a real front door
COMPLETION = {"model": "m", "prompt": [1, 2, 3], "max_tokens": 2}


@pytest.fixture
def engine():
    standin = StandInEngine()
    yield standin
    standin.close()


def wait_until(check, within: float) -> bool:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


async def give_up(base: str, clients: int, after: float) -> int:
    """`clients` completions at once, each abandoned (its connection closed) after `after` seconds; how many
    were abandoned rather than answered."""
    async with aiohttp.ClientSession() as session:
        async def one():
            try:
                async with asyncio.timeout(after):
                    async with session.post(base + "/v1/completions", json=COMPLETION) as response:
                        await response.read()
                        return 0
            except TimeoutError:
                return 1
        return sum(await asyncio.gather(*(one() for _ in range(clients))))


def test_clients_giving_up_on_a_silent_engine_release_its_connections(engine, tmp_path):
    """Scaled from 400 clients against the default 256 connections: 40 against 8. Before, each abandoned
    request kept its engine connection, so the pool filled and the next good request hung."""
    engine.mode = "hang"
    with front_door("--engine", "vllm", "--engine-url", engine.url, "--engine-max-connections", "8",
                    "--engine-header-timeout-s", "600", log_path=tmp_path / "api.log") as (base, _):
        for clients in (8, 40):                     # exactly the pool, then five times it at once
            assert asyncio.run(give_up(base, clients, 0.5)) == clients
            assert wait_until(lambda: engine.open == 0, 15), f"{engine.open} engine connections still open"
        engine.mode = "ok"
        reply = requests.post(base + "/v1/completions", json=COMPLETION, timeout=30)   # served, not hung
        assert reply.status_code == 200, reply.text
        assert engine.served == 1


def test_a_pool_full_of_slow_requests_is_not_a_dead_engine(engine, tmp_path):
    """Every engine connection busy with a request still waiting (as at full load with long replies): the
    health poll has a connection of its own, so /health stays 200 and new requests are not refused with
    503. Before, the poll queued behind the requests, timed out after 2 s, and the front door refused all."""
    engine.mode = "hang"
    with front_door("--engine", "vllm", "--engine-url", engine.url, "--engine-max-connections", "2",
                    "--health-interval", "0.2", log_path=tmp_path / "api.log") as (base, _):
        async def hold_and_watch():
            async with aiohttp.ClientSession() as session:
                held = [asyncio.create_task(session.post(base + "/v1/completions", json=COMPLETION))
                        for _ in range(2)]
                await asyncio.sleep(0.5)
                statuses = []
                for _ in range(15):                         # 3 s: past the poll's 2 s timeout
                    async with session.get(base + "/health") as response:
                        statuses.append(response.status)
                    await asyncio.sleep(0.2)
                for task in held:
                    task.cancel()
                await asyncio.gather(*held, return_exceptions=True)
                return statuses
        statuses = asyncio.run(hold_and_watch())
        assert engine.open == 0 or wait_until(lambda: engine.open == 0, 15)
        assert set(statuses) == {200}, statuses


def test_the_front_door_waits_for_an_engine_that_starts_after_it(tmp_path):
    """Started beside its engine (one pod, one unit), `tokworker api` waits for the engine to answer instead
    of exiting (it used to fail at once while the engine loaded its model), and says so in its log."""
    port = free_port()
    later: list[StandInEngine] = []
    starter = threading.Timer(3.0, lambda: later.append(StandInEngine(port=port)))
    starter.start()
    try:
        with front_door("--engine", "vllm", "--engine-url", f"http://127.0.0.1:{port}",
                        log_path=tmp_path / "api.log") as (base, _):
            reply = requests.post(base + "/v1/completions", json=COMPLETION, timeout=30)
            assert reply.status_code == 200, reply.text
        assert b"waiting for vllm at http://127.0.0.1:" in (tmp_path / "api.log").read_bytes()
    finally:
        starter.join()
        for engine in later:
            engine.close()


def test_an_engine_that_never_answers_at_start_ends_the_wait(tmp_path):
    port = free_port()
    began = time.monotonic()
    with pytest.raises(RuntimeError, match="tokworker api exited"):
        with front_door("--engine", "vllm", "--engine-url", f"http://127.0.0.1:{port}", "--engine-start-wait-s", "2",
                        log_path=tmp_path / "api.log"):
            pass
    assert time.monotonic() - began < 30
    assert b"does not answer after 2 s" in (tmp_path / "api.log").read_bytes()


def test_an_engine_that_never_sends_headers_times_out(engine, tmp_path):
    engine.mode = "hang"
    with front_door("--engine", "vllm", "--engine-url", engine.url, "--engine-header-timeout-s", "1",
                    log_path=tmp_path / "api.log") as (base, _):
        began = time.monotonic()
        reply = requests.post(base + "/v1/completions", json=COMPLETION, timeout=30)
        took = time.monotonic() - began
        assert reply.status_code == 504, reply.text
        assert "no response headers within 1 s" in reply.json()["error"]["message"]
        assert 1 <= took < 1 + RESPONSIVE_S, took                # not before the timeout, nor the client's 30 s
        assert wait_until(lambda: engine.open == 0, 5)         # the connection went with the request


def test_an_engine_that_stops_sending_mid_stream_times_out(engine, tmp_path):
    engine.mode = "stall"
    with front_door("--engine", "vllm", "--engine-url", engine.url, "--engine-read-timeout-s", "1",
                    log_path=tmp_path / "api.log") as (base, _):
        began = time.monotonic()
        reply = requests.post(base + "/v1/completions", json=COMPLETION, timeout=30)
        assert reply.status_code == 504, reply.text
        assert "sent nothing for 1 s (--engine-read-timeout-s)" in reply.json()["error"]["message"]
        assert time.monotonic() - began < 1 + RESPONSIVE_S
        assert wait_until(lambda: engine.open == 0, 5)


def test_an_engines_endless_error_body_is_read_only_up_to_its_bound(engine, tmp_path):
    """Before, an engine answering 500 with a 2 GB body was read whole (4.2 GB peak)."""
    engine.mode = "huge_error"
    with front_door("--engine", "vllm", "--engine-url", engine.url, log_path=tmp_path / "api.log") as (base, proc):
        before = rss_mb(proc.pid)
        for _ in range(4):
            reply = requests.post(base + "/v1/completions", json=COMPLETION, timeout=30)
            assert reply.status_code == 502, reply.text          # the engine's failure: a bad gateway
            assert "vllm answered 500: xxxx" in reply.json()["error"]["message"]
        assert wait_until(lambda: engine.open == 0, 5)
        assert engine.error_bytes_sent < 64 << 20               # it stopped reading: the engine's writes stopped
        assert rss_mb(proc.pid) - before < 40
        assert health_seconds(base) < RESPONSIVE_S


def test_an_abort_while_add_waits_for_headers_ends_both(engine):
    """abort() of a request whose add() still waits for the engine's headers: the add ends at once with an
    EngineError, and the engine's connection is closed."""
    from tokworker.engines.base import EngineError, SamplingParams
    from tokworker.engines.vllm import VllmEngine

    engine.mode = "hang"

    async def run():
        vllm = VllmEngine(engine.url)
        await vllm.start(None)
        try:
            adding = asyncio.ensure_future(vllm.add("r1", [1, 2, 3], SamplingParams(max_tokens=2)))
            await asyncio.sleep(0.3)
            vllm.abort(["r1"])
            with pytest.raises(EngineError, match="aborted before the engine answered"):
                await asyncio.wait_for(adding, 2)
            return vllm.running()
        finally:
            await vllm.close()

    assert asyncio.run(run()) == 0
    assert wait_until(lambda: engine.open == 0, 5)
