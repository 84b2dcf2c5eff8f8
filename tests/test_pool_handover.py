"""Direct streaming's hand-over never waits on the event loop (frontend/sinks.py): a worker that cannot take a
client's socket at once (its process stopped, so its hand-over queue fills) makes hand_over return False
within the call, and the response is forwarded instead (a Forward): every event reaches the caller in the
steps' `sse` (the role chunk once, then the whole text, those made before the hand-over first), while a
ticker on the same loop is never held up while the worker stays stopped (for PAUSE_S: a hand-over that
waited for the worker would hold the loop that long; on a loaded machine a healthy loop lags milliseconds,
a few hundred at worst: both are held to RESPONSIVE_S). A worker stopped for a moment serves it soon after
it goes on; one stopped for good is found hung, killed and replaced, and the stream, whose socket never
reached it, is rebuilt there from its log as a forwarded stream.
Covers tokworker.frontend.handover."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time

import pytest
import uvloop

from tokworker.frontend import TokenizerPool
from tokworker.protocol.deltas import ChunkFormat
from tests.test_pool_streams import MODEL
from tests.work import RESPONSIVE_S

pytestmark = pytest.mark.slow  # worker processes

TEXT = "a direct stream whose worker stopped goes on through the API process, every word once"
PAUSE_S = RESPONSIVE_S + 1           # "a moment": longer than anything here may wait, so waiting shows


def contents(sse: bytes) -> tuple[list, str]:
    """The chat chunks' roles and their joined content."""
    deltas = [json.loads(line[6:])["choices"][0]["delta"] for line in sse.split(b"\n\n") if line.startswith(b"data: {")]
    return [d["role"] for d in deltas if "role" in d], "".join(d.get("content") or "" for d in deltas)


async def until_stopped(pid: int) -> None:
    """Until the kernel has stopped process `pid` (a signal is delivered, not obeyed, when kill returns)."""
    for _ in range(400):
        with open(f"/proc/{pid}/stat") as stat:
            if stat.read().rsplit(")", 1)[1].split()[0] == "T":
                return
        await asyncio.sleep(0.005)
    raise AssertionError(f"process {pid} never stopped")


async def ticker(lags: list, stop: asyncio.Event) -> None:
    """How late the loop wakes a 5 ms sleep, each time."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        before = loop.time()
        await asyncio.sleep(0.005)
        lags.append(loop.time() - before - 0.005)


@pytest.mark.parametrize("stopped", ["a moment", "for good", "a moment, its end sent"])
def test_a_stopped_worker_gets_no_socket_and_its_response_is_forwarded(stopped):
    """"its end sent": the step that ends the stream is on its way before the hand-over fails, so its reply
    comes before the Forward's; that finish carries what the sink held."""
    hang_timeout = 0.25 if stopped == "for good" else 10.0

    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1, hang_timeout=hang_timeout) as pool:
            ids = await pool.encode(TEXT)
            link = pool.links[0]
            chunks = ChunkFormat(id="chatcmpl-1", model="m", created=1)
            await pool.open_stream("direct", buffer=False, chunks=chunks, sink=True)
            first = await pool.step({"direct": ids[:5]})                # its events wait in its worker's sink
            assert not first["direct"].sse
            pid = link.info.pid
            os.kill(pid, signal.SIGSTOP)
            await until_stopped(pid)
            spare, client = socket.socketpair()
            try:
                handed = 0
                while link.hand_over(f"nobody-{handed}", spare.fileno()):   # its queue fills: nothing reads it
                    handed += 1
                    assert handed < 10_000
                assert link.handover_fallbacks == 1
                lags, stop = [], asyncio.Event()
                ticking = asyncio.create_task(ticker(lags, stop))
                await asyncio.sleep(0.05)
                ending = None
                if stopped.endswith("its end sent"):
                    ending = pool.submit_step({"direct": ids[5:]}, finish=["direct"])
                started = time.monotonic()
                if stopped.startswith("a moment"):
                    asyncio.get_running_loop().call_later(PAUSE_S, os.kill, pid, signal.SIGCONT)
                assert pool.hand_over("direct", client.fileno()) is False
                returned_in = time.monotonic() - started
                assert pool.handover_fallbacks == 2
                sse = b""
                if ending is not None:
                    update = (await ending)["direct"]
                    assert update.finish_reason == "length"
                    sse += update.sse
                else:
                    for at in range(5, len(ids), 4):                    # the engine goes on stepping
                        sse += (await pool.step({"direct": ids[at:at + 4]}))["direct"].sse
                    sse += (await pool.step({}, finish=["direct"]))["direct"].sse
                served_in = time.monotonic() - started
                await asyncio.sleep(0.05)                               # the Forward's reply, after
                stop.set()
                await ticking
            finally:
                spare.close()
                client.close()
            served_by = 10 if stopped == "for good" else PAUSE_S + RESPONSIVE_S
            assert returned_in < RESPONSIVE_S and served_in < served_by, (returned_in, served_in)
            assert max(lags) < RESPONSIVE_S, max(lags)
            assert link.hangs == pool.launcher.restarts == (stopped == "for good")
            roles, text = contents(sse)
            assert roles == ["assistant"] and text == TEXT              # nothing lost, nothing twice
            assert link.late == 0 and link.logged == 0

    uvloop.run(main())
