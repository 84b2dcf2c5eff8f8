"""Response bodies a worker writes itself (direct streaming): once a streamed response's headers are out, the
API process hands the client's socket to the stream's worker (SCM_RIGHTS over a Unix socket beside the
worker's endpoint), and the worker writes each step's server-sent events to it as HTTP/1.1 chunks. The
engine's process then neither receives those bytes nor writes them: per token it only sends ids.

    table = SinkTable(path, max_bytes=4 << 20)      # the worker's listener, at <endpoint path>.sinks
    sink = table.sink(session, "req-1")             # when the stream opens; its socket arrives after
    sink.write(b'data: {...}\\n\\n')                 # framed; what the socket does not take waits (bounded)
    sink.end(b"data: [DONE]\\n\\n")                   # the last events and the chunked body's end

Writes never block: a socket that is full keeps the rest in its Sink (the lane polls it for writability and
calls flush), up to `max_bytes`, past which the client is cut (as a slow HTTP client is cut in the API
process). A write that fails (the client went away) marks the sink `failed`; the step reply then tells the
API process to abort the request. Only a peer of the same user may hand sockets over (SO_PEERCRED).
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections import deque

END = b"0\r\n\r\n"
MAX_KEY = 512                     # bytes of "session\0stream id" in one hand-over message
_CREDENTIALS = struct.Struct("3i")


class Sink:
    """One response body: its socket once handed over (-1 before), and what waits to be written."""

    __slots__ = ("fd", "pending", "pending_bytes", "max_bytes", "failed", "ending", "closed")

    def __init__(self, max_bytes: int):
        self.fd = -1
        self.pending: deque[bytes] = deque()
        self.pending_bytes = 0
        self.max_bytes = max_bytes
        self.failed: str | None = None       # why the client can no longer be written to
        self.ending = False                  # END is queued: close once it is out
        self.closed = False                  # the socket is ours no more (the body ended, or it failed)

    def write(self, data: bytes) -> None:
        """One event (or several) as one HTTP chunk."""
        if data and self.failed is None:
            self._send(b"%x\r\n%b\r\n" % (len(data), data))

    def end(self, tail: bytes = b"") -> None:
        """The response's last bytes, then the chunked body's end; the socket closes once they are out."""
        if self.failed is None and not self.ending:
            if tail:
                self._send(b"%x\r\n%b\r\n" % (len(tail), tail))
            self.ending = True
            self._send(END)

    @property
    def waiting(self) -> bool:
        """Bytes wait for the socket to take them (the lane polls it for writability)."""
        return self.fd >= 0 and bool(self.pending) and self.failed is None

    @property
    def done(self) -> bool:
        return self.closed

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
                return
            except OSError as error:
                self._fail(f"the client's socket refused a write: {os.strerror(error.errno)}")
                return
            self.pending_bytes -= sent
            if sent < len(data):
                pending[0] = data[sent:]
                return
            pending.popleft()
        if self.ending and not pending:
            self.close()

    def close(self) -> None:
        self.closed = True
        if self.fd >= 0:
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
        elif self.ending and data is END:
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
        self.peers: dict[int, socket.socket] = {}
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

    def sink(self, session: str, stream_id: str) -> Sink:
        """A new stream's sink: its events wait in it until the socket arrives."""
        sink = self.sinks[(session, stream_id)] = Sink(self.max_bytes)
        return sink

    def drop(self, session: str, stream_id: str) -> None:
        sink = self.sinks.pop((session, stream_id), None)
        if sink is not None:
            sink.close()

    def readable(self) -> list[int]:
        """The descriptors to poll for input: the listener and the connected API processes."""
        return [self.listener.fileno(), *self.peers]

    def writable(self) -> list[int]:
        return [sink.fd for sink in self.sinks.values() if sink.waiting]

    def on_readable(self, fd: int) -> None:
        if fd == self.listener.fileno():
            self._accept()
        else:
            self._receive(fd)

    def on_writable(self, fd: int) -> None:
        for sink in self.sinks.values():
            if sink.fd == fd:
                sink.flush()
                return

    def close(self) -> None:
        for sink in self.sinks.values():
            sink.close()
        for peer in self.peers.values():
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
            pid, uid, gid = _CREDENTIALS.unpack(peer.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                _CREDENTIALS.size))
            if uid != os.getuid():
                peer.close()                             # the directory is private: this is not our user
                continue
            peer.setblocking(False)
            self.peers[peer.fileno()] = peer

    def _receive(self, fd: int) -> None:
        peer = self.peers[fd]
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
            sink = self.sinks.get((session, stream_id))
            if sink is not None and sink.fd < 0 and sink.failed is None:
                sink.attach(fds[0])
            else:                                        # that stream is over (or never was): not ours to keep
                os.close(fds[0])
