"""kill -9 workers at random moments while streams and stateless requests run: the launcher restarts them,
the links replay and re-send, and every stream's updates still equal the in-process engine's, step for
step: no delta lost, none duplicated. Stateless requests in flight all come back right.
Covers tokworker.frontend.recovery."""

from __future__ import annotations

import asyncio
import os
import random
import signal

import pytest
import uvloop

from tokworker.frontend import TokenizerPool
from tests.test_pool_streams import MODEL, check, drive, make_scripts

pytestmark = [pytest.mark.slow, pytest.mark.long]  # kill -9 of worker processes at random moments

KILLS = 10


async def _wait_until_up(pool: TokenizerPool, index: int, old_pid: int) -> None:
    while True:
        pid = pool.launcher.pids[index]
        if pid is not None and pid != old_pid:
            return
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("engine_ids", [False, True], ids=["pool log", "engine's record"])
def test_kill_9_at_random_points_loses_and_duplicates_nothing(tokenizer, engine_ids):
    rng = random.Random(5)
    scripts = make_scripts(tokenizer, 40, seed=5, fragments=40)      # long streams: many steps to kill into
    texts = [f"request {i}: " + " ".join(rng.choice(["alpha", "βeta", "日本", "🚀", "x"]) for _ in range(20))
             for i in range(400)]

    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=2) as pool:
            kills = []
            steps = [0]

            async def between():
                steps[0] += 1
                # kill at random moments: right after sending a step, mid-replay of the last kill, ...
                if len(kills) < KILLS and rng.random() < 0.3 and (not kills or steps[0] - kills[-1][2] >= 2):
                    index = rng.randrange(2)
                    pid = pool.launcher.pids[index]
                    # not a request's third death: a request that dies with its worker max_attempts times
                    # is a poison request by design (on a busy machine a replay can outlast two kills)
                    link = pool.links[index]
                    if pid is not None and all(p.attempts < 2 for p in link.pending.values()):
                        await asyncio.sleep(rng.choice([0, 0, 0.001, 0.005]))
                        os.kill(pid, signal.SIGKILL)
                        kills.append((index, pid, steps[0]))

            async def stateless():
                results = []
                for i in range(0, len(texts), 8):
                    batch = texts[i:i + 8]
                    results.extend(await pool.encode(batch))
                    await asyncio.sleep(rng.random() * 0.01)
                return results

            encoder = asyncio.create_task(stateless())
            got = await drive(pool, scripts, rng, depth=2, between=between, engine_ids=engine_ids)
            assert all((s.log is None) == engine_ids for s in pool.streams.values() if not s.finished)
            encoded = await encoder
            for index, pid, _ in kills[-2:]:
                await _wait_until_up(pool, index, pid)
            assert encoded == [tokenizer.encode(t) for t in texts]
            assert len(kills) == KILLS
            assert pool.launcher.restarts >= KILLS
            assert sum(link.recoveries for link in pool.links) >= KILLS
            return got

    got = uvloop.run(main())
    check(tokenizer, scripts, got)


@pytest.mark.parametrize("engine_ids", [False, True], ids=["pool log", "engine's record"])
def test_a_long_stream_replays_in_several_batches_after_a_kill(tokenizer, engine_ids):
    """A stream whose log (or the engine's record) is longer than one replay batch (REPLAY_BATCH ids) is
    rebuilt on the new worker from it, in several batches, and goes on exactly as the in-process engine does."""
    from tokworker.frontend.stream import REPLAY_BATCH
    from tests.test_pool_streams import Script, StreamParams
    text = ("Some words 日本語 🚀, and <think>not reasoning</think> numbers 3.14. " * 400)
    ids = tokenizer.encode(text)
    assert len(ids) > 2 * REPLAY_BATCH
    rng = random.Random(11)
    batches, at = [], 0
    while at < len(ids):
        size = rng.choice([1, 7, 64, 300])
        batches.append(ids[at:at + size])
        at += size
    script = Script("long", StreamParams(stop=["never appears"], reasoning_parser="qwen3"), ids, batches,
                    "<|im_start|>assistant\n")

    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1) as pool:
            kills, steps = [], [0]

            async def between():
                steps[0] += 1
                if not kills and steps[0] == len(batches) - 5:     # late: the log holds almost every id
                    pid = pool.launcher.pids[0]
                    os.kill(pid, signal.SIGKILL)
                    kills.append(pid)

            got = await drive(pool, [script], rng, depth=1, between=between, engine_ids=engine_ids)
            assert kills and pool.links[0].recoveries >= 1
            return got

    got = uvloop.run(main())
    check(tokenizer, [script], got)


@pytest.mark.parametrize("bad", [[5, "x"], [5, 2**63], ([5], [])], ids=["a string", "past int64", "a tuple"])
def test_a_step_with_a_bad_batch_is_refused_whole_and_a_kill_after_it_replays_exactly(tokenizer, bad):
    """A step whose last batch is not a list of ids raises InvalidRequest naming that stream, sends nothing
    and logs nothing (array.extend had already appended part of it): after a kill -9 the streams are rebuilt
    from their logs and continue exactly as in-process."""
    from tokworker.frontend.errors import InvalidRequest
    from tokworker.protocol.deltas import StreamParams
    from tokworker.stream.state import TextStream
    ids = tokenizer.encode("Naïve café, 日本語 and 🚀 all stream through the pool, one id at a time.")

    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1) as pool:
            for name in ("a", "b"):
                await pool.open_stream(name, buffer=False)
            got = {"a": [], "b": []}
            for k in range(4):
                for name, update in (await pool.step({"a": [ids[k]], "b": [ids[k]]})).items():
                    got[name].append(update)
            with pytest.raises(InvalidRequest, match="stream 'b'"):
                await pool.step({"a": [ids[4]], "b": bad})
            pid = pool.launcher.pids[0]
            os.kill(pid, signal.SIGKILL)
            await _wait_until_up(pool, 0, pid)
            for k in range(4, len(ids)):
                for name, update in (await pool.step({"a": [ids[k]], "b": [ids[k]]})).items():
                    got[name].append(update)
            return got

    got = uvloop.run(main())
    for name in ("a", "b"):
        local = TextStream(tokenizer, StreamParams())
        expected = [local.push([i]) for i in ids]
        assert "".join(d.content or "" for u in got[name] for d in u.deltas) == \
            "".join(d.content or "" for u in expected for d in u.deltas)
        assert got[name] == expected


def test_streams_on_the_engines_record_keep_no_log_and_its_failures_are_theirs(tokenizer):
    """A stream opened with engine_ids keeps no log. After a kill, a stream whose callable raises, returns
    fewer ids than its unanswered steps hold or returns what no id is, fails with INVALID naming it; the
    others replay and go on. A
    batch that is not ids is refused by the worker, failing that step's streams (the engine holds ids the
    worker never took); an engine_ids that is not callable is refused at open."""
    from tokworker.frontend.errors import InvalidRequest, PoolError
    from tokworker.protocol.deltas import StreamParams, StreamUpdate
    from tokworker.stream.state import TextStream
    ids = tokenizer.encode("Naïve café, 日本語 and 🚀 all stream through the pool, one id at a time.")

    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1) as pool:
            with pytest.raises(InvalidRequest, match="engine_ids is a callable"):
                await pool.open_stream("x", engine_ids=[1, 2])
            stepped = {"good": [], "broken": [], "short": [], "odd": []}

            def broken():
                raise RuntimeError("the engine lost it")
            sources = {"good": stepped["good"].copy, "broken": broken, "short": list, "odd": lambda: [object()] * 4}
            streams = {name: await pool.open_stream(name, buffer=False, engine_ids=sources[name]) for name in stepped}
            assert all(stream.log is None for stream in streams.values()) and pool.links[0].logged == 0
            got = []
            for k in range(4):
                for name in stepped:
                    stepped[name].append(ids[k])
                if k < 3:
                    got.append((await pool.step({name: [ids[k]] for name in stepped}))["good"])
                    continue
                pid = pool.launcher.pids[0]
                os.kill(pid, signal.SIGSTOP)                  # it cannot answer the step: the kill catches it
                in_flight = pool.submit_step({name: [ids[k]] for name in stepped})
                os.kill(pid, signal.SIGKILL)
                result = await in_flight
                got.append(result["good"])
            assert result["broken"].code == result["short"].code == result["odd"].code == "invalid"
            assert "the replay of stream 'odd' cannot be encoded" in result["odd"].message
            assert "'broken' raised RuntimeError" in result["broken"].message
            assert "'short' returned 0 ids, fewer than the 1 of its unanswered steps" in result["short"].message
            for k in range(4, len(ids)):
                stepped["good"].append(ids[k])
                result = await pool.step({name: [ids[k]] for name in stepped})
                got.append(result["good"])
                assert result["broken"] == result["short"] == result["odd"] == StreamUpdate()   # reported once
            assert streams["broken"].finished and isinstance(streams["broken"].error, PoolError)
            bad = await pool.open_stream("bad", buffer=False, engine_ids=list)
            with pytest.raises(PoolError) as refused:
                await pool.step({"bad": [5, "x"]})
            assert refused.value.code == "invalid" and bad.finished
            return got

    got = uvloop.run(main())
    local = TextStream(tokenizer, StreamParams())
    assert got == [local.push([i]) for i in ids]
