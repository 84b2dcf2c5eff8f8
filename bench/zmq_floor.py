"""The floors under a pool step, between two processes with a Python echo at the other end.

Awaited in turn: a bare ZeroMQ round trip read the way the pool's link reads its socket (add_reader on
ZeroMQ's descriptor, drained until empty, one future per request) under the same event loop. What the API
thread spends on it is what any step awaited in turn costs before tokworker does anything.

In an engine loop: the API thread's CPU for one message sent between stretches of the engine's own work,
when the other side has sat idle meanwhile (what every pipelined step pays for its message), beside the
same for a one-byte write to a pipe that wakes a process idle on another core (the operating system's part
of it: on a virtual machine, waking an idle virtual CPU can cost far more than the write).

An engine step at one stream: a thread wakes the event loop every 20 ms (as an engine thread hands over its
step), and the loop sends one step's message to another process, idle in between: the process's CPU per
step (every thread but the waking one) with no message ("none"), one write to a Unix stream socket ("unix",
the request socket's way) and one ZeroMQ send ("zmq", whose I/O thread each send wakes).

The same step in tokworker's own server (bench/front_door.py's, direct streaming, one stream of a long
reply at a 20 ms step): the API process's CPU per engine step (the replay engine's thread left out) with
the step loop muted (it takes each step's outputs and sends nothing: the wake and the engine's hand-over in
this process, "muted") and as it is ("served"), interleaved round by round, each's best of the rounds.

`python -m bench.zmq_floor` prints the rows; `round_trip_cpu_us(rounds)`, `send_cpu_us(work_s)`,
`woken_step_cpu_us(steps)` and `served_step_cpu_us(rounds)` return them.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import socket
import tempfile
import threading
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


@contextlib.contextmanager
def _zmq_echo():
    """The endpoint of a ROUTER echo in a process of its own, for the block's length."""
    run_dir = tempfile.mkdtemp(prefix="tokworker-floor-")
    endpoint = f"ipc://{run_dir}/echo"
    echo = multiprocessing.get_context("spawn").Process(target=_echo, args=(endpoint,), daemon=True)
    echo.start()
    try:
        yield endpoint
    finally:
        echo.kill()
        echo.join()
        for name in os.listdir(run_dir):
            os.unlink(os.path.join(run_dir, name))
        os.rmdir(run_dir)


async def round_trip_cpu_us(rounds: int = 3000) -> float:
    """The API thread's CPU per awaited round trip, in microseconds, on the running event loop."""
    with _zmq_echo() as endpoint:
        seconds = await _client(endpoint, rounds)
    return round(seconds * 1e6, 2)


def _pipe_echo(connection) -> None:
    while True:
        connection.send_bytes(connection.recv_bytes())


def _work(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def send_cpu_us(work_s: float = 0.002, rounds: int = 300) -> dict:
    """Medians, in microseconds, of the sending thread's CPU for one ZeroMQ send ("zmq") and for one write
    to a pipe ("pipe"), each made after `work_s` of busy work, the echo's reply read after more of it."""
    spawn = multiprocessing.get_context("spawn")
    pipe, far_end = spawn.Pipe()
    pipe_echo = spawn.Process(target=_pipe_echo, args=(far_end,), daemon=True)
    pipe_echo.start()
    context = zmq.Context()
    try:
        with _zmq_echo() as endpoint:
            sock = context.socket(zmq.DEALER)
            sock.connect(endpoint)
            channels = {"zmq": (lambda: sock.send(BODY), sock.recv),
                        "pipe": (lambda: pipe.send_bytes(b"x"), pipe.recv_bytes)}
            sends: dict[str, list[float]] = {kind: [] for kind in channels}
            for k in range(rounds + 20):
                for kind, (send, receive) in channels.items():
                    _work(work_s)
                    started = time.thread_time()
                    send()
                    spent = time.thread_time() - started
                    _work(work_s / 2)
                    receive()
                    if k >= 20:                             # the first rounds connect and warm up
                        sends[kind].append(spent)
    finally:
        context.destroy(linger=0)                           # closes the socket too, however the block ended
        pipe_echo.kill()
        pipe_echo.join()
        pipe.close()
    return {kind: round(sorted(values)[len(values) // 2] * 1e6, 2) for kind, values in sends.items()}


def _unix_sink(path: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    peer, _ = listener.accept()
    while peer.recv(1 << 16):
        pass


def _zmq_sink(endpoint: str) -> None:
    sock = zmq.Context().socket(zmq.ROUTER)
    sock.bind(endpoint)
    while True:
        sock.recv_multipart()


def _process_cpu_ns(but: int) -> int:
    total = 0
    for task in os.listdir("/proc/self/task"):
        if int(task) != but:
            with open(f"/proc/self/task/{task}/schedstat") as stat:
                total += int(stat.read().split()[0])
    return total


async def _woken_steps(send, steps: int, interval: float) -> float:
    loop = asyncio.get_running_loop()
    done, count, waker = loop.create_future(), [0], {}

    def on_step() -> None:
        send(BODY)
        count[0] += 1
        if count[0] == steps:
            done.set_result(None)

    def engine() -> None:
        waker["id"] = threading.get_native_id()
        for _ in range(steps):
            time.sleep(interval)
            loop.call_soon_threadsafe(on_step)

    thread = threading.Thread(target=engine)
    thread.start()
    await asyncio.sleep(interval / 2)
    before = _process_cpu_ns(waker["id"])
    await done
    spent = _process_cpu_ns(waker["id"]) - before
    thread.join()
    return spent / steps / 1e3


def woken_step_cpu_us(steps: int = 250, interval: float = 0.02) -> dict:
    """The process's CPU per woken step, in microseconds: "none", "unix" and "zmq" (see the docstring)."""
    import uvloop

    spawn = multiprocessing.get_context("spawn")
    run_dir = tempfile.mkdtemp(prefix="tokworker-floor-")
    path, endpoint = os.path.join(run_dir, "unix"), f"ipc://{run_dir}/zmq"
    sinks = [spawn.Process(target=_unix_sink, args=(path,), daemon=True),
             spawn.Process(target=_zmq_sink, args=(endpoint,), daemon=True)]
    for sink in sinks:
        sink.start()
    context = zmq.Context()
    try:
        while not os.path.exists(path):
            time.sleep(0.01)
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix.connect(path)
        dealer = context.socket(zmq.DEALER)
        dealer.connect(endpoint)
        sends = {"none": lambda body: None, "unix": unix.send, "zmq": dealer.send}
        return {kind: round(uvloop.run(_woken_steps(send, steps, interval)), 1) for kind, send in sends.items()}
    finally:
        context.destroy(linger=0)
        for sink in sinks:
            sink.kill()
            sink.join()
        for name in os.listdir(run_dir):
            os.unlink(os.path.join(run_dir, name))
        os.rmdir(run_dir)


def served_step_cpu_us(rounds: int = 4, seconds: float = 5.0) -> dict:
    """The API process's CPU per engine step at one stream, in microseconds: "muted" and "served" (see the
    docstring)."""
    from bench.front_door import STEP_S, _server

    servers = {"muted": _server("serve", "--direct", "--mute-steps"), "served": _server("serve", "--direct")}
    try:
        found: dict[str, list[float]] = {name: [] for name in servers}
        for _ in range(rounds):
            for name, (process, url, engine) in servers.items():
                found[name].append(asyncio.run(_one_stream_step_us(url, process.pid, engine, seconds, STEP_S)))
        return {name: round(min(figures), 1) for name, figures in found.items()}
    finally:
        for process, _, _ in servers.values():
            process.terminate()
            process.wait(30)


async def _one_stream_step_us(url: str, pid: int, engine: int, seconds: float, interval: float) -> float:
    """One long streamed reply under way: the process's CPU (the engine's thread aside) over `seconds`, per
    engine step."""
    import aiohttp

    from bench.front_door import _cpu

    body = {"model": "bench", "stream": True, "max_tokens": 4000, "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/chat/completions", json=body) as response:
            async def read():
                async for _ in response.content:
                    pass
            reading = asyncio.ensure_future(read())
            await asyncio.sleep(1.0)                     # under way: its setup is not counted
            before, began = _cpu(pid, engine), time.monotonic()
            await asyncio.sleep(seconds)
            spent, elapsed = _cpu(pid, engine) - before, time.monotonic() - began
            reading.cancel()
    return spent / (elapsed / interval) * 1e6


def main() -> None:
    try:
        import uvloop
        us = uvloop.run(round_trip_cpu_us())
    except ImportError:
        us = asyncio.run(round_trip_cpu_us())
    print({"case": "bare ZeroMQ round trip (the floor)", "api_us_per_round_trip": us})
    sends = send_cpu_us()
    print({"case": "one send between 2 ms of engine work", "zmq_send_us": sends["zmq"],
           "pipe_write_us": sends["pipe"]})
    woken = woken_step_cpu_us()
    print({"case": "a step woken every 20 ms, sent to another process", "none_us": woken["none"],
           "unix_us": woken["unix"], "zmq_us": woken["zmq"]})
    served = served_step_cpu_us()
    print({"case": "one stream's step in tokworker's server", "muted_us": served["muted"],
           "served_us": served["served"]})


if __name__ == "__main__":
    main()
