"""The worker's backstops really fire, on small limits so that the tests take seconds.

- RLIMIT_AS: a request that needs more memory than the worker may map gets OUT_OF_MEMORY; the same
  process goes on serving, its streams untouched.
- RLIMIT_CPU: a request that runs past the CPU limit with nothing else to stop it (a step has no wall
  budget, just as code stuck in C cannot be interrupted) gets its worker killed by SIGXCPU. The launcher
  starts a new one, the request fails cleanly (WorkerLost after its one allowed attempt), the other
  streams of that worker are rebuilt from their logs and go on exactly, and the other worker never stops.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import uvloop

from tokworker.frontend import InvalidRequest, PoolError, TokenizerPool, WorkerLost
from tokworker.protocol.messages import ErrorCode

pytestmark = [pytest.mark.slow, pytest.mark.long]  # worker processes past their memory and CPU limits

MODEL = Path(__file__).resolve().parent.parent / "tokworker" / "data" / "default"


def test_a_request_over_the_memory_limit_gets_out_of_memory_and_the_worker_lives(tokenizer):
    text = "a stream that lives through its worker's out-of-memory request"
    ids = tokenizer.encode(text)

    async def main():
        # ~120 MB mapped after loading; a decode of 12M ids needs several hundred more
        async with await TokenizerPool.spawn(MODEL, workers=1, memory_limit_mb=400, request_timeout=60) as pool:
            pid = pool.launcher.pids[0]
            await pool.open_stream("s")
            first = await pool.step({"s": ids[:4]})
            with pytest.raises(PoolError) as failed:
                await pool.decode([5] * 12_000_000)
            assert failed.value.code == "out_of_memory"
            assert await pool.encode(text) == ids                       # the same worker, still serving
            rest = await pool.step({"s": ids[4:]}, finish=["s"])
            assert "".join(d.content for u in (first["s"], rest["s"]) for d in u.deltas) == text
            assert pool.launcher.pids[0] == pid and pool.launcher.restarts == 0
            stats = (await pool.stats())[0]
            assert stats.errors == 1

    uvloop.run(main())


def test_a_request_past_the_cpu_limit_kills_its_worker_and_the_pool_goes_on(tokenizer):
    text = "the bystander streams on while its neighbour's runaway step takes the worker down"
    ids = tokenizer.encode(text)

    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=2, cpu_limit_s=1, max_attempts=1, request_timeout=60,
                                             max_ids=30_000_000) as pool:   # priced, it would be refused at once
            victim = await pool.open_stream("victim")
            other = await pool.open_stream("other")
            bystander = await pool.open_stream("bystander")
            assert victim.link is bystander.link is pool.links[0] and other.link is pool.links[1]
            old_pid = pool.launcher.pids[0]
            first = await pool.step({"bystander": ids[:3], "other": ids[:3]})
            with pytest.raises(WorkerLost):
                await pool.step({"victim": [5] * 20_000_000})           # seconds of CPU here, killed at ~1.5 s
            assert (0, old_pid, -signal.SIGXCPU) in pool.launcher.exits
            assert pool.launcher.exits[-1][0] == 0 and pool.launcher.restarts >= 1
            assert pool.links[1].recoveries == 0                        # the other worker never stopped
            rest = await pool.step({"bystander": ids[3:], "other": ids[3:]}, finish=["bystander", "other"])
            for name in ("bystander", "other"):
                assert "".join(d.content for u in (first[name], rest[name]) for d in u.deltas) == text
            assert (await pool.step({"victim": [5]}))["victim"].finish_reason == "error"
            assert await pool.encode([text] * 4) == [ids] * 4
            assert pool.launcher.pids[0] not in (None, old_pid)

    uvloop.run(main())


def test_a_step_is_priced_in_ids_only_when_its_bytes_could_exceed_them():
    """--max-ids bounds a step's ids, all streams together. A message has at least a byte per id, so one of
    at most max_ids bytes is not counted; one past them is, and exactly at the bound it still passes."""
    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1, max_ids=64) as pool:
            await pool.open_stream("a", buffer=False)
            await pool.open_stream("b", buffer=False)
            await pool.step({"a": [5] * 32, "b": [6] * 32})               # 64 ids in more than 64 bytes
            await pool.step({"a": [7]})                                   # a few bytes: not counted
            with pytest.raises(InvalidRequest, match="carries 65 ids") as refused:
                await pool.step({"a": [5] * 33, "b": [6] * 32})
            assert refused.value.code == ErrorCode.TOO_LARGE

    uvloop.run(main())
