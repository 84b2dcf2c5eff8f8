"""kill -9 workers at random moments while streams and stateless requests run: the launcher restarts them,
the links replay and re-send, and every stream's updates still equal the in-process engine's, step for
step: no delta lost, none duplicated. Stateless requests in flight all come back right."""

from __future__ import annotations

import asyncio
import os
import random
import signal

import pytest
import uvloop

from frontend import TokenizerPool
from tests.test_pool_streams import MODEL, check, drive, make_scripts
from tokworker.tokenizer import Tokenizer

KILLS = 10


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.from_dir(MODEL)


async def _wait_until_up(pool: TokenizerPool, index: int, old_pid: int) -> None:
    while True:
        pid = pool.launcher.pids[index]
        if pid is not None and pid != old_pid:
            return
        await asyncio.sleep(0.01)


def test_kill_9_at_random_points_loses_and_duplicates_nothing(tokenizer):
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
                    if pid is not None:
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
            got = await drive(pool, scripts, rng, depth=2, between=between)
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
