"""Response bodies a worker writes itself (direct streaming): once a streamed response's headers are out, the
API process hands the client's socket to the stream's worker (SCM_RIGHTS over a Unix socket beside the
worker's endpoint), and the worker writes each step's server-sent events to it as HTTP/1.1 chunks. The
engine's process then neither receives those bytes nor writes them: per token it only sends ids.

    table = SinkTable(path, max_bytes=4 << 20)      # the worker's listener, at <endpoint path>.sinks
    sink = table.open(session, "req-1")             # when the stream opens; its socket arrives after
    sink.write(b'data: {...}\\n\\n')                 # framed; what the socket does not take waits (bounded)
    sink.end(b"data: [DONE]\\n\\n")                   # the last events and the chunked body's end
    table.release(session, "req-1")                 # the stream is over: the sink goes once it is flushed

Writes never block: what a full socket does not take waits in its Sink, and the lane polls the socket for
writability (`table.waiting`), up to `max_bytes`, past which the client is cut (as a slow HTTP client is cut
in the API process). A write that fails (the client went away) marks the sink `failed`: the stream's next
update tells the API process to abort the request. A finished stream's sink that its client never drains is
closed after LINGER_S. Only a peer of the same user may hand sockets over (SO_PEERCRED).
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import time
from collections import deque

from tokworker.wire.common import http_chunk
from tokworker.worker.sessions import process_peer, session_key

END = b"0\r\n\r\n"
MAX_KEY = 512                     # bytes of "session\0stream id" in one hand-over message
LINGER_S = 60.0                   # how long a finished stream's unread bytes may wait for its client
_CREDENTIALS = struct.Struct("3i")


class Sink:
    """One response body: its socket once handed over (-1 before), and what waits to be written. `waiting`
    is the table's sinks with bytes waiting, by descriptor (the lane polls those for writability, and a
    writable one is found there without looking at any other sink)."""

    __slots__ = ("fd", "pending", "pending_bytes", "max_bytes", "failed", "ending", "closed", "released",
                 "waiting")

    def __init__(self, max_bytes: int, waiting: dict):
        self.fd = -1
        self.pending: deque[bytes] = deque()
        self.pending_bytes = 0
        self.max_bytes = max_bytes
        self.failed: str | None = None       # why the client can no longer be written to
        self.ending = False                  # END is queued: close once it is out
        self.closed = False                  # the socket is ours no more (the body ended, or it failed)
        self.released = 0.0                  # when its stream ended (the sink only flushes from then on)
        self.waiting = waiting

    def write(self, data: bytes) -> None:
        """One event (or several) as one HTTP chunk."""
        if data and self.failed is None:
            self._send(http_chunk(data))

    def end(self, tail: bytes = b"") -> None:
        """The response's last bytes, then the chunked body's end; the socket closes once they are out."""
        if self.failed is None and not self.ending:
            if tail:
                self._send(http_chunk(tail))
            self.ending = True
            self._send(END)

    def attach(self, fd: int) -> None:
        self.fd = fd
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

    def held(self) -> bytes:
        """What waits for a socket that has not come, unframed (the events as written).

        >>> sink = Sink(1 << 20, {})
        >>> sink.write(b"data: one\\n\\n"); sink.write(b"data: two\\n\\n")
        >>> sink.held()
        b'data: one\\n\\ndata: two\\n\\n'
        """
        events = []
        for chunk in self.pending if self.fd < 0 else ():           # whole chunks: nothing was written yet
            size, _, rest = chunk.partition(b"\r\n")
            events.append(rest[:int(size, 16)])
        return b"".join(events)

    def take(self) -> bytes:
        """held(), and the sink closed: its stream goes on through the API process instead (a Forward)."""
        events = self.held()
        self.close()
        return events

    def close(self) -> None:
        self.closed = True
        if self.fd >= 0:
            self.waiting.pop(self.fd, None)
            os.close(self.fd)
            self.fd = -1
        self.pending.clear()
        self.pending_bytes = 0

    def _send(self, data: bytes) -> None:
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
        elif data is END:
            self.close()

    def _queue(self, data: bytes) -> None:
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
        if os.path.exists(path):
            os.unlink(path)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        old = os.umask(0o177)
        try:
            self.listener.bind(path)
        finally:
            os.umask(old)
        self.listener.listen(16)
        self.listener.setblocking(False)

    def open(self, session: str, stream_id: str) -> Sink:
        """A new stream's sink: its events wait in it until the socket arrives."""
        self.close(session, stream_id)
        sink = self.sinks[(session, stream_id)] = Sink(self.max_bytes, self.waiting)
        return sink

    def release(self, session: str, stream_id: str) -> None:
        """The stream is over: its sink stays only while its last bytes wait for the client."""
        sink = self.sinks.get((session, stream_id))
        if sink is not None:
            if sink.closed:
                del self.sinks[(session, stream_id)]
            else:
                sink.released = time.monotonic()

    def take(self, session: str, stream_id: str) -> bytes:
        """The stream's socket will not come: its sink goes, and what it held comes back (Sink.take)."""
        sink = self.sinks.pop((session, stream_id), None)
        return sink.take() if sink is not None else b""

    def close(self, session: str, stream_id: str) -> None:
        """The stream was closed or aborted: its socket is let go now."""
        sink = self.sinks.pop((session, stream_id), None)
        if sink is not None:
            sink.close()

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
        """Ended streams' sinks whose clients did not take their last bytes within LINGER_S."""
        for key, sink in list(self.sinks.items()):
            if sink.released and (sink.closed or now - sink.released > LINGER_S):
                sink.close()
                del self.sinks[key]

    def close_all(self) -> None:
        for sink in self.sinks.values():
            sink.close()
        self.sinks.clear()
        for peer, _ in self.peers.values():
            peer.close()
        self.listener.close()
        if os.path.exists(self.path):
            os.unlink(self.path)

    def _accept(self) -> None:
        while True:
            try:
                peer, _ = self.listener.accept()
            except BlockingIOError:
                return
            pid, uid, _ = _CREDENTIALS.unpack(peer.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size))
            if uid != os.getuid():
                peer.close()                             # the directory is private: this is not our user
                continue
            peer.setblocking(False)
            self.peers[peer.fileno()] = (peer, process_peer(pid))     # its sessions are that process's

    def _receive(self, fd: int) -> None:
        peer, owner = self.peers[fd]
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(peer, MAX_KEY, 1)
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
            session, _, stream_id = data.decode("utf-8", "replace").partition("\0")
            for extra in fds[1:]:
                os.close(extra)
            if not fds:
                continue
            sink = self.sinks.get((session_key(owner, session), stream_id))
            if sink is not None and sink.fd < 0 and not sink.closed:
                sink.attach(fds[0])
            else:                                        # that stream is over (or never was): not ours to keep
                os.close(fds[0])
