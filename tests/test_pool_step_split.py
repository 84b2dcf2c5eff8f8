"""An engine step naming more streams of one worker than it takes in one message (its max_batch) goes out
as several Steps, and the engine sees one step: every stream's text as if stepped alone, finishes and
logprobs included. Before, such a step failed whole with too_large (4,096 choices on one worker)."""

from __future__ import annotations

import asyncio

import pytest

from tokworker.frontend import TokenizerPool
from tokworker.protocol.deltas import StreamParams

pytestmark = pytest.mark.slow  # worker processes

TEXT = "Many streams, one step: naïve café, 日本語 and 🚀."


def _text(update) -> str:
    return "".join(delta.content or "" for delta in update.deltas)


@pytest.mark.parametrize("logprobs", [False, True], ids=["ids", "ids with logprobs"])
def test_a_step_past_the_workers_batch_is_sent_in_pieces(logprobs):
    async def main():
        async with await TokenizerPool.spawn(workers=1, max_batch=8) as pool:
            ids = await pool.encode(TEXT)
            names = [f"s{i}" for i in range(29)]
            for name in names:
                await pool.open_stream(name, StreamParams(logprobs=0 if logprobs else None), buffer=False)
            texts = dict.fromkeys(names, "")
            entries = dict.fromkeys(names, 0)
            for token in ids[:-1]:
                step = {name: ([token], [(-0.5, [])]) if logprobs else [token] for name in names}
                for name, update in (await pool.step(step)).items():
                    texts[name] += _text(update)
                    entries[name] += sum(map(len, update.logprobs))
            # the last id for all, each stream ending with it (ids and finish named in one step: 58 names)
            step = {name: ([ids[-1]], [(-0.5, [])]) if logprobs else [ids[-1]] for name in names}
            updates = await pool.step(step, finish=names)
            assert set(updates) == set(names)
            for name, update in updates.items():
                texts[name] += _text(update)
                entries[name] += sum(map(len, update.logprobs))
                assert update.finish_reason == "length"
            assert set(texts.values()) == {TEXT}
            if logprobs:
                assert set(entries.values()) == {len(ids)}
            assert pool.open_streams == 0
    asyncio.run(main())
