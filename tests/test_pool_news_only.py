"""News-only steps (protocol version 9, frontend/link.py `send_news_only`): with `pool.on_news` set, a step of
streams whose worker writes their client's socket goes out without waiting for an answer, and the worker
answers only when it has something to say (a stream's end, a failure), which reaches `on_news`. A real worker,
a real socket pair for the client's connection: the worker writes every event to the socket and leaves the
steps unanswered, the stop string's end comes as news, an id outside the vocabulary fails the stream as
news, a step after ASK_EVERY_S without an answered request is answered again (the hang clock's), and a
property holds the client's bytes equal to those of answered steps whatever the text and the steps' sizes."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import socket

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tokworker.frontend import TokenizerPool
from tokworker.frontend.errors import PoolError
from tokworker.frontend.link import ASK_EVERY_S
from tokworker.protocol.deltas import EMPTY, ChunkFormat, StreamParams
from tests.test_pool_streams import MODEL
from tests.test_sinks import read_all

pytestmark = pytest.mark.slow  # worker processes

NAMES = itertools.count()
TEXT = "Every word of this reply goes from the worker to the client's socket, and then STOP comes"


def chat_contents(written: bytes) -> tuple[str, list]:
    """The chat chunks' joined content and finish reasons, from the HTTP chunks the worker wrote."""
    events = [json.loads(line[6:]) for line in written.split(b"\n") if line.startswith(b"data: {")]
    return ("".join(e["choices"][0]["delta"].get("content") or "" for e in events),
            [e["choices"][0]["finish_reason"] for e in events if e["choices"][0]["finish_reason"]])


async def opened(pool: TokenizerPool, name: str, stop=()) -> socket.socket:
    """A direct stream named `name` whose client's socket went to its worker: the client's end."""
    await pool.open_stream(name, StreamParams(stop=list(stop)), buffer=False, sink=True,
                           chunks=ChunkFormat(id=f"chatcmpl-{name}", model="m", created=1))
    ours, client = socket.socketpair()
    assert pool.hand_over(name, ours.fileno())
    ours.close()                                  # the worker holds its own copy
    return client


async def until(condition, seconds: float = 5.0) -> None:
    for _ in range(int(seconds / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never happened")


def test_steps_of_direct_streams_go_unanswered_and_their_end_comes_as_news():
    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1) as pool:
            news: list[dict] = []
            pool.on_news = news.append
            link = pool.links[0]
            ids = await pool.encode(TEXT)
            before = await pool.encode(TEXT[:TEXT.index(" STOP")])
            assert ids[:len(before)] == before
            client = await opened(pool, "s", stop=["STOP"])
            for token in before:
                assert await pool.step({"s": [token]}) == {}    # nobody waits for these
            assert len(link.news_only) == len(before)           # ... and none was answered
            await pool.encode("any answered request")           # served after them: they had nothing to say
            assert not link.news_only and news == []
            for token in ids[len(before):]:
                assert await pool.step({"s": [token]}) in ({}, {"s": EMPTY})   # {}: sent; then: it had ended
                await asyncio.sleep(0.01)
            await until(lambda: news)
            assert [list(told) for told in news] == [["s"]] and news[0]["s"].finish_reason == "stop"
            written = bytearray()
            await until(lambda: written.extend(read_all(client)) or b"[DONE]" in written)
            assert chat_contents(written) == (TEXT[:TEXT.index("STOP")], ["stop"])
            assert pool.open_streams == 0

    asyncio.run(main())


def test_a_failure_in_a_news_only_step_is_news():
    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1) as pool:
            news: list[dict] = []
            pool.on_news = news.append
            ids = await pool.encode("Fine so far")
            client = await opened(pool, "s")             # held: a closed one is news too
            assert await pool.step({"s": ids}) == {}
            assert await pool.step({"s": [10 ** 9]}) == {}       # no such token
            await until(lambda: news)
            failure = news[0]["s"]
            assert failure.finish_reason == "error" and "not in the vocabulary" in failure.message, failure
            client.close()

    asyncio.run(main())


def test_a_step_is_answered_again_once_nothing_was_for_a_while():
    """So a hung worker is still found: news-only steps go out only within ASK_EVERY_S of an answered
    request; the step after that waits for its answer."""
    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1) as pool:
            pool.on_news = lambda updates: None
            ids = await pool.encode("one two three")
            client = await opened(pool, "s")             # held: a closed one is news too
            assert await pool.step({"s": ids[:1]}) == {}
            await asyncio.sleep(ASK_EVERY_S + 0.1)
            assert list(await pool.step({"s": ids[1:2]})) == ["s"]      # answered
            assert await pool.step({"s": ids[2:]}) == {}
            client.close()

    asyncio.run(main())


def test_without_on_news_every_step_is_answered():
    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1) as pool:
            ids = await pool.encode("one two three")
            client = await opened(pool, "s")             # held: a closed one is news too
            for token in ids:
                assert list(await pool.step({"s": [token]})) == ["s"]
            assert not pool.links[0].news_only
            client.close()

    asyncio.run(main())


@pytest.fixture(scope="module")
def served():
    """One pool (one worker) for every example, on a loop of its own."""
    loop = asyncio.new_event_loop()
    pool = loop.run_until_complete(TokenizerPool.spawn(MODEL, workers=1))
    yield loop, pool
    loop.run_until_complete(pool.close())
    loop.close()


def read_to_end(client: socket.socket) -> bytes:
    client.settimeout(10)
    data = b""
    while chunk := client.recv(1 << 16):
        data += chunk
    client.close()
    return data


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(st.sampled_from(["alpha", " beta", " STOP", "é", " 日本", "\n", " ga", "mma", "!"]),
                      min_size=1, max_size=12),
       cuts=st.lists(st.integers(1, 4), min_size=1, max_size=12))
def test_news_only_steps_write_the_bytes_awaited_steps_write(served, words, cuts):
    """Whatever the text and however the engine groups its ids into steps, the client's bytes are the same
    whether the steps are answered or news-only (a stop string's end included)."""
    loop, pool = served

    async def stream(name: str, news_only: bool) -> bytes:
        pool.on_news = (lambda updates: None) if news_only else None
        ids = await pool.encode("".join(words))
        client = await opened(pool, name, stop=["STOP"])
        at, turn, quiet = 0, 0, 0
        while at < len(ids):
            size, sent = cuts[turn % len(cuts)], len(pool.links[0].news_only)
            await pool.step({name: ids[at:at + size]})
            quiet += len(pool.links[0].news_only) > sent
            at, turn = at + size, turn + 1
        assert bool(quiet) == news_only                 # the first step at least went out news-only
        await pool.step({}, finish=[name])
        return read_to_end(client)

    names = [f"s-{next(NAMES)}" for _ in range(2)]
    answered = loop.run_until_complete(stream(names[0], False))
    told = loop.run_until_complete(stream(names[1], True))
    assert told.replace(names[1].encode(), b"") == answered.replace(names[0].encode(), b"")
    assert answered.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")


def test_a_hung_worker_is_still_found_when_its_steps_go_news_only():
    """Stopped (SIGSTOP), the worker answers nothing and news-only steps wait for nothing; the answered step
    after ASK_EVERY_S does, so the hang clock finds it, the launcher replaces it, and its direct stream fails
    (its client's socket was with the worker)."""
    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1, hang_timeout=0.5) as pool:
            news: list[dict] = []
            pool.on_news = news.append
            link = pool.links[0]
            ids = await pool.encode("one two three four five six seven eight nine ten")
            client = await opened(pool, "s")
            assert await pool.step({"s": ids[:1]}) == {}
            os.kill(link.info.pid, signal.SIGSTOP)
            failure = None
            for token in ids * 40:                              # the engine goes on stepping (8 s at most)
                try:
                    result = await asyncio.wait_for(pool.step({"s": [token]}), 10)
                except PoolError as error:
                    failure = error
                    break
                if "s" in result and result["s"].finish_reason == "error":
                    failure = result["s"]
                    break
                await asyncio.sleep(0.02)
            assert link.hangs == 1 and pool.launcher.restarts == 1, failure
            assert pool.open_streams == 0
            client.close()

    asyncio.run(main())


def test_a_news_only_share_beside_answered_ones_tells_its_news_and_the_step_waits_for_the_rest():
    """Three workers: one stream written by its worker (news-only), two forwarded (answered, one StepCall).
    The news-only share's end goes to on_news, never into the step's call; the step returns both forwarded
    streams' updates, every step."""
    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=3) as pool:
            news: list[dict] = []
            pool.on_news = news.append
            ids = await pool.encode(TEXT)
            client = await opened(pool, "direct", stop=["STOP"])
            for name in ("b", "c"):
                await pool.open_stream(name, buffer=False, chunks=ChunkFormat(id=name, model="m", created=1))
            assert len({pool.streams[name].link for name in ("direct", "b", "c")}) == 3
            texts = {"b": b"", "c": b""}
            for token in ids:
                step = {"b": [token], "c": [token]}
                if not news:
                    step["direct"] = [token]
                updates = await pool.step(step)
                assert set(updates) == {"b", "c"}
                for name in texts:
                    texts[name] += updates[name].sse
                await asyncio.sleep(0.005)
            await until(lambda: news)
            assert [list(told) for told in news] == [["direct"]] and news[0]["direct"].finish_reason == "stop"
            assert chat_contents(texts["b"])[0] == chat_contents(texts["c"])[0] == TEXT
            client.close()

    asyncio.run(main())
