"""Direct streaming's two ends on real sockets: the worker's Sink writes events as HTTP/1.1 chunks that a
client reads back whole, holds what a full socket does not take (and cuts a client past its bound), notices
a client that went away, ends the body; the SinkTable takes sockets handed over by SinkSender (SCM_RIGHTS)
and refuses what is not an open stream's."""

from __future__ import annotations

import os
import socket
import time

import pytest

from tokworker.frontend.sinks import SinkSender
from tokworker.protocol.endpoints import sinks_path
from tokworker.protocol.messages import CodedError
from tokworker.worker.sessions import process_peer, session_key
from tokworker.worker.sinks import Sink, SinkTable


def chunks(data: bytes) -> list[bytes]:
    """An HTTP/1.1 chunked body read back into its chunks (the last one empty)."""
    out = []
    while data:
        size, _, rest = data.partition(b"\r\n")
        length = int(size, 16)
        out.append(rest[:length])
        assert rest[length:length + 2] == b"\r\n"
        data = rest[length + 2:]
    return out


def read_all(sock: socket.socket) -> bytes:
    data = b""
    sock.setblocking(False)
    while True:
        try:
            piece = sock.recv(1 << 20)
        except BlockingIOError:
            return data
        if not piece:
            return data
        data += piece


@pytest.fixture
def pair():
    server, client = socket.socketpair()
    server.setblocking(False)
    yield server, client
    client.close()
    server.close()


@pytest.fixture
def connected(tmp_path):
    """A worker's sink table and an API process's sender, connected to it."""
    path = sinks_path(f"ipc://{tmp_path}/worker")
    table = SinkTable(path, max_bytes=1 << 20)
    sender = SinkSender(path)
    table.on_readable(table.listener.fileno())           # the connection
    yield table, sender
    sender.close()
    table.close_all()


def test_events_arrive_as_chunks_and_end_closes(pair):
    server, client = pair
    sink = Sink(max_bytes=1 << 20, waiting={})
    sink.write(b"data: one\n\n")                       # before the socket: it waits
    sink.attach(os.dup(server.fileno()))
    sink.write(b"data: two\n\n")
    sink.end(b"data: [DONE]\n\n")
    assert sink.fd == -1 and sink.closed
    assert chunks(read_all(client)) == [b"data: one\n\n", b"data: two\n\n", b"data: [DONE]\n\n", b""]


HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
        b"Connection: close\r\n\r\n")


@pytest.mark.parametrize("early", [b"", b"data: one\n\n"])
def test_a_streamed_responses_head_handed_over_with_its_socket_goes_out_first(connected, pair, early):
    """The API process sends a streamed response's status line and headers with its socket: the client reads
    them first, then the events that waited for the socket (if any) and those after, chunked."""
    server, client = pair
    table, sender = connected
    sink = table.open(session_key(process_peer(os.getpid()), "s"), "req-1")
    if early:
        sink.write(early)
    assert sender.hand("s", "req-1", server.fileno(), HEAD)
    for fd in table.readable()[1:]:
        table.on_readable(fd)
    sink.write(b"data: two\n\n")
    sink.end(b"data: [DONE]\n\n")
    received = read_all(client)
    assert received.startswith(HEAD) and sink.head == b""
    assert chunks(received[len(HEAD):]) == [*([early] if early else []), b"data: two\n\n", b"data: [DONE]\n\n",
                                            b""]


def test_a_full_socket_holds_the_rest_until_it_drains_and_cuts_past_the_bound(pair):
    server, client = pair
    sink = Sink(max_bytes=8 << 20, waiting={})
    sink.attach(os.dup(server.fileno()))
    event = b"data: " + b"x" * 4000 + b"\n\n"
    for _ in range(200):                               # 800 KB: more than a socket pair buffers
        sink.write(event)
    assert list(sink.waiting) == [sink.fd] and sink.pending_bytes > 0
    received = b""
    while sink.waiting:
        received += read_all(client)
        sink.flush()
    received += read_all(client)
    assert chunks(received) == [event] * 200
    small = Sink(max_bytes=64 << 10, waiting={})
    small.attach(os.dup(server.fileno()))
    while small.failed is None:
        small.write(event)
    assert "fell more than 65536 bytes behind" in small.failed and small.fd == -1


def test_a_client_that_went_away_fails_the_sink(pair):
    server, client = pair
    sink = Sink(max_bytes=1 << 20, waiting={})
    sink.attach(os.dup(server.fileno()))
    client.close()
    sink.write(b"data: lost\n\n")
    sink.write(b"data: lost\n\n")
    assert sink.failed is not None and "refused a write" in sink.failed and sink.closed


def test_sockets_handed_over_reach_their_stream(tmp_path, pair):
    server, client = pair
    path = sinks_path(f"ipc://{tmp_path}/worker")
    table = SinkTable(path, max_bytes=1 << 20)
    sender = SinkSender(path)
    try:
        table.on_readable(table.listener.fileno())       # the connection
        session = session_key(process_peer(os.getpid()), "session-a")   # the sender's process's session
        sink = table.open(session, "req-1")
        sink.write(b"data: early\n\n")
        sender.hand("session-a", "req-1", server.fileno())
        sender.hand("session-a", "nobody", server.fileno())    # no such stream: closed at once
        for fd in table.readable()[1:]:
            table.on_readable(fd)
        sink.end()
        assert chunks(read_all(client)) == [b"data: early\n\n", b""]
        assert sink.fd == -1 and not table.waiting
        table.release(session, "req-1")
        assert table.sinks == {}
        assert sinks_path("tcp://127.0.0.1:7000") is None
    finally:
        sender.close()
        table.close_all()
    assert not os.path.exists(path)


def test_a_writable_socket_flushes_its_own_sink_only(tmp_path):
    """The table keeps the sinks with bytes waiting by descriptor: a writable report flushes that sink and
    touches no other; an ended stream's sink, closed once flushed, goes at the next evict."""
    table = SinkTable(sinks_path(f"ipc://{tmp_path}/worker"), max_bytes=8 << 20)
    pairs = [socket.socketpair() for _ in range(3)]
    try:
        sinks = [table.open("s", f"req-{i}") for i in range(3)]
        event = b"data: " + b"x" * 4000 + b"\n\n"
        for sink, (server, _) in zip(sinks, pairs):
            server.setblocking(False)
            sink.attach(os.dup(server.fileno()))
            while not sink.pending:
                sink.write(event)
        assert set(table.waiting) == {sink.fd for sink in sinks}
        first, rest = sinks[0], sinks[1:]
        first.end()
        table.release("s", "req-0")
        held = [sink.pending_bytes for sink in rest]
        received = b""
        while first.fd in table.waiting:
            received += read_all(pairs[0][1])
            table.on_writable([first.fd])
        received += read_all(pairs[0][1])
        assert chunks(received)[-1] == b"" and first.closed
        assert [sink.pending_bytes for sink in rest] == held and set(table.waiting) == {s.fd for s in rest}
        assert ("s", "req-0") in table.sinks
        table.evict(time.monotonic())
        assert set(table.sinks) == {("s", "req-1"), ("s", "req-2")}
    finally:
        table.close_all()
        for server, client in pairs:
            server.close()
            client.close()


def test_the_choices_of_one_response_share_its_sink_and_the_last_end_writes_the_tail(connected, pair):
    """Three choices' streams write to one socket (handed over under the first's name); the tail, made from
    the three usages, follows the last choice's end, then the body's end; the table lets the sink go once
    every stream is released. A fourth choice, or one beside a stream that is not open, is refused."""
    server, client = pair
    table, sender = connected
    session = session_key(process_peer(os.getpid()), "session-a")
    sink = table.open(session, "c-0", choices=3, tail=lambda usages: b"data: %d usages\n\n" % len(usages))
    assert table.join(session, "c-1", "c-0") is sink and table.join(session, "c-2", "c-0") is sink
    with pytest.raises(CodedError, match="has its 3 choices already"):
        table.join(session, "c-3", "c-0")
    with pytest.raises(CodedError, match="no open direct stream 'nobody'"):
        table.join(session, "c-4", "nobody")
    sink.write(b"data: 0a\n\n")
    table.flush_step()                                # a step's end
    sender.hand("session-a", "c-0", server.fileno())
    for fd in table.readable()[1:]:
        table.on_readable(fd)
    sink.write(b"data: 1a\n\n")                      # the next step: two choices' events, one write
    sink.finished(None)                               # choice 1 ends
    table.release(session, "c-1")
    sink.write(b"data: 0b\n\n")
    sink.finished(None)
    table.release(session, "c-0")
    assert read_all(client) == b"a\r\ndata: 0a\n\n\r\n"    # the rest waits for the step's end
    table.flush_step()
    table.evict(time.monotonic())                     # one choice still streams: nothing goes
    assert not sink.ending and len(table.sinks) == 3
    sink.write(b"data: 2a\n\n")
    sink.finished(None)                               # the last end: its event, the tail, the body's end
    table.release(session, "c-2")
    assert chunks(read_all(client)) == [b"data: 1a\n\ndata: 0b\n\n", b"data: 2a\n\n", b"data: 3 usages\n\n",
                                        b""]
    table.evict(time.monotonic())
    assert table.sinks == {} and not table.waiting


def test_a_response_forwarded_instead_lets_its_sink_go_with_its_last_stream(tmp_path):
    """No socket comes (the API process forwards the response): each stream leaves the sink as its Forward
    comes, and the sink closes once none writes to it; a closed sink takes no more bytes."""
    table = SinkTable(sinks_path(f"ipc://{tmp_path}/worker"), max_bytes=1 << 20)
    try:
        sink = table.open("s", "c-0", choices=2)
        table.join("s", "c-1", "c-0")
        sink.write(b"data: 0a\n\n")
        table.forward("s", "c-0")
        assert not sink.closed and list(table.sinks) == [("s", "c-1")]
        table.forward("s", "c-1")
        assert sink.closed and table.sinks == {}
        sink.write(b"data: late\n\n")
        assert not sink.pending and sink.pending_bytes == 0
    finally:
        table.close_all()


def test_a_whole_response_is_written_once_its_socket_and_its_last_choice_are_here(tmp_path, pair):
    """A whole response's sink writes nothing until both its socket (with the API's headers) and its last
    choice's end are here, whichever comes last, then the status line, the headers, Content-Length and the
    body joined in the choices' order, and closes; an error answered first is the only response."""
    server, client = pair
    table = SinkTable(sinks_path(f"ipc://{tmp_path}/worker"), max_bytes=1 << 20)
    try:
        sink = table.open("s", "c-0", choices=2, tail=lambda usages, bodies: b"[" + b",".join(bodies) + b"]",
                          whole=True)
        table.join("s", "c-1", "c-0")
        sink.finished_whole(None, b'"one"', 1)
        sink.finished_whole(None, b'"zero"', 0)         # the last choice, before the socket
        assert not sink.pending and not sink.closed
        sink.attach(os.dup(server.fileno()), b"Content-Type: application/json\r\nServer-Timing: engine;dur=1\r\n")
        head, _, body = read_all(client).partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        assert lines[0] == b"HTTP/1.1 200 OK" and body == b'["zero","one"]'
        assert lines[2:] == [b"Content-Type: application/json", b"Server-Timing: engine;dur=1",
                             b"Content-Length: 14", b"Connection: close"] and lines[1].startswith(b"Date: ")
        assert sink.closed
        failing = table.open("s", "d-0", choices=2, tail=lambda usages, bodies: b"[]", whole=True)
        failing.respond(501, b'{"error":{}}', b"Content-Type: application/json\r\n")
        failing.finished_whole(None, b"{}", 0)
        failing.finished_whole(None, b"{}", 1)          # ends after the error: it was answered already
        failing.attach(os.dup(server.fileno()))
        answer = read_all(client)
        assert answer.startswith(b"HTTP/1.1 501 Not Implemented\r\n") and answer.endswith(b'\r\n\r\n{"error":{}}')
    finally:
        table.close_all()
