"""The floor under a pool step: a bare ZeroMQ round trip between two processes, read the way the pool's
link reads its socket (add_reader on ZeroMQ's descriptor, drained until empty, one future per request)
under the same event loop, with a Python echo at the other end. What the API thread spends on it is what
any step awaited in turn costs before tokworker does anything: the pool's own cost is the rest.

`python -m bench.zmq_floor` prints the row; `round_trip_cpu_us(rounds)` returns it.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import tempfile
import time

import zmq

_ID = b"\x01\x00\x00\x00\x00\x00\x00\x00"
BODY = _ID + b"\x82\xa4type\xa4step\xa3ids\x81\xa2s0\x91\xcd\x04\xd2"   # an 8-byte id and a one-id step


def _echo(endpoint: str) -> None:
    sock = zmq.Context().socket(zmq.ROUTER)
    sock.bind(endpoint)
    while True:
        sock.send_multipart(sock.recv_multipart())


async def _client(endpoint: str, rounds: int) -> float:
    context = zmq.Context()
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    loop = asyncio.get_running_loop()
    raw = super(zmq.Socket, sock)
    send, recv, get = raw.send, raw.recv, raw.get
    events, pollin, noblock = int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.NOBLOCK)
    waiting: list[asyncio.Future] = []

    def readable() -> None:
        while get(events) & pollin:
            message = recv(noblock)
            waiting.pop().set_result(message)

    loop.add_reader(sock.getsockopt(zmq.FD), readable)

    async def one() -> bytes:
        future = loop.create_future()
        waiting.append(future)
        send(BODY, noblock)
        if get(events) & pollin:                     # ZeroMQ's descriptor only signals changes
            loop.call_soon(readable)
        return await future

    try:
        for _ in range(200):
            await one()
        started = time.thread_time()
        for _ in range(rounds):
            await one()
        return (time.thread_time() - started) / rounds
    finally:
        loop.remove_reader(sock.getsockopt(zmq.FD))
        sock.close()
        context.term()


async def round_trip_cpu_us(rounds: int = 3000) -> float:
    """The API thread's CPU per awaited round trip, in microseconds, on the running event loop."""
    run_dir = tempfile.mkdtemp(prefix="tokworker-floor-")
    endpoint = f"ipc://{run_dir}/echo"
    echo = multiprocessing.get_context("spawn").Process(target=_echo, args=(endpoint,), daemon=True)
    echo.start()
    try:
        seconds = await _client(endpoint, rounds)
    finally:
        echo.kill()
        echo.join()
        for name in os.listdir(run_dir):
            os.unlink(os.path.join(run_dir, name))
        os.rmdir(run_dir)
    return round(seconds * 1e6, 2)


def main() -> None:
    try:
        import uvloop
        us = uvloop.run(round_trip_cpu_us())
    except ImportError:
        us = asyncio.run(round_trip_cpu_us())
    print({"case": "bare ZeroMQ round trip (the floor)", "api_us_per_round_trip": us})


if __name__ == "__main__":
    main()
