"""Streams through a real pool (worker processes, ipc sockets, uvloop) equal the in-process TextStream,
update for update, with many concurrent streams, random step sizes and pipelined steps; streams opened
with a ChunkFormat get the server-sent events those updates make, through worker deaths too.
Covers tokworker.worker.streams and tokworker.frontend.opens (open_stream)."""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
from pathlib import Path

import msgspec
import pytest
import uvloop

from tokworker.frontend import TokenizerPool
from tokworker.frontend.errors import InvalidRequest, StreamFailed, UnknownStream
from tokworker.protocol.deltas import ChunkFormat, StreamParams, StreamUpdate
from tokworker.wire.chat import ChunkWriter
from tokworker.stream.state import TextStream

pytestmark = pytest.mark.slow  # worker processes

MODEL = Path(__file__).resolve().parent.parent / "tokworker" / "data" / "default"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
FRAGMENTS = ["Hello", " world", ", and", " the answer is 42.", " 日本語のテキスト", " 🧑‍🚀🚀", " naïve café",
             "\n\n", " STOP", " </answer>", " some more words", " `code()`", " 𝔐𝔞𝔯𝔰", " ok"]
REASONING = "<think>\nLet me think about {x}.\n</think>\n\n"
TOOL_CALL = "<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"{x}\"}}}}\n</tool_call>"


class Script(msgspec.Struct):
    """One request as the engine would produce it: params, prompt, generated ids, and how they are batched."""

    stream_id: str
    params: StreamParams
    ids: list[int]
    batches: list[list[int]]
    prompt_text: str | None = None


def make_scripts(tokenizer, count: int, seed: int, fragments: int = 12) -> list[Script]:
    rng = random.Random(seed)
    eos = tokenizer.eos_token_ids[0]
    scripts = []
    for n in range(count):
        kind = rng.choice(["plain", "stop", "reasoning", "tools", "both"])
        text = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, fragments)))
        params = {}
        if kind == "stop":
            params.update(stop=["STOP", "</answer>"], include_stop_str_in_output=rng.random() < 0.3)
        if kind in ("reasoning", "both"):
            text = REASONING.format(x=rng.choice(["Paris", "日本", "🚀"])) + text
            params["reasoning_parser"] = "qwen3"
        if kind in ("tools", "both"):
            text += TOOL_CALL.format(x=rng.choice(["Paris", "Zürich", "東京"]))
            params.update(tool_parser="hermes", tools=TOOLS)
        if rng.random() < 0.2:
            params["max_tokens"] = rng.randint(1, 40)
        ids = tokenizer.encode(text) + ([eos] if rng.random() < 0.7 else [])
        batches, at = [], 0
        while at < len(ids):
            size = rng.choice([1, 1, 1, 2, 3, 5, 8])
            batches.append(ids[at:at + size])
            at += size
        scripts.append(Script(f"s{seed}-{n}", StreamParams(**params), ids, batches,
                              "<|im_start|>assistant\n" if "reasoning_parser" in params else None))
    return scripts


def reference(tokenizer, script: Script) -> list[StreamUpdate]:
    """The in-process TextStream fed the same batches; a stream that outlives its ids is finished."""
    stream = TextStream(tokenizer, script.params, prompt_text=script.prompt_text)
    updates = []
    for batch in script.batches:
        updates.append(stream.push(batch))
        if updates[-1].finish_reason is not None:
            return updates
    updates.append(stream.finish())
    return updates


def normalized(updates: list[StreamUpdate]) -> list:
    """Tool-call ids are random per parser: compare everything else exactly."""
    out = []
    for update in updates:
        data = msgspec.to_builtins(update)
        for delta in data.get("deltas", []):
            for call in delta.get("tool_calls", []):
                if "id" in call:
                    call["id"] = "call"
        out.append(data)
    return out


def chunk_format(script: Script) -> ChunkFormat:
    return ChunkFormat(id=f"chatcmpl-{script.stream_id}", model="tokworker-default", created=1700000000)


async def drive(pool: TokenizerPool, scripts: list[Script], rng: random.Random, depth: int = 1,
                between=None, chunked=(), engine_ids: bool = False) -> dict[str, list[StreamUpdate]]:
    """Play the engine: every step carries the next batch of every live stream, up to `depth` steps in
    flight. Returns each stream's updates in order. Streams named in `chunked` get server-sent events. With
    `engine_ids`, the engine's record of each stream's stepped ids is what a replay reads (no pool log)."""
    stepped: dict[str, list[int]] = {s.stream_id: [] for s in scripts}
    for script in scripts:
        await pool.open_stream(script.stream_id, script.params, prompt_text=script.prompt_text, buffer=False,
                               chunks=chunk_format(script) if script.stream_id in chunked else None,
                               engine_ids=stepped[script.stream_id].copy if engine_ids else None)
    got = {s.stream_id: [] for s in scripts}
    cursor = {s.stream_id: 0 for s in scripts}
    by_id = {s.stream_id: s for s in scripts}
    live = set(by_id)
    in_flight: list[asyncio.Future] = []

    def collect(result):
        for stream_id, update in result.items():
            got[stream_id].append(update)
            if update.finish_reason is not None:
                live.discard(stream_id)

    while live or in_flight:
        ids, finish = {}, []
        for stream_id in sorted(live):
            script, k = by_id[stream_id], cursor[stream_id]
            if k < len(script.batches):
                ids[stream_id] = script.batches[k]
                stepped[stream_id] += script.batches[k]
                cursor[stream_id] = k + 1
            elif k == len(script.batches):
                finish.append(stream_id)
                cursor[stream_id] = k + 1
        if ids or finish:
            in_flight.append(pool.submit_step(ids, finish))
        if len(in_flight) >= depth or not (ids or finish):
            if not in_flight:
                break
            collect(await in_flight.pop(0))
        if between is not None:
            await between()
        await asyncio.sleep(0)
    return got


def check(tokenizer, scripts, got):
    for script in scripts:
        updates = [u for u in got[script.stream_id]]
        # after a stream finished, late ids (pipelined steps) get empty updates
        while updates and updates[-1] == StreamUpdate() and len(updates) > len(reference(tokenizer, script)):
            updates.pop()
        assert normalized(updates) == normalized(reference(tokenizer, script)), script.stream_id


def run(coro):
    return uvloop.run(coro)


def test_many_concurrent_streams_equal_the_in_process_engine(tokenizer):
    scripts = make_scripts(tokenizer, 96, seed=1)

    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=2) as pool:
            got = await drive(pool, scripts, random.Random(1))
            assert {link.open_streams for link in pool.links} == {0}      # finished streams are not counted open
            stats = await pool.stats()
            assert sum(s.streams_opened for s in stats) == len(scripts)
            assert min(s.streams_opened for s in stats) > len(scripts) // 4   # spread over both workers
            assert sum(s.streams_open for s in stats) == 0
            return got

    check(tokenizer, scripts, run(main()))


def test_pipelined_steps_keep_every_stream_in_order(tokenizer):
    scripts = make_scripts(tokenizer, 48, seed=2)

    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=2) as pool:
            return await drive(pool, scripts, random.Random(2), depth=3)

    check(tokenizer, scripts, run(main()))


def test_stream_iterators_see_what_steps_return(tokenizer):
    scripts = make_scripts(tokenizer, 16, seed=3)

    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1) as pool:
            streams = [await pool.open_stream(s.stream_id, s.params, prompt_text=s.prompt_text) for s in scripts]

            async def consume(stream):
                return [update async for update in stream]

            readers = [asyncio.create_task(consume(stream)) for stream in streams]
            for k in range(max(len(s.batches) for s in scripts) + 1):
                ids = {s.stream_id: s.batches[k] for s in scripts if k < len(s.batches)}
                finish = [s.stream_id for s in scripts if k == len(s.batches)]
                await pool.step(ids, finish)
                if k % 3 == 0:
                    await asyncio.sleep(0)               # readers fall behind: their updates get merged
            return await asyncio.gather(*readers)

    results = run(main())
    for script, updates in zip(scripts, results):
        expected = reference(tokenizer, script)
        assert updates[-1].finish_reason == expected[-1].finish_reason
        text = lambda us, field: "".join(getattr(d, field) or "" for u in us for d in u.deltas)  # noqa: E731
        for field in ("content", "reasoning_content"):
            assert text(updates, field) == text(expected, field)


def test_stream_errors_are_typed(tokenizer):
    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1) as pool:
            await pool.open_stream("a")
            with pytest.raises(InvalidRequest):
                await pool.open_stream("a")
            with pytest.raises(UnknownStream):
                await pool.step({"nope": [1]})
            with pytest.raises(InvalidRequest):
                await pool.open_stream("bad", StreamParams(reasoning_parser="no-such-parser"))
            assert (await pool.step({"a": [10**6]}))["a"].finish_reason == "error"   # an id outside the vocabulary
            assert (await pool.step({"a": [5]}))["a"] == StreamUpdate()               # ... then it is over
            stream = await pool.open_stream("b")
            await pool.step({"b": tokenizer.encode("hi there")})
            await pool.close_stream("b")
            assert [u.deltas[0].content async for u in stream] == ["hi there"]
            with pytest.raises(UnknownStream):
                await pool.step({"b": [1]})
            c = await pool.open_stream("c")
            await pool.step({"c": [10**6]})
            with pytest.raises(StreamFailed):
                async for _ in c:
                    pass

    run(main())


# ---------------------------------------------------------------- server-sent events written by the workers

def same_call_ids(body: bytes) -> bytes:
    """Tool-call ids are random per worker process: compare everything else byte for byte."""
    return re.sub(rb'"id":"call_[0-9a-f]+"', b'"id":"call"', body)


def reference_sse(tokenizer, script: Script) -> bytes:
    """What an API process that did the text work itself would write for this stream."""
    writer = ChunkWriter.for_format(chunk_format(script))
    return same_call_ids(b"".join(writer.sse(update) for update in reference(tokenizer, script)))


def received_sse(updates: list[StreamUpdate]) -> bytes:
    assert all(not update.deltas for update in updates)
    return same_call_ids(b"".join(update.sse for update in updates))


def test_chunked_streams_get_the_events_of_their_deltas(tokenizer):
    scripts = make_scripts(tokenizer, 40, seed=6)
    twins = [msgspec.structs.replace(s, stream_id=f"{s.stream_id}-sse") for s in scripts]

    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=2) as pool:
            return await drive(pool, scripts + twins, random.Random(6), depth=2,
                               chunked={t.stream_id for t in twins})

    got = run(main())
    check(tokenizer, scripts, got)
    for script, twin in zip(scripts, twins):
        body = received_sse(got[twin.stream_id])
        assert body == reference_sse(tokenizer, twin), twin.stream_id
        # the deltas the unchunked twin got, written as events by the API process, say the same
        writer = ChunkWriter.for_format(chunk_format(twin))
        assert body == same_call_ids(b"".join(writer.sse(u) for u in got[script.stream_id])), twin.stream_id
        assert body.count(b'"role":"assistant"') == 1


def test_kill_9_mid_stream_sends_every_event_once(tokenizer):
    rng = random.Random(7)
    scripts = make_scripts(tokenizer, 12, seed=7, fragments=40)

    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=2) as pool:
            kills, steps = [], [0]

            async def between():
                steps[0] += 1
                if len(kills) < 3 and steps[0] % 6 == 3:
                    index = rng.randrange(2)
                    pid = pool.launcher.pids[index]
                    if pid is not None:
                        await asyncio.sleep(rng.choice([0, 0.001]))
                        os.kill(pid, signal.SIGKILL)
                        kills.append(pid)

            got = await drive(pool, scripts, rng, depth=2, between=between,
                              chunked={s.stream_id for s in scripts})
            assert len(kills) == 3 and sum(link.recoveries for link in pool.links) >= 3
            return got

    got = run(main())
    for script in scripts:
        body = received_sse(got[script.stream_id])
        assert body == reference_sse(tokenizer, script), script.stream_id
        assert body.count(b'"role":"assistant"') == 1


def test_chunked_stream_iterators_join_the_events_they_fell_behind_on(tokenizer):
    scripts = make_scripts(tokenizer, 16, seed=8)

    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1) as pool:
            streams = [await pool.open_stream(s.stream_id, s.params, prompt_text=s.prompt_text,
                                              chunks=chunk_format(s)) for s in scripts]

            async def consume(stream):
                return [update async for update in stream]

            live = [asyncio.create_task(consume(stream)) for stream in streams[::2]]
            for k in range(max(len(s.batches) for s in scripts) + 1):
                ids = {s.stream_id: s.batches[k] for s in scripts if k < len(s.batches)}
                finish = [s.stream_id for s in scripts if k == len(s.batches)]
                await pool.step(ids, finish)
            late = [asyncio.create_task(consume(stream)) for stream in streams[1::2]]   # merged when read
            return await asyncio.gather(*live), await asyncio.gather(*late)

    live, late = run(main())
    assert all(len(updates) == 1 for updates in late)
    for script, updates in zip(scripts, [u for pair in zip(live, late) for u in pair]):
        assert received_sse(updates) == reference_sse(tokenizer, script), script.stream_id
        assert updates[-1].finish_reason == reference(tokenizer, script)[-1].finish_reason
