"""Response bodies a worker writes itself (direct streaming): once a streamed response is ready to begin, the
API process hands the client's socket to the response's worker (SCM_RIGHTS over a Unix socket beside the
worker's endpoint), and the worker writes each step's server-sent events to it as HTTP/1.1 chunks. The
engine's process then neither receives those bytes nor writes them: per token it only sends ids.

    table = SinkTable(path, max_bytes=4 << 20)      # the worker's listener, at <endpoint path>.sinks
    sink = table.open(session, "req-1", choices=2, tail=lambda usages: b"data: [DONE]\\n\\n")
    table.join(session, "req-2", "req-1")           # the response's other choice writes to the same socket
    sink.write(b'data: {...}\\n\\n')                 # framed; what the socket does not take waits (bounded)
    sink.finished(usage)                            # a choice ended; after the last: the tail, the body's end
    table.release(session, "req-1")                 # a stream is over: the sink goes once all are, and flushed

One sink per response: the streams of its choices (all on this worker) share it, their events interleaved
as the steps make them, and the sink knows how many there are (ChunkFormat.n), so the last one's end writes
the response's tail (the n > 1 usage chunk, [DONE]) and the chunked body's end.

A streamed response's status line and headers may come with its socket (the API process then wrote nothing
of the response): they go out before its first event.

A whole response (ChunkFormat.whole) is handed over before anything of it is written: with its socket come
the headers the API process would have sent (its Content-Type, Server-Timing), and once its last choice
ends the sink writes the status line, those headers, Content-Length and the body (the choices' bodies
joined by the format's home), then closes. Failed before that (the engine's error, the drain), it writes
the API's error status and body instead (`respond`).

Writes never block: what a full socket does not take waits in its Sink, and the lane polls the socket for
writability (`table.waiting`), up to `max_bytes`, past which the client is cut (as a slow HTTP client is cut
in the API process). A write that fails (the client went away) marks the sink `failed`: the stream's next
update tells the API process to abort the request. A finished stream's sink that its client never drains is
closed after LINGER_S. Only a peer of the same user may hand sockets over (SO_PEERCRED).

A socket that never comes (the API process forwards the response instead) leaves nothing here to hand back:
each stream keeps its own events until its socket comes (ServedStream), and gives them back itself.
"""

from __future__ import annotations

import errno
import os
from email.utils import formatdate
from http import HTTPStatus
import socket
import time
from collections import deque

import msgspec

from tokworker.protocol.deltas import StreamUpdate
from tokworker.protocol.messages import CodedError, ErrorCode
from tokworker.wire.common import LAST_CHUNK, http_chunk
from tokworker.worker.local_socket import accept_own, close_listener, listen
from tokworker.worker.sessions import process_peer, session_key

MAX_MESSAGE = 4096                # bytes of "session\0stream id\0headers" in one hand-over message
LINGER_S = 60.0                   # how long a finished stream's unread bytes may wait for its client


class Sink:
    """One response body: its socket once handed over (-1 before), and what waits to be written. `waiting`
    is the table's sinks with bytes waiting, by descriptor (the lane polls those for writability, and a
    writable one is found there without looking at any other sink). `choices`: the streams that write
    here; once they all ended (`finished`), `tail(usages)` makes a streamed response's last events, and
    `tail(usages, bodies)` a `whole` one's body."""

    __slots__ = ("fd", "pending", "pending_bytes", "max_bytes", "failed", "ending", "closed", "released",
                 "waiting", "choices", "usages", "tail", "live", "bodies", "head", "response", "gathered",
                 "gathering", "told_behind")

    def __init__(self, max_bytes: int, waiting: dict, choices: int = 1, tail=None, whole: bool = False,
                 gathering: list | None = None):
        self.fd = -1
        self.pending: deque[bytes] = deque()
        self.pending_bytes = 0
        self.max_bytes = max_bytes
        self.failed: str | None = None       # why the client can no longer be written to
        self.ending = False                  # LAST_CHUNK is queued: close once it is out
        self.closed = False                  # the socket is ours no more (the body ended, or it failed)
        self.released = 0.0                  # when its last stream ended (the sink only flushes from then on)
        self.waiting = waiting
        self.choices = choices
        self.usages: list = []               # the usage of each of its choices that ended
        self.tail = tail
        self.live: set[str] = set()          # its streams still open (the table's keys that name it)
        self.bodies: list | None = [] if whole else None   # a whole response's choices' bodies, with their index
        self.head = b""                      # ... the headers that came with its socket
        self.response: tuple | None = None   # ... its status line's status, body and headers, once known
        # several streamed choices: this step's events, written at its end as one chunk (SinkTable.flush_step)
        self.gathered: list[bytes] | None = [] if choices > 1 and not whole and gathering is not None else None
        self.gathering = gathering
        self.told_behind = False             # its API process heard that bytes of it wait (StreamUpdate.behind)

    def write(self, data: bytes) -> None:
        """One event (or several) as one HTTP chunk; the events a step makes for several choices as one
        chunk, once the step is done (`flush_step` of the table in `gathering`).

        >>> gathering = []
        >>> sink = Sink(1 << 20, {}, choices=2, gathering=gathering)
        >>> sink.write(b"data: 0\\n\\n"); sink.write(b"data: 1\\n\\n"); list(sink.pending), gathering == [sink]
        ([], True)
        >>> sink.flush_step(); list(sink.pending)
        [b'12\\r\\ndata: 0\\n\\ndata: 1\\n\\n\\r\\n']
        """
        if data and self.failed is None:
            gathered = self.gathered
            if gathered is None:
                self._send(http_chunk(data))
                return
            if not gathered:
                self.gathering.append(self)
            gathered.append(data)

    def flush_step(self) -> None:
        if self.gathered:
            self._send(b"")

    def finished(self, usage) -> None:
        """One of the response's choices ended (with `usage`); after the last, its tail and the body's end.

        >>> sink = Sink(1 << 20, {}, choices=2, tail=lambda usages: b"data: %d usages\\n\\n" % len(usages))
        >>> sink.finished(None); sink.ending
        False
        >>> sink.finished(None); sink.ending, list(sink.pending)
        (True, [b'10\\r\\ndata: 2 usages\\n\\n\\r\\n', b'0\\r\\n\\r\\n'])
        """
        usages = self.usages
        usages.append(usage)
        if len(usages) < self.choices:
            return
        if self.bodies is None:
            self.end(self.tail(usages) if self.tail is not None else b"")
        elif self.response is None:             # (an error answered it already)
            self.respond(200, self.tail(usages, [body for _, body in sorted(self.bodies)]))

    def finished_whole(self, usage, body: bytes, index: int) -> None:
        """One of a whole response's choices ended with its `body` (choices[index]); after the last, the
        response (status, headers, the body of them all).

        >>> sink = Sink(1 << 20, {}, choices=2, tail=lambda usages, bodies: b"[" + b",".join(bodies) + b"]",
        ...             whole=True)
        >>> sink.finished_whole(None, b"1", 1); sink.finished_whole(None, b"0", 0); sink.response
        (200, b'[0,1]', None)
        """
        self.bodies.append((index, body))
        self.finished(usage)

    def respond(self, status: int, body: bytes, head: bytes | None = None) -> None:
        """A whole response, once: its status, and its body with the headers that came with its socket (or
        `head`: an error's are the API's error headers), written when the socket is here; it closes after."""
        if self.response is None and self.failed is None:
            self.response = (status, body, head)
            if self.fd >= 0:
                self._respond()

    def _respond(self) -> None:
        status, body, head = self.response
        self.ending = True
        self._send(b"HTTP/1.1 %d %s\r\nDate: %s\r\n%sContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (
            status, HTTPStatus(status).phrase.encode(), formatdate(usegmt=True).encode(),
            self.head if head is None else head, len(body), body))

    def end(self, tail: bytes = b"") -> None:
        """The response's last bytes, then the chunked body's end; the socket closes once they are out."""
        if self.failed is None and not self.ending:
            if tail:
                self._send(http_chunk(tail))
            self.ending = True
            self._send(LAST_CHUNK)

    def attach(self, fd: int, head: bytes = b"") -> None:
        """The client's socket is here: what waits goes out. `head`: a whole response's headers (its status
        line and length are the sink's to write), or a streamed response's status line and headers as the API
        process would have written them (none: it wrote them), which go out first."""
        self.fd = fd
        if self.bodies is not None:
            self.head = head
        elif head:
            pending = self.pending
            if pending:                          # one write for the head and the events that waited for it
                pending[0] = head + pending[0]
            else:
                pending.append(head)
            self.pending_bytes += len(head)
        if self.response is not None:
            self._respond()
        else:
            self.flush()

    def flush(self) -> None:
        pending = self.pending
        while pending and self.failed is None:
            data = pending[0]
            try:
                sent = os.write(self.fd, data)
            except BlockingIOError:
                self.waiting[self.fd] = self
                return
            except OSError as error:
                self._fail(f"the client's socket refused a write: {os.strerror(error.errno)}")
                return
            self.pending_bytes -= sent
            if sent < len(data):
                pending[0] = data[sent:]
                self.waiting[self.fd] = self
                return
            pending.popleft()
        self.waiting.pop(self.fd, None)
        if self.ending and not pending:
            self.close()

    def close(self) -> None:
        self.closed = True
        if self.gathered:
            self.gathered.clear()
        if self.fd >= 0:
            self.waiting.pop(self.fd, None)
            os.close(self.fd)
            self.fd = -1
        self.pending.clear()
        self.pending_bytes = 0

    def _send(self, data: bytes) -> None:
        gathered = self.gathered
        if gathered:                             # what this step gathered goes first
            data = http_chunk(b"".join(gathered)) + data
            gathered.clear()
        if self.pending or self.fd < 0:
            self._queue(data)
            return
        try:
            sent = os.write(self.fd, data)
        except BlockingIOError:
            sent = 0
        except OSError as error:
            self._fail(f"the client's socket refused a write: {os.strerror(error.errno)}")
            return
        if sent < len(data):
            self._queue(data[sent:])
            self.waiting[self.fd] = self
        elif self.ending:                        # the body's end (or a whole response) is out
            self.close()

    def _queue(self, data: bytes) -> None:
        if self.closed:                          # cut while another choice of its response goes on
            return
        if self.pending_bytes + len(data) > self.max_bytes:
            self._fail(f"the client fell more than {self.max_bytes} bytes behind")
            return
        self.pending.append(data)
        self.pending_bytes += len(data)

    def _fail(self, why: str) -> None:
        self.failed = why
        self.close()


class SinkTable:
    """A worker's sinks by (session, stream id), and the listener their sockets arrive on."""

    def __init__(self, path: str, max_bytes: int):
        self.path = path
        self.max_bytes = max_bytes
        self.sinks: dict[tuple[str, str], Sink] = {}
        self.peers: dict[int, tuple[socket.socket, str]] = {}     # descriptor -> (API process, its peer)
        self.waiting: dict[int, Sink] = {}                          # descriptor -> its sink, bytes waiting
        self.gathering: list[Sink] = []                             # sinks holding this step's events
        self.listener = listen(path, socket.SOCK_SEQPACKET)

    def open(self, session: str, stream_id: str, choices: int = 1, tail=None, whole: bool = False) -> Sink:
        """A new response's sink, for its first stream (of `choices`): its events wait in it until the socket
        arrives."""
        self.close(session, stream_id)
        sink = self.sinks[(session, stream_id)] = Sink(self.max_bytes, self.waiting, choices, tail, whole,
                                                       self.gathering)
        sink.live.add(stream_id)
        return sink

    def join(self, session: str, stream_id: str, first: str) -> Sink:
        """Another choice's stream of the response whose first stream is `first`: it writes to that sink."""
        sink = self.sinks.get((session, first))
        if sink is None or sink.closed or sink.ending or first not in sink.live:
            raise CodedError(ErrorCode.INVALID, f"no open direct stream {first!r} on this worker to share a client "
                                                f"socket with")
        if len(sink.live) + len(sink.usages) >= sink.choices:
            raise CodedError(ErrorCode.INVALID, f"the response of {first!r} has its {sink.choices} choices already")
        self.close(session, stream_id)
        self.sinks[(session, stream_id)] = sink
        sink.live.add(stream_id)
        return sink

    def release(self, session: str, stream_id: str) -> None:
        """The stream is over: its sink stays only while its response's last bytes wait for the client."""
        sink = self.sinks.get((session, stream_id))
        if sink is not None:
            live = sink.live
            live.discard(stream_id)
            if sink.closed:
                del self.sinks[(session, stream_id)]
            elif not live:
                sink.released = time.monotonic()

    def forward(self, session: str, stream_id: str) -> None:
        """The stream goes on without its socket (the API process forwards its response): its sink goes once
        no stream of its response writes to it."""
        sink = self.sinks.pop((session, stream_id), None)
        if sink is not None:
            sink.live.discard(stream_id)
            if not sink.live:
                sink.close()

    def close(self, session: str, stream_id: str) -> None:
        """The stream was closed or aborted: its response's socket is let go now."""
        sink = self.sinks.pop((session, stream_id), None)
        if sink is not None:
            sink.live.discard(stream_id)
            sink.close()

    def flush_step(self) -> None:
        """A step is done: each sink that gathered its choices' events writes them, one write each."""
        gathering = self.gathering
        for sink in gathering:
            sink.flush_step()
        gathering.clear()

    def tell_behind(self, stepped: dict, updates: list) -> None:
        """Say `behind` once per response whose sink holds bytes its client has not taken, in the update of
        one of its streams the step `stepped` names (else at a later step): were this worker to die now, the
        body on the wire could stop mid-chunk, and its API process must not write an error event after it.
        (A death between a write the socket took in part and this step's reply goes unsaid: that client
        reads a garbled last event.)

        >>> table = SinkTable.__new__(SinkTable); sink = Sink(1 << 20, {}); sink.live.add("b")
        >>> table.waiting = {7: sink}; updates = [None, None]
        >>> table.tell_behind({"a": [1], "b": [2]}, updates); updates[1].behind, updates[0], sink.told_behind
        (True, None, True)
        """
        for sink in self.waiting.values():
            if sink.told_behind:
                continue
            for place, stream_id in enumerate(stepped):
                if stream_id in sink.live:
                    update = updates[place]
                    updates[place] = StreamUpdate(behind=True) if update is None else \
                        msgspec.structs.replace(update, behind=True)
                    sink.told_behind = True
                    break

    def readable(self) -> list[int]:
        """The descriptors to poll for input: the listener and the connected API processes."""
        return [self.listener.fileno(), *self.peers]

    def on_readable(self, fd: int) -> None:
        if fd == self.listener.fileno():
            self._accept()
        elif fd in self.peers:
            self._receive(fd)

    def on_writable(self, fds) -> None:
        """Flush the sinks of these sockets (an ended stream's sink, closed once flushed, goes at the next
        evict)."""
        waiting = self.waiting
        for fd in fds:
            sink = waiting.get(fd)
            if sink is not None:
                sink.flush()

    def evict(self, now: float) -> None:
        """Ended responses' sinks whose clients did not take their last bytes within LINGER_S."""
        for key, sink in list(self.sinks.items()):
            if not sink.live and (sink.closed or now - sink.released > LINGER_S):
                sink.close()
                del self.sinks[key]

    def close_all(self) -> None:
        for sink in self.sinks.values():
            sink.close()
        self.sinks.clear()
        for peer, _ in self.peers.values():
            peer.close()
        close_listener(self.listener, self.path)

    def _accept(self) -> None:
        for peer, pid in accept_own(self.listener):
            self.peers[peer.fileno()] = (peer, process_peer(pid))     # its sessions are that process's

    def _receive(self, fd: int) -> None:
        peer, owner = self.peers[fd]
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(peer, MAX_MESSAGE, 1)
            except BlockingIOError:
                return
            except OSError as error:
                if error.errno not in (errno.ECONNRESET, errno.EPIPE):
                    raise
                data, fds = b"", []
            if not data:                                 # the API process went away
                del self.peers[fd]
                peer.close()
                return
            session, _, rest = data.partition(b"\0")
            stream_id, _, head = rest.partition(b"\0")
            session, stream_id = session.decode("utf-8", "replace"), stream_id.decode("utf-8", "replace")
            for extra in fds[1:]:
                os.close(extra)
            if not fds:
                continue
            sink = self.sinks.get((session_key(owner, session), stream_id))
            if sink is not None and sink.fd < 0 and not sink.closed:
                sink.attach(fds[0], head)
            else:                                        # that stream is over (or never was): not ours to keep
                os.close(fds[0])
