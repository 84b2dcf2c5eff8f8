"""SIGTERM drains a real `tokworker serve`: new streams and renders are refused with a typed
shutting_down error, open streams keep stepping until they finish (every delta equal to the in-process
engine's), then the daemon exits 0; a pool connected to a second daemon moves new work there; a stream
left open past --drain-timeout does not hold the daemon up longer than that, and the next step that names
it fails it as shutting_down while the other daemon's streams in the same step go on."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import uvloop

from tests.daemons import wait_held
from tests.work import RESPONSIVE_S
from tokworker.frontend import ShuttingDown, TokenizerPool, WorkerLost
from tokworker.protocol.deltas import StreamParams
from tokworker.protocol.messages import ErrorCode
from tokworker.stream.state import TextStream
from tokworker.tokenizer import Tokenizer

pytestmark = pytest.mark.slow  # daemons

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "tokworker" / "data" / "default"
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
TEXT = "Draining keeps every open stream going: 日本語, café, 🚀, and the last words. " * 3
#: "at once": milliseconds here; the bugs these tests were written for waited 4.7-10 s (a handshake's or a
#: request's timeout) or for ever
AT_ONCE_S = RESPONSIVE_S


def start_daemon(*args) -> tuple[subprocess.Popen, str]:
    run_dir = Path(tempfile.mkdtemp(prefix="tokworker-drain-"))
    bind = f"ipc://{run_dir}/worker"
    proc = subprocess.Popen([sys.executable, "-m", "tokworker.cli", "serve", "--model-dir", str(MODEL),
                             "--bind", bind, "--log-level", "INFO", *args], env=ENV, stderr=subprocess.PIPE, text=True)
    wait_held(proc, bind)
    return proc, bind


@pytest.fixture
def daemons():
    started = []

    def make(*args):
        started.append(start_daemon(*args))
        return started[-1]

    yield make
    for proc, _ in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(20)


async def until_refused(pool: TokenizerPool) -> ShuttingDown:
    """Render on a pool of one draining daemon until its worker says shutting_down."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            await pool.render([{"role": "user", "content": "hi"}])
        except ShuttingDown as exc:
            return exc
        await asyncio.sleep(0.02)
    raise AssertionError("the worker never refused new work")


def test_sigterm_refuses_new_work_finishes_open_streams_and_exits_0(daemons):
    tokenizer = Tokenizer.from_dir(MODEL)
    ids = tokenizer.encode(TEXT) + tokenizer.eos_token_ids[:1]
    expected = TextStream(tokenizer, StreamParams()).push(ids)
    draining, bind_a = daemons("--drain-timeout", "30")
    _, bind_b = daemons()

    async def main():
        pool = await TokenizerPool.connect([bind_a, bind_b], connect_timeout=30)
        probe = await TokenizerPool.connect(bind_a, connect_timeout=30)
        try:
            streams = [await pool.open_stream(f"old-{i}") for i in range(4)]
            on_a = [s for s in streams if s.link.endpoint == bind_a]
            assert on_a and len(on_a) < len(streams)
            first = await pool.step({s.id: ids[:5] for s in streams})
            draining.send_signal(signal.SIGTERM)
            refused = await until_refused(probe)
            assert refused.code == ErrorCode.SHUTTING_DOWN and isinstance(refused, WorkerLost)
            with pytest.raises(ShuttingDown):
                await probe.open_stream("nowhere")              # a pool of only draining workers: typed error
            # the two-daemon pool sends new work to the other daemon, without an error
            new = [await pool.open_stream(f"new-{i}") for i in range(4)]
            assert {s.link.endpoint for s in new} == {bind_b}
            assert await pool.encode(TEXT) == ids[:-1]
            # the open streams on the draining daemon go on, step by step, to their end
            got = {s.id: [first[s.id]] for s in streams}
            for at in range(5, len(ids), 7):
                updates = await pool.step({s.id: ids[at:at + 7] for s in streams})
                for s in streams:
                    got[s.id].append(updates[s.id])
                assert draining.poll() is None                  # still there while streams are open
            for s in streams:
                text = "".join(d.content or "" for u in got[s.id] for d in u.deltas)
                assert text == "".join(d.content or "" for d in expected.deltas)
                assert got[s.id][-1].finish_reason == "stop"
            status = await asyncio.get_running_loop().run_in_executor(None, draining.wait, 20)
            return status
        finally:
            await probe.close()
            await pool.close()

    started = time.monotonic()
    status = uvloop.run(main())
    err = draining.stderr.read()
    assert status == 0, err
    assert "draining" in err and "drained: 0 stream(s) still open" in err and "stopped cleanly" in err
    assert time.monotonic() - started < 25                      # not the drain timeout: the streams ended


def test_a_stream_left_open_is_given_up_at_the_drain_timeout(daemons):
    proc, bind = daemons("--drain-timeout", "1.5")

    async def main():
        async with await TokenizerPool.connect(bind, connect_timeout=30) as pool:
            await pool.open_stream("forgotten")
            await pool.step({"forgotten": [5, 6]})
            proc.send_signal(signal.SIGTERM)
            sent = time.monotonic()
            await until_refused(pool)
            await pool.step({"forgotten": [7]})                 # still stepped during the drain
            status = await asyncio.get_running_loop().run_in_executor(None, proc.wait, 20)
            return status, time.monotonic() - sent

    status, waited = uvloop.run(main())
    err = proc.stderr.read()
    assert status == 0, err
    assert "drained: 1 stream(s) still open" in err
    assert 1.0 < waited < 10


def test_sigint_stops_at_once(daemons):
    proc, bind = daemons("--drain-timeout", "60")

    async def main():
        async with await TokenizerPool.connect(bind, connect_timeout=30) as pool:
            await pool.open_stream("open")
            proc.send_signal(signal.SIGINT)
            started = time.monotonic()
            status = await asyncio.get_running_loop().run_in_executor(None, proc.wait, 20)
            return status, time.monotonic() - started

    status, waited = uvloop.run(main())
    assert status == 0 and waited < 8


def test_streams_cut_at_the_drain_timeout_fail_as_shutting_down_in_the_next_step(daemons):
    tokenizer = Tokenizer.from_dir(MODEL)
    ids = tokenizer.encode(TEXT)
    draining, bind_a = daemons("--drain-timeout", "0.5")
    _, bind_b = daemons()

    async def main():
        async with await TokenizerPool.connect([bind_a, bind_b], connect_timeout=30) as pool:
            streams = [await pool.open_stream(f"s{i}") for i in range(4)]
            on_a = {s.id for s in streams if s.link.endpoint == bind_a}
            assert on_a and len(on_a) < len(streams)
            first = await pool.step({s.id: ids[:5] for s in streams})
            draining.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 15
            while not any(s.draining and s.streams_open == 0 for s in await pool.stats()):
                assert time.monotonic() < deadline, "the drain timeout never cut the streams"
                await asyncio.sleep(0.05)
            started = time.monotonic()
            rest = await pool.step({s.id: ids[5:] for s in streams})
            took = time.monotonic() - started
            status = await asyncio.get_running_loop().run_in_executor(None, draining.wait, 20)
            return first, rest, on_a, took, status

    first, rest, on_a, took, status = uvloop.run(main())
    engine = TextStream(tokenizer, StreamParams())
    expected = "".join(d.content or "" for u in (engine.push(ids[:5]), engine.push(ids[5:])) for d in u.deltas)
    assert took < AT_ONCE_S                                     # no hang, no lost worker
    for name, update in rest.items():
        if name in on_a:                                        # told in the very next step, stream by stream
            assert update.finish_reason == "error" and update.code == ErrorCode.SHUTTING_DOWN, update
        else:                                                   # the other daemon's share is untouched
            text = "".join(d.content or "" for u in (first[name], update) for d in u.deltas)
            assert text == expected
    assert status == 0
    err = draining.stderr.read()
    assert "drained: " in err and "cut and told so at its next step" in err


def test_a_worker_that_read_sigterm_answers_new_work_and_handshakes_at_once(daemons):
    """From the moment the worker has read SIGTERM, a render is refused at once (it stalled 4.7-10 s and
    failed as "no handshake" before), a new pool's handshake says so at once, and a pool that also reaches
    a worker not draining sends its new work there without trying the draining one."""
    draining, bind_a = daemons("--drain-timeout", "30")
    _, bind_b = daemons()

    async def main():
        async with await TokenizerPool.connect(bind_a, connect_timeout=30) as pool:
            await pool.open_stream("held")                      # keeps the worker draining
            draining.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 15
            while not (await pool.stats())[0].draining:
                assert time.monotonic() < deadline, "the worker never read SIGTERM"
                await asyncio.sleep(0.01)
            started = time.monotonic()
            with pytest.raises(ShuttingDown):
                await pool.render([{"role": "user", "content": "hi"}])
            refused_in = time.monotonic() - started
            started = time.monotonic()
            async with await TokenizerPool.connect(bind_a, connect_timeout=30) as late:
                assert late.links[0].draining                   # said by the handshake
                with pytest.raises(ShuttingDown, match="every worker is shutting down"):
                    await late.render([{"role": "user", "content": "hi"}])
            handshake_in = time.monotonic() - started
            asked = (await pool.stats())[0].requests
            async with await TokenizerPool.connect([bind_a, bind_b], connect_timeout=30, discover=False) as both:
                link_a = next(link for link in both.links if link.endpoint == bind_a)
                assert link_a.ready and link_a.draining
                for _ in range(4):
                    assert await both.render([{"role": "user", "content": "hi"}])
            assert (await pool.stats())[0].requests == asked    # the draining worker was never asked
            return refused_in, handshake_in

    refused_in, handshake_in = uvloop.run(main())
    assert refused_in < AT_ONCE_S and handshake_in < AT_ONCE_S  # at once, not a timeout (about 2 ms here)


def test_connected_pools_are_told_of_a_drain_and_never_wait_on_it(daemons):
    """A pool already connected to a daemon that gets SIGTERM is told unasked (a Draining notice on its
    connection): every render sent from right after the signal on is answered at once (milliseconds; it
    waited 4.9 s and failed as "no handshake" before), served by the other daemon where the pool reaches one, ShuttingDown
    where it does not, also once the drained worker has left."""
    draining, bind_a = daemons()
    _, bind_b = daemons()

    async def main():
        async with await TokenizerPool.connect([bind_a, bind_b], connect_timeout=30, discover=False) as both, \
                await TokenizerPool.connect(bind_a, connect_timeout=30) as alone, \
                await TokenizerPool.connect(bind_a, connect_timeout=30) as idle, \
                await TokenizerPool.connect(bind_b, connect_timeout=30) as watch_b:
            chat = [{"role": "user", "content": "hi"}]
            expected = (await both.render(chat)).ids
            await alone.render(chat)
            link_a = next(link for link in both.links if link.endpoint == bind_a)
            draining.send_signal(signal.SIGTERM)
            outcomes, slowest, told_at = set(), 0.0, None
            served_after_told = 0
            end = time.monotonic() + 1.5
            while time.monotonic() < end:
                started = time.monotonic()
                assert (await both.render(chat)).ids == expected        # never an error: b serves it
                slowest = max(slowest, time.monotonic() - started)
                started = time.monotonic()
                try:
                    await alone.render(chat)
                    outcomes.add("served")
                except ShuttingDown:
                    outcomes.add("shutting_down")
                slowest = max(slowest, time.monotonic() - started)
                if told_at is None and link_a.draining:
                    told_at = time.monotonic()
                    asked_b = (await watch_b.stats())[0].requests
                elif told_at is not None:
                    served_after_told += 1
                await asyncio.sleep(0.01)
            assert told_at is not None, "the connected pool was never told that its worker drains"
            assert idle.links[0].draining                               # told without asking anything
            assert (await watch_b.stats())[0].requests >= asked_b + served_after_told   # all went to b
            status = await asyncio.get_running_loop().run_in_executor(None, draining.wait, 20)
            started = time.monotonic()
            with pytest.raises(ShuttingDown):                           # the worker has left: still at once
                await idle.render(chat)
            return outcomes, slowest, time.monotonic() - started, status

    outcomes, slowest, after_exit, status = uvloop.run(main())
    assert "shutting_down" in outcomes
    assert slowest < AT_ONCE_S and after_exit < AT_ONCE_S, (slowest, after_exit)
    assert status == 0
