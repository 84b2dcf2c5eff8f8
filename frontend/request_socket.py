"""A link's requests to a local worker over a plain Unix stream socket, beside its ZeroMQ socket (the worker's
side: tokworker/worker/request_socket.py).

ZeroMQ sends and receives through its I/O thread: each message wakes that thread, on both sides. When few
streams run, those wakes are most of what an engine step costs the API process (the bench's one-stream
figure); a write to a Unix socket from the loop itself is one system call. So once a link's Hello is
answered, every request of that epoch (steps, opens, renders, re-sends) goes out here, in the order it was
sent; the worker serves it as if it had come on the ZeroMQ connection that said the Hello, and sends the
replies back here too (`on_reply` gets each one's bytes as ZeroMQ would have). Workers on other hosts, and
workers without the `request_socket` capability, keep ZeroMQ both ways; so do the Hello and the
connection's monitor (a worker's death).

Framing, both ways: each message is its length (4 bytes, little-endian), then the bytes ZeroMQ would carry
(the request id, then the body); the first one sent names the session and the epoch ("session\\0epoch").
Nothing here waits: what the kernel does not take at once waits in `waiting` (in order, at most
MAX_WAITING bytes unless it was empty) and goes when the socket is writable; replies are read as they come.
"""

from __future__ import annotations

import socket
import struct

from tokworker.worker.request_socket import READ_BYTES, Framing

MAX_WAITING = 64 << 20             # bytes held while the worker does not read (a hung one is replaced sooner)
_LENGTH = struct.Struct("<I")


class RequestSocket:
    """One epoch's connection; constructing it raises OSError when the worker does not take it now.
    `on_reply(message)` gets each reply (`max_reply` bytes at most); `on_broken()` runs once when the worker
    closes its end."""

    __slots__ = ("sock", "loop", "fd", "waiting", "broken", "answered", "on_broken", "on_reply", "framing",
                 "_sendmsg")

    def __init__(self, path: str, session: str, epoch: int, loop, on_reply, on_broken, max_reply: int):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
        try:
            sock.connect(path)                             # a Unix socket connects at once, or fails at once
        except OSError:
            sock.close()
            raise
        self.sock, self.loop, self.fd = sock, loop, sock.fileno()
        self.waiting = bytearray()
        self.broken = False                 # the worker went away: the link's recovery re-sends what waits
        self.answered = False               # a reply came here
        self.on_broken, self.on_reply = on_broken, on_reply
        self.framing = Framing(max_reply)
        self._sendmsg = sock.sendmsg
        self.send(f"{session}\0{epoch}".encode())
        if not self.broken:
            loop.add_reader(self.fd, self.read)

    def read(self) -> None:
        """Every reply the socket holds now, to on_reply."""
        if self.broken:
            return
        while True:
            try:
                data = self.sock.recv(READ_BYTES)
                replies = self.framing.feed(data) if data else None
            except BlockingIOError:
                return
            except (OSError, ValueError):
                replies = None
            if replies is None:
                self._break()
                return
            if replies:
                self.answered = True
            for reply in replies:
                self.on_reply(reply)
                if self.broken:                      # the reply's handler closed the link
                    return
            if len(data) < READ_BYTES:
                return

    def send(self, data: bytes) -> bool:
        """Put `data` (one request's bytes) on its way; False when MAX_WAITING bytes wait already."""
        if self.broken:
            return True
        header = _LENGTH.pack(len(data))
        if self.waiting:
            if len(self.waiting) + len(data) > MAX_WAITING:
                return False
            self.waiting += header
            self.waiting += data
            return True
        try:
            sent = self._sendmsg((header, data))
        except BlockingIOError:
            sent = 0
        except OSError:
            self._break()
            return True
        if sent < 4 + len(data):
            self.waiting += (header + data)[sent:]
            self.loop.add_writer(self.fd, self._flush)
        return True

    def _flush(self) -> None:
        try:
            sent = self.sock.send(self.waiting)
        except BlockingIOError:
            return
        except OSError:
            self._break()
            return
        del self.waiting[:sent]
        if not self.waiting:
            self.loop.remove_writer(self.fd)

    def _break(self) -> None:
        """The worker closed its end (it died, or did not know the greeting's session): what was sent here may
        be lost, so the link starts a new epoch, which re-sends everything unanswered."""
        if self.waiting:
            self.loop.remove_writer(self.fd)
            self.waiting.clear()
        self.broken = True
        self.loop.remove_reader(self.fd)
        self.loop.call_soon(self.on_broken)

    def close(self) -> None:
        if self.waiting:
            self.loop.remove_writer(self.fd)
            self.waiting.clear()
        if not self.broken:
            self.loop.remove_reader(self.fd)
        self.broken = True
        self.sock.close()
