"""Engine steps have their own lane, through real worker processes: a flood of renders neither refuses a
step (the in-flight limit bounds stateless work only) nor queues one behind it (the worker serves session
requests before its stateless backlog), and a step over several workers goes to all of them or none."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import uvloop

from tokworker.frontend import InvalidRequest, Overloaded, TokenizerPool
from tokworker.tokenizer import Tokenizer

pytestmark = pytest.mark.slow  # worker processes

MODEL = Path(__file__).resolve().parent.parent / "tokworker" / "data" / "default"
CHAT = [{"role": "user", "content": "word " * 3000}]


def test_a_render_flood_never_refuses_or_reorders_a_step():
    tokenizer = Tokenizer.from_dir(MODEL)
    text = "steps go first, renders wait their turn"
    ids = tokenizer.encode(text)

    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1, max_inflight=16) as pool:
            await pool.open_stream("s", buffer=False)
            renders = [asyncio.ensure_future(pool.render(CHAT)) for _ in range(16)]
            await asyncio.sleep(0)                             # they are all sent now
            with pytest.raises(Overloaded):                    # stateless work is bounded ...
                await pool.render(CHAT)
            got, finished_renders = [], []
            for token in ids:                                  # ... steps are not, and they overtake
                update = (await pool.step({"s": [token]}))["s"]
                got.extend(d.content for d in update.deltas)
                finished_renders.append(sum(r.done() for r in renders))
            final = (await pool.step({}, finish=["s"]))["s"]
            got.extend(d.content for d in final.deltas)
            assert "".join(got) == text
            assert finished_renders[0] < 16                    # the first step was answered with renders queued
            prompts = await asyncio.gather(*renders)
            assert len({tuple(p.ids) for p in prompts}) == 1

    uvloop.run(main())


def test_a_step_over_two_workers_is_sent_to_both_or_neither():
    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=2) as pool:
            await pool.open_stream("a", buffer=False)
            await pool.open_stream("b", buffer=False)
            assert pool.streams["a"].link is not pool.streams["b"].link
            small = pool.streams["a"].link
            small.max_message_bytes = 64                       # this worker's share is too large to send
            with pytest.raises(InvalidRequest):
                await pool.step({"a": [5] * 100, "b": [5]})
            assert len(pool.streams["a"].log) == len(pool.streams["b"].log) == 0     # neither share went out
            small.max_message_bytes = 1 << 20
            updates = await pool.step({"a": [5], "b": [5]})
            assert set(updates) == {"a", "b"}

    uvloop.run(main())


def test_a_step_is_answered_while_a_long_render_runs():
    """The worker's lane thread serves the step in the middle of the render (sent first, on the same worker)."""
    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1) as pool:
            await pool.open_stream("s", buffer=False)
            # ~0.3 s of render and encode (the template itself was compiled when the worker loaded)
            long_render = asyncio.ensure_future(pool.render([{"role": "user", "content": "many words " * 500_000}]))
            await asyncio.sleep(0.05)                          # the render is running in the worker now
            for _ in range(3):
                await pool.step({"s": [5]})
            assert not long_render.done()
            assert len((await long_render).ids) > 60_000

    uvloop.run(main())
