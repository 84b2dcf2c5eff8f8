"""Requests over a plain Unix stream socket beside ZeroMQ (Covers tokworker.frontend.request_socket,
tokworker.worker.request_socket and tokworker.worker.local_socket.): a local pool's links send every request
of a handshaken epoch there, in order, and their replies come back there. Real workers, real sockets: a raw
client shows the binding (a request on the socket is served as the ZeroMQ connection's that greeted the
session, and that connection's replies all come over the socket) and what is refused (an unknown session or
epoch, a frame over the bound, a hello); a pool shows a request larger than the socket's buffer going out in
pieces, in order (the reply held behind it not logged as a client that stopped reading, where one that never
reads is), and a killed worker's replacement getting a socket of its own, and a worker with no room for
another socket reached over ZeroMQ instead. The framing is a property over every cut of the byte stream."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
import time

import pytest
import zmq
from hypothesis import given, strategies as st

from tokworker.frontend import TokenizerPool
from tokworker.frontend.request_socket import RequestSocket
from tokworker.protocol.endpoints import requests_path
from tokworker.protocol.messages import (PROTOCOL_VERSION, Encode, ErrorCode, ErrorReply, Hello, HelloReply,
                                         Stats, StatsReply, decode_reply, encode_message, frame)
from tokworker.worker.request_socket import Framing
from tests.test_pool_streams import MODEL

LENGTH = struct.Struct("<I")


def framed(data: bytes) -> bytes:
    return LENGTH.pack(len(data)) + data


@given(st.lists(st.binary(max_size=40), max_size=8), st.lists(st.integers(1, 30), min_size=1, max_size=20))
def test_frames_come_out_whole_and_in_order_however_the_stream_is_cut(frames, cuts):
    stream = b"".join(map(framed, frames))
    framing, out, at = Framing(max_frame=64), [], 0
    for size in cuts * (len(stream) // sum(cuts) + 1):
        out += framing.feed(stream[at:at + size])
        at += size
        if at >= len(stream):
            break
    assert out == frames and framing.held == b""


def test_a_frame_over_the_bound_is_refused_before_its_bytes_come():
    with pytest.raises(ValueError, match="a frame of 65 bytes, over 64"):
        Framing(max_frame=64).feed(LENGTH.pack(65))


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    """One worker process on an ipc endpoint (its request socket beside it)."""
    from tokworker.worker.launcher import Launcher
    from tokworker.worker.options import WorkerOptions

    run_dir = tmp_path_factory.mktemp("requests")
    os.chmod(run_dir, 0o700)
    bind = f"ipc://{run_dir}/w"
    launcher = Launcher([WorkerOptions(model_dir=str(MODEL), bind=bind, log_level="WARNING",
                                       max_message_bytes=1 << 20)]).start()
    try:
        assert launcher.wait_ready(60)
        yield bind
    finally:
        launcher.stop()


class RawClient:
    """A DEALER that said Hello for `session`, and a request socket that may greet it."""

    def __init__(self, bind: str, session: str, epoch: int = 1):
        self.context = zmq.Context()
        self.dealer = self.context.socket(zmq.DEALER)
        self.dealer.setsockopt(zmq.LINGER, 0)
        self.dealer.setsockopt(zmq.RCVTIMEO, 5000)
        self.dealer.connect(bind)
        self.dealer.send(frame(1, encode_message(Hello(version=PROTOCOL_VERSION, session=session, epoch=epoch))))
        self.framing = None
        self.hello = self.reply()
        self.plain = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.plain.settimeout(5)
        self.plain.connect(requests_path(bind))

    def reply(self):
        """The next reply, over ZeroMQ (the Hello's) or, once the socket is bound, over the socket."""
        if self.framing is None:
            message = self.dealer.recv()
        else:
            while not self.replies:
                data = self.plain.recv(1 << 16)
                assert data, "the worker closed the request socket"
                self.replies += self.framing.feed(data)
            message = self.replies.pop(0)
        return struct.unpack_from("<Q", message)[0], decode_reply(message[8:])

    def greet(self, greeting: bytes, *frames: bytes) -> None:
        self.plain.sendall(framed(greeting) + b"".join(map(framed, frames)))
        self.framing, self.replies = Framing(1 << 24), []

    def closed_by_worker(self) -> bool:
        try:
            return self.plain.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.plain.close()
        self.context.destroy(linger=0)


def test_requests_on_the_socket_are_served_as_the_greeted_zeromq_connections_and_answered_there(worker):
    client = RawClient(worker, "raw-a", epoch=3)
    try:
        assert type(client.hello[1]) is HelloReply and "request_socket" in client.hello[1].capabilities
        client.greet(b"raw-a\x003", frame(7, encode_message(Stats())),
                     frame(8, encode_message(Hello(version=PROTOCOL_VERSION, session="x"))))
        rid, stats = client.reply()
        assert rid == 7 and type(stats) is StatsReply
        rid, refused = client.reply()                   # a hello only over ZeroMQ, where its peer is known
        assert rid == 8 and type(refused) is ErrorReply and refused.code == ErrorCode.INVALID
        assert "a hello comes over ZeroMQ" in refused.message
        client.dealer.send(frame(9, encode_message(Stats())))   # the connection's replies all come here now
        assert client.reply()[0] == 9
    finally:
        client.close()


@pytest.mark.parametrize("greeting", [b"raw-b\x002", b"nobody\x001", b"raw-b"])
def test_a_greeting_of_another_epoch_or_session_is_closed(worker, greeting):
    client = RawClient(worker, "raw-b", epoch=1)
    try:
        client.plain.sendall(framed(greeting) + framed(frame(9, encode_message(Stats()))))
        assert client.closed_by_worker()
        client.dealer.setsockopt(zmq.RCVTIMEO, 300)
        with pytest.raises(zmq.Again):                  # nothing it sent was served
            client.dealer.recv()
    finally:
        client.close()


def test_a_frame_over_the_workers_bound_closes_the_connection(worker):
    client = RawClient(worker, "raw-c")
    try:
        client.plain.sendall(framed(b"raw-c\x001") + LENGTH.pack((1 << 20) + 9))
        assert client.closed_by_worker()
    finally:
        client.close()


@pytest.mark.slow
def test_a_pool_sends_a_request_larger_than_the_socket_takes_in_pieces_and_in_order(capfd):
    """...and the reply larger than the socket takes holds the next one back for a moment, which the worker
    does not log as a client that stopped reading."""
    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1) as pool:
            link = pool.links[0]
            assert type(link._requests) is RequestSocket
            text = " ".join(f"w{k} naïve" for k in range(60_000))       # a body of about 1 MB
            whole = asyncio.ensure_future(pool.encode(text))
            small = asyncio.ensure_future(pool.encode("after it"))
            for _ in range(3):
                await asyncio.sleep(0)
            held = len(link._requests.waiting)                         # what the kernel did not take at once
            assert await pool.decode(await whole) == text
            assert await pool.decode(await small) == "after it"
            assert held > 0 and link._requests.waiting == bytearray() and not link._requests.broken

    asyncio.run(main())
    assert "stopped reading" not in capfd.readouterr().err


@pytest.mark.slow
def test_a_client_that_stops_reading_its_replies_is_named_in_the_workers_log(tmp_path, capfd):
    """The other side of the test above: replies that wait because nothing reads them (here a socket that
    greeted and never reads) are said once in the log."""
    from tokworker.worker.launcher import Launcher
    from tokworker.worker.options import WorkerOptions

    os.chmod(tmp_path, 0o700)
    bind = f"ipc://{tmp_path}/w"
    launcher = Launcher([WorkerOptions(model_dir=str(MODEL), bind=bind, log_level="WARNING")]).start()
    try:
        assert launcher.wait_ready(60)
        client = RawClient(bind, "deaf")
        try:
            text = " ".join(f"w{k}" for k in range(20_000))       # a reply of about 120 kB each
            client.greet(b"deaf\x001", *(frame(k, encode_message(Encode(texts=[text]))) for k in range(40)))
            deadline = time.monotonic() + 20
            while "stopped reading" not in (err := capfd.readouterr().err) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert "a client stopped reading its replies" in err
        finally:
            client.close()
    finally:
        launcher.stop()


@pytest.mark.slow
def test_a_killed_workers_replacement_gets_a_request_socket_of_its_own():
    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1) as pool:
            link = pool.links[0]
            first = link._requests
            os.kill(link.info.pid, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while link._requests is first or not link.ready:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            assert type(link._requests) is RequestSocket and link.recoveries == 1
            assert await pool.decode(await pool.encode("after the kill")) == "after the kill"

    asyncio.run(main())


def test_a_worker_with_no_room_for_another_request_socket_is_reached_over_zeromq(worker):
    """Other local processes hold every connection the worker takes (MAX_CONNECTIONS): a pool's request
    socket is closed unanswered, and its link reconnects once and sends everything over ZeroMQ from then on."""
    from tokworker.worker.request_socket import MAX_CONNECTIONS

    held = []
    try:
        for _ in range(MAX_CONNECTIONS):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(requests_path(worker))
            held.append(sock)
        probe = RawClient(worker, "raw-d")            # the worker has taken every one of them once this
        probe.greet(b"raw-d\x001", frame(3, encode_message(Stats())))     # is closed unanswered
        assert probe.closed_by_worker()
        probe.close()

        async def main():
            async with await TokenizerPool.connect(worker, discover=False) as pool:
                link = pool.links[0]
                assert await pool.decode(await pool.encode("over ZeroMQ")) == "over ZeroMQ"
                assert link.requests_refused and link._requests is None and link.recoveries == 1

        asyncio.run(main())
    finally:
        for sock in held:
            sock.close()
