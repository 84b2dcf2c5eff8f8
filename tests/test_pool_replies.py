"""Replies that can't kill a worker, through real processes: a reply over the message limit is answered
TOO_LARGE before it is built; a client that floods a worker with big decodes and never reads is parked
(its replies held up to a byte bound, its requests unserved) while the same worker serves everyone else;
a huge single push through the hermes parser is linear; a replay past the budget gets TIMEOUT, not a
dead worker."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import uvloop
import zmq

from tokworker.frontend import InvalidRequest, PoolError, TokenizerPool
from tokworker.parsers.tools import get_tool_parser
from tokworker.protocol.deltas import StreamParams
from tokworker.protocol.messages import Decode, encode_message, frame
from tokworker.tokenizer import Tokenizer
from tokworker.worker.replies import reply_bound
from tokworker.protocol.messages import DecodeReply, EncodeReply

pytestmark = pytest.mark.slow  # worker processes

MODEL = Path(__file__).resolve().parent.parent / "tokworker" / "data" / "default"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def test_reply_bounds_are_upper_bounds():
    import msgspec
    for reply in (DecodeReply(texts=["abc", "日本語🚀", ""]), EncodeReply(ids=[[1, 2**31, 70000], []])):
        assert len(msgspec.msgpack.encode(reply)) <= reply_bound(reply)


def test_a_reply_over_the_limit_is_too_large_and_the_worker_goes_on():
    tokenizer = Tokenizer.from_dir(MODEL)
    longest = max(range(tokenizer.vocab_size), key=lambda i: len(tokenizer.decode([i])))
    many = 200_000 // len(tokenizer.decode([longest]).encode()) * 8

    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1, max_message_bytes=1 << 20) as pool:
            with pytest.raises(InvalidRequest) as failed:
                await pool.decode([longest] * many)            # a small request, a reply over 1 MiB
            assert failed.value.code == "too_large" and "message limit" in failed.value.message
            assert await pool.decode([longest]) == tokenizer.decode([longest])
            assert pool.launcher.restarts == 0

    uvloop.run(main())


def test_a_client_that_never_reads_cannot_take_the_worker_down():
    tokenizer = Tokenizer.from_dir(MODEL)
    ids = tokenizer.encode(" the quick brown fox jumps over the lazy dog") * 40_000      # ~1.7 MB of text
    text = "other clients are served while one floods"

    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1, memory_limit_mb=700, request_timeout=60) as pool:
            pid = pool.launcher.pids[0]
            context = zmq.Context()
            flood = context.socket(zmq.DEALER)
            flood.setsockopt(zmq.LINGER, 0)
            flood.setsockopt(zmq.RCVHWM, 1)                   # reads nothing: replies back up to the worker
            flood.setsockopt(zmq.RCVBUF, 4096)
            flood.connect(pool.links[0].endpoint)
            body = encode_message(Decode(ids=[ids]))
            for i in range(300):                              # ~500 MB of replies if the worker made them all
                flood.send(frame(i + 1, body))
            await pool.open_stream("s", buffer=False)
            started = time.monotonic()
            got = []
            for token in tokenizer.encode(text):
                got.extend(d.content for d in (await pool.step({"s": [token]}))["s"].deltas)
            assert "".join(got) == text
            assert await pool.encode(text) == tokenizer.encode(text)
            stats = (await pool.stats())[0]
            assert pool.launcher.pids[0] == pid and pool.launcher.restarts == 0 and stats.pid == pid
            status = Path(f"/proc/{pid}/status").read_text()          # not ru_maxrss: it counts the forking parent's
            rss_kb = int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1])
            assert rss_kb < 700 << 10
            flood.close()
            context.term()
            assert time.monotonic() - started < 60

    uvloop.run(main())


def test_one_huge_push_through_hermes_equals_small_ones():
    text = ('Some words first. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
            ' and after.') * 400
    whole = get_tool_parser("hermes", TOOLS)
    deltas = whole.feed(text) + whole.finish()
    pieces = get_tool_parser("hermes", TOOLS)
    streamed = [d for i in range(0, len(text), 7) for d in pieces.feed(text[i:i + 7])] + pieces.finish()

    def flat(ds):
        content = "".join(d.content or "" for d in ds)
        calls = {}
        for d in ds:
            for call in d.tool_calls or ():
                entry = calls.setdefault(call.index, ["", ""])
                if call.function is not None:
                    entry[0] += call.function.name or ""
                    entry[1] += call.function.arguments or ""
        return content, calls
    assert len(text) > 10 * 4096
    assert flat(deltas) == flat(streamed)
    assert len(flat(deltas)[1]) == 400


def test_a_replay_past_the_budget_is_a_timeout_not_a_dead_worker():
    tokenizer = Tokenizer.from_dir(MODEL)
    ids = tokenizer.encode(' <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')

    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1, budget_s=0.2, request_timeout=60) as pool:
            from tokworker.protocol.messages import OpenStream
            from tokworker.frontend.link import encode_request
            # 20,000 calls to parse, by the tool parser alone (no reasoning parser in front of it)
            params = StreamParams(tool_parser="hermes", tools=TOOLS)
            body = encode_request(OpenStream(stream_id="big", params=params, replay=[ids * 20_000]))
            with pytest.raises(PoolError) as failed:
                await pool.links[0].request(body, stateful=True)
            assert failed.value.code == "timeout"
            assert await pool.decode(ids) == tokenizer.decode(ids)
            assert pool.launcher.restarts == 0

    uvloop.run(main())
