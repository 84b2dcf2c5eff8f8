"""TokenizerPool.render_open: a chat rendered and its streams opened in one trip to one worker. The ids equal
render()'s, the streams step exactly as streams opened on those ids, a prompt with no room in the context
opens nothing anywhere, a caller that gives up mid-render leaves no stream behind on any worker, and a
stream opened so survives its worker's kill -9 (its replay opens it on the render's ids). A long prompt is
cut by its worker and its runs encoded on the others: the same ids, the same guarantees.
Covers tokworker.frontend.prompts."""

from __future__ import annotations

import asyncio
from array import array
import os
import signal

import pytest

from tokworker.frontend import TokenizerPool
from tokworker.protocol.deltas import StreamParams
from tokworker.protocol.messages import OpenStream

pytestmark = pytest.mark.slow  # worker processes

CHAT = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Naïve café, 日本語 and 🚀?"}]
REPLY = "Sure: naïve café, 日本語 and 🚀 — all of them, one token at a time."


async def _open_streams(pool: TokenizerPool) -> int:
    return sum(stats.streams_open for stats in await pool.stats())


async def _texts(pool: TokenizerPool, names: list[str], ids: list[int]) -> dict[str, str]:
    texts = dict.fromkeys(names, "")
    for token in ids:
        for name, update in (await pool.step({name: [token] for name in names})).items():
            texts[name] += "".join(delta.content or "" for delta in update.deltas)
    for name, update in (await pool.step({}, finish=names)).items():
        texts[name] += "".join(delta.content or "" for delta in update.deltas)
    return texts


async def _give_up_each(pool: TokenizerPool, calls, waits) -> None:
    """Start each call and cancel it after its wait; one that ended first (the machine was quick) closes what
    it opened, as its caller would. Then no stream may be left, in the pool or on a worker (the last render
    may still be running for a while)."""
    for call, wait in zip(calls, waits):
        task = asyncio.ensure_future(call())
        await asyncio.sleep(wait)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if not task.cancelled() and task.exception() is None:
            await pool.close_stream(*(stream.id for stream in task.result()[1]))
    for _ in range(100):
        if await _open_streams(pool) == 0 and pool.open_streams == 0:
            break
        await asyncio.sleep(0.05)
    assert await _open_streams(pool) == 0 and pool.open_streams == 0


def test_one_trip_equals_render_then_open():
    async def main():
        async with await TokenizerPool.spawn(workers=2) as pool:
            reply_ids = await pool.encode(REPLY)
            rendered = await pool.render(CHAT)
            one, streams = await pool.render_open(
                [OpenStream(stream_id=f"c{i}", params=StreamParams(max_tokens=None)) for i in range(3)], 4096, CHAT)
            # packed on the wire: an array('I'), no list of ints built in this process
            assert type(one.ids) is array and one.ids.tolist() == rendered.ids and one.opened and one.text is None
            assert all(stream.prompt_ids is one.ids for stream in streams)
            assert {stream.link for stream in streams} == {streams[0].link}        # one worker holds them all
            assert [stream.params.max_tokens for stream in streams] == [4096 - len(one.ids)] * 3
            await pool.open_stream("two-trips", StreamParams(), prompt_ids=rendered.ids)
            texts = await _texts(pool, ["c0", "c1", "c2", "two-trips"], reply_ids)
            assert set(texts.values()) == {REPLY}
            assert await _open_streams(pool) == 0
    asyncio.run(main())


def test_no_room_in_the_context_opens_nothing():
    async def main():
        async with await TokenizerPool.spawn(workers=1) as pool:
            prompt = len((await pool.render(CHAT)).ids)
            for context, max_tokens in ((prompt, None), (prompt + 5, 6), (prompt - 1, 1)):
                reply, streams = await pool.render_open(
                    [OpenStream(stream_id="s", params=StreamParams(max_tokens=max_tokens))], context, CHAT)
                assert (reply.opened, streams, len(reply.ids)) == (False, [], prompt)
                assert "s" not in pool.streams and pool.open_streams == 0
            assert await _open_streams(pool) == 0
            reply, streams = await pool.render_open(                               # exactly full: opens
                [OpenStream(stream_id="s", params=StreamParams(max_tokens=5))], prompt + 5, CHAT)
            assert reply.opened and streams[0].params.max_tokens == 5
            assert await _open_streams(pool) == 1
    asyncio.run(main())


def test_a_caller_giving_up_mid_render_leaves_no_stream():
    """The worker opens a render's streams only once its render is done, after any close the caller could
    send when it gives up; the pool closes them when the reply says they opened."""
    long_chat = [{"role": "user", "content": " ".join(f"word{i} 日本{i}" for i in range(6000))}]

    async def main():
        async with await TokenizerPool.spawn(workers=1) as pool:
            await _give_up_each(pool, [lambda wait=wait: pool.render_open(
                [OpenStream(stream_id=f"gone-{wait}-{i}") for i in range(2)], 1 << 20, long_chat)
                for wait in (0, 0.001, 0.005, 0.02, 0.05)], (0, 0.001, 0.005, 0.02, 0.05))
    asyncio.run(main())


def test_a_render_opened_stream_survives_its_workers_death():
    async def main():
        async with await TokenizerPool.spawn(workers=1) as pool:
            reply_ids = await pool.encode(REPLY)
            _, streams = await pool.render_open([OpenStream(stream_id="s")], 4096, CHAT)
            half = len(reply_ids) // 2
            text = ""
            for token in reply_ids[:half]:
                text += "".join(d.content or "" for d in (await pool.step({"s": [token]}))["s"].deltas)
            os.kill(pool.launcher.pids[0], signal.SIGKILL)
            for token in reply_ids[half:]:
                text += "".join(d.content or "" for d in (await pool.step({"s": [token]}))["s"].deltas)
            text += "".join(d.content or "" for d in (await pool.step({}, finish=["s"]))["s"].deltas)
            assert text == REPLY
            assert pool.links[0].recoveries >= 1
    asyncio.run(main())


def _long_chat(seed: int) -> list[dict]:
    """About 44,000 characters in 96 messages: over the length its worker cuts into parts."""
    from bench.pool import new_chats
    return [message for part in new_chats(24, seed=seed) for message in part]


def test_a_long_prompt_is_encoded_in_parts_on_the_other_workers():
    """Cut by the worker that renders it (pieces between control tokens, whole), its runs encoded on the other
    workers at once, joined: the ids of one render, and the streams open on them."""
    from tokworker.worker.handlers import SPLIT_CHARS

    chat = _long_chat(3)
    assert sum(len(message["content"]) for message in chat) > SPLIT_CHARS

    async def main():
        async with await TokenizerPool.spawn(workers=3) as pool:
            reply_ids = await pool.encode(REPLY)
            requests_before = sum(stats.requests for stats in await pool.stats())
            one, streams = await pool.render_open([OpenStream(stream_id=f"c{i}") for i in range(2)], 1 << 20, chat)
            served = sum(stats.requests for stats in await pool.stats()) - requests_before
            assert served == 1 + 2 + 2                  # the render, its two other runs, the two opens
            assert one.ids.tolist() == (await pool.render(chat)).ids and one.opened and not one.runs
            assert [stream.params.max_tokens for stream in streams] == [(1 << 20) - len(one.ids)] * 2
            assert set((await _texts(pool, ["c0", "c1"], reply_ids)).values()) == {REPLY}
            reply, none = await pool.render_open([OpenStream(stream_id="full")], len(one.ids), chat)
            assert (reply.ids.tolist(), reply.opened, none) == (one.ids.tolist(), False, [])
            assert await _open_streams(pool) == 0 and pool.open_streams == 0
    asyncio.run(main())


def test_giving_up_on_a_long_prompt_leaves_no_stream():
    async def main():
        async with await TokenizerPool.spawn(workers=2) as pool:
            await _give_up_each(pool, [lambda i=i: pool.render_open([OpenStream(stream_id=f"gone-{i}")], 1 << 20,
                                                                    _long_chat(10 + i)) for i in range(5)],
                                (0.005, 0.02, 0.04, 0.08, 0.15))
    asyncio.run(main())


def test_the_renders_own_arguments_and_the_templates_variables_go_where_render_puts_them():
    """add_generation_prompt, chat_template and a template variable (Qwen-style enable_thinking) reach the
    render as render() passes them: the same ids."""
    async def main():
        async with await TokenizerPool.spawn(workers=1) as pool:
            for kwargs in ({"add_generation_prompt": False}, {"chat_template": "chatml"},
                           {"enable_thinking": False, "documents": [{"title": "t", "text": "d"}]}):
                expected = (await pool.render(CHAT, **kwargs)).ids
                reply, streams = await pool.render_open([OpenStream(stream_id="s")], 4096, CHAT, **kwargs)
                assert reply.ids.tolist() == expected and streams[0].prompt_ids.tolist() == expected
                await pool.close_stream("s")
    asyncio.run(main())
