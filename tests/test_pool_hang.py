"""A hung worker is replaced: SIGSTOP one of two real workers in the middle of a run of steps. The pool
sees no reply (not even to its liveness probe) within hang_timeout while work waits, kills the stopped
process, the launcher starts another, the link replays its streams, and every stream still equals the
in-process engine: nothing lost, nothing twice. The healthy worker's streams get their updates step for
step as in-process (the step does not wait for the replaced worker: its streams' output comes with a later
step). A worker merely busy with a long render is left alone (its lane answers the probe).
Covers tokworker.frontend.pending."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
import uvloop

from tokworker.frontend import TokenizerPool
from tokworker.protocol.deltas import StreamParams
from tokworker.stream.state import TextStream
from tokworker.tokenizer import Tokenizer
from tests.test_pool_streams import MODEL

pytestmark = [pytest.mark.slow, pytest.mark.long]  # hung (SIGSTOPped) worker processes replaced

TEXT = "a stream that goes on while its worker is stopped, killed and replaced, and sees every word once"


def _text(updates) -> str:
    return "".join(d.content or "" for u in updates for d in u.deltas)


def test_a_stopped_worker_is_killed_restarted_and_replayed():
    tokenizer = Tokenizer.from_dir(MODEL)
    ids = tokenizer.encode(TEXT)
    expected = TextStream(tokenizer, StreamParams())
    per_step = [*(expected.push([i]) for i in ids), expected.finish()]
    whole = _text(per_step)

    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=2, hang_timeout=1.0) as pool:
            names = [f"s{i}" for i in range(6)]
            for name in names:
                await pool.open_stream(name, buffer=False)
            got = {name: [] for name in names}
            victim = pool.links[0].info.pid
            assert {pool.links[0].open_streams, pool.links[1].open_streams} == {3}
            for k, token in enumerate(ids):
                if k == len(ids) // 2:
                    os.kill(victim, signal.SIGSTOP)
                for name, update in (await pool.step({name: [token] for name in names})).items():
                    got[name].append(update)
            for name, update in (await pool.step({}, finish=names)).items():
                got[name].append(update)
            assert all(_text(got[name]) == whole for name in names)
            healthy = [name for name in names if pool.streams[name].link is pool.links[1]]
            assert healthy and all(got[name] == per_step for name in healthy)
            assert pool.links[0].hangs == 1 and pool.links[1].hangs == 0
            assert pool.launcher.restarts == 1 and victim not in pool.launcher.pids
            with open(f"/proc/{victim}/stat") if os.path.exists(f"/proc/{victim}") else open(os.devnull) as stat:
                assert " T " not in stat.read()                     # not left stopped (it is gone)

    uvloop.run(main())


def test_a_worker_busy_with_a_long_render_is_not_taken_for_hung():
    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1, hang_timeout=0.4) as pool:
            pid = pool.links[0].info.pid
            prompt = await pool.render([{"role": "user", "content": "many words " * 150_000}])
            assert len(prompt.ids) > 150_000
            assert pool.links[0].hangs == 0 and pool.launcher.pids[0] == pid

    uvloop.run(main())


def test_late_output_is_uncounted_once_its_stream_ends():
    """A step returns without a hung worker's share; what the replaced worker answers for it is held as late
    output, counted on the link (each of its step replies then takes the stream-by-stream path) only while
    that stream is open: closing the stream, or late output that itself ends it, takes the count back to 0."""
    tokenizer = Tokenizer.from_dir(MODEL)
    words = tokenizer.encode("some words held back late")
    stop = tokenizer.encode(" and STOP here")

    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1, hang_timeout=0.5) as pool:
            link = pool.links[0]
            await pool.open_stream("closed", buffer=False)
            await pool.open_stream("ends", StreamParams(stop=["STOP"]), buffer=False)
            await pool.step({"closed": words[:2], "ends": words[:2]})
            os.kill(link.info.pid, signal.SIGSTOP)
            returned = await pool.step({"closed": words[2:], "ends": stop})
            assert all(not update.deltas for update in returned.values())      # returned without the share
            for _ in range(200):                                    # the replaced worker answers it later
                if pool.streams["closed"].late is not None:
                    break
                await asyncio.sleep(0.05)
            assert pool.streams["closed"].late is not None and pool.streams["ends"].finished
            assert link.late == 1                                   # "ends" finished: not counted
            ended = (await pool.step({"ends": []}))["ends"]         # the engine hears of it when it names it
            assert ended.finish_reason == "stop" and link.late == 1
            await pool.close_stream("closed")
            assert link.late == 0
            await pool.open_stream("after", buffer=False)
            assert (await pool.step({"after": words}))["after"].deltas and link.late == 0

    uvloop.run(main())
