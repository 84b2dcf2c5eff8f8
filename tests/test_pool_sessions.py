"""Sessions and memory stay bounded without hurting live work, through real workers: a storm of new
connections (each with its own session) cannot make a worker forget a session that has open streams, and
the API process lets go of a finished stream's prompt, params and id log.
Covers tokworker.worker.lane."""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

import uvloop
import zmq

from tokworker.frontend import TokenizerPool
from tokworker.protocol.messages import PROTOCOL_VERSION, Hello, HelloReply, decode_reply, encode_message, frame
from tokworker.tokenizer import Tokenizer

MODEL = Path(__file__).resolve().parent.parent / "tokworker" / "data" / "default"


def test_a_reconnect_storm_does_not_evict_a_live_session():
    tokenizer = Tokenizer.from_dir(MODEL)
    text = "a live stream outlasts a storm of strangers"
    ids = tokenizer.encode(text)

    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1, max_sessions=20) as pool:
            await pool.open_stream("live", buffer=False)
            first = await pool.step({"live": ids[:3]})
            context = zmq.Context()
            strangers = []
            for i in range(120):                              # six times the table, each a new connection
                sock = context.socket(zmq.DEALER)
                sock.setsockopt(zmq.LINGER, 0)
                sock.setsockopt(zmq.RCVTIMEO, 10_000)
                sock.connect(pool.links[0].endpoint)
                sock.send(frame(1, encode_message(Hello(version=PROTOCOL_VERSION, session=f"x{i}"))))
                assert isinstance(decode_reply(sock.recv()[8:]), HelloReply)
                strangers.append(sock)
            rest = await pool.step({"live": ids[3:]}, finish=["live"])
            assert "".join(d.content for u in (first["live"], rest["live"]) for d in u.deltas) == text
            stats = (await pool.stats())[0]
            assert stats.streams_open == 0 and stats.errors == 0   # finished, not leaked or orphaned
            for sock in strangers:
                sock.close()
            context.term()

    uvloop.run(main())


def test_finished_streams_keep_no_prompt_in_the_api_process():
    prompt = [5 + i % 4000 for i in range(4096)]            # a 4k-token prompt each

    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1) as pool:
            gc.collect()
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            for i in range(200):
                await pool.open_stream(f"r{i}", prompt_ids=prompt, buffer=False)
                await pool.step({f"r{i}": [5, 6, 7]}, finish=[f"r{i}"])
            gc.collect()
            kept = tracemalloc.get_traced_memory()[0] - before
            tracemalloc.stop()
            streams = [pool.streams[f"r{i}"] for i in range(200)]
            assert all(s.finished and s.prompt_ids is None and s.log is None and s.params is None for s in streams)
            # 200 prompts as lists would be ~6.5 MB; what a finished stream keeps is a few hundred bytes
            assert kept < 200 * 4096, kept

    uvloop.run(main())
