"""Requests from local API processes over a plain Unix stream socket, beside the worker's ZeroMQ socket (the
API process's side, and why, is frontend/request_socket.py). The lane reads them here and serves each as if
it had come on the ZeroMQ connection its session was greeted on, and its replies to that connection go back
here, framed the same way (`reply`); what the socket does not take at once waits in its connection and goes
when it is writable, and the lane holds later replies while it waits, as for a client that stops reading.

A connection's first message names a session and its epoch ("session\\0epoch"): it is bound to the ZeroMQ
connection whose Hello took that session at that epoch, among the sessions of the connecting process
(SO_PEERCRED, as ZeroMQ's ipc peers are known), and closed when there is none. Every later message is a
request as ZeroMQ would carry it (the request id, 8 bytes, then the body), each after its length (4 bytes,
little-endian):

    >>> frames = Framing(max_frame=64)
    >>> frames.feed(b"\\x03\\x00\\x00\\x00abc\\x02\\x00\\x00"), frames.feed(b"\\x00de")
    ([b'abc'], [b'de'])

A frame longer than `max_frame` (the worker's max_message_bytes and its id) closes the connection: no client
of ours sends one (the pool checks sizes before it sends), so nothing waits for an answer to it. So does a
connection whose unfinished frame would take the frames held past HELD_BYTES. Only a peer
of the worker's own user connects (the socket file is the user's alone, and SO_PEERCRED is checked again).
"""

from __future__ import annotations

import socket
import struct

import zmq

from tokworker.worker.local_socket import accept_own, close_listener, listen
from tokworker.worker.sessions import process_peer, session_key

READ_BYTES = 256 << 10             # read from a connection at a time (then the lane serves what came)
MAX_CONNECTIONS = 256              # API-process links at once (one per pool and worker)
HELD_BYTES = 256 << 20             # unfinished frames held, all connections together
_LENGTH = struct.Struct("<I")


class SocketFrame:
    """A request read here, shaped as the lane reads a ZeroMQ frame: `buffer` and its length. It has none of
    ZeroMQ's message properties (a Hello must come over ZeroMQ, where its peer is known)."""

    __slots__ = ("buffer",)

    def __init__(self, data: bytes):
        self.buffer = memoryview(data)

    def __len__(self) -> int:
        return len(self.buffer)

    def get(self, option):
        raise zmq.ZMQError(zmq.EINVAL)


class Framing:
    """Length-prefixed frames out of a byte stream: `feed(bytes)` returns the frames it completes; a frame
    over `max_frame` raises ValueError."""

    __slots__ = ("max_frame", "held")

    def __init__(self, max_frame: int):
        self.max_frame = max_frame
        self.held = b""                            # the start of a frame not yet whole

    def feed(self, data: bytes) -> list[bytes]:
        if self.held:
            data = self.held + data
        frames, at, end, unpack = [], 0, len(data), _LENGTH.unpack_from
        while end - at >= 4:
            size = unpack(data, at)[0]
            if size > self.max_frame:
                raise ValueError(f"a frame of {size} bytes, over {self.max_frame}")
            if end - at - 4 < size:
                break
            frames.append(data[at + 4:at + 4 + size])
            at += 4 + size
        self.held = data[at:] if at < end else b""
        return frames


class _Connection:
    __slots__ = ("sock", "owner", "identity", "framing", "unsent")

    def __init__(self, sock: socket.socket, owner: str, max_frame: int):
        self.sock, self.owner, self.identity = sock, owner, None
        self.framing = Framing(max_frame)
        self.unsent = b""                          # the rest of a reply the socket did not take


class RequestSockets:
    """The listener at `path` and its connections; `sessions` (sessions.Sessions) says which ZeroMQ
    connection greeted a session."""

    def __init__(self, path: str, sessions, max_frame: int):
        self.path, self.sessions, self.max_frame = path, sessions, max_frame
        self.connections: dict[int, _Connection] = {}
        self.of: dict[bytes, _Connection] = {}      # ZeroMQ connection -> the bound one its replies go to
        self.waiting: dict[int, _Connection] = {}   # descriptor -> its connection, a reply's rest unsent
        self.listener = listen(path, socket.SOCK_STREAM)

    def readable(self) -> list[int]:
        """The descriptors to poll for input: the listener and the connections."""
        return [self.listener.fileno(), *self.connections]

    def reply(self, identity: bytes, header: bytes, body: bytes) -> bool | None:
        """Send a reply to the ZeroMQ connection `identity` over its bound socket: True when it is on its way,
        False when the socket has a reply's rest still to take (the caller holds this one), None when that
        connection has no socket here (ZeroMQ carries it)."""
        connection = self.of.get(identity)
        if connection is None:
            return None
        if connection.unsent:
            return False
        size = 8 + len(body)
        try:
            sent = connection.sock.sendmsg((_LENGTH.pack(size), header, body))
        except BlockingIOError:
            return False
        except OSError:                                # its API process is gone: nothing to hold
            self._drop(connection.sock.fileno())
            return True
        if sent < 4 + size:
            connection.unsent = (_LENGTH.pack(size) + header + body)[sent:]
            self.waiting[connection.sock.fileno()] = connection
        return True

    def on_writable(self, fd: int) -> bytes | None:
        """Send more of the reply waiting on `fd`; the identity whose replies may go again once it is out."""
        connection = self.waiting.get(fd)
        if connection is None:
            return None
        try:
            sent = connection.sock.send(connection.unsent)
        except BlockingIOError:
            return None
        except OSError:
            self._drop(fd)
            return None
        connection.unsent = connection.unsent[sent:]
        if connection.unsent:
            return None
        del self.waiting[fd]
        return connection.identity

    def on_readable(self, fd: int) -> list[tuple[bytes, SocketFrame]]:
        """What came on `fd`: (identity, request) pairs to serve, in the order they were sent."""
        if fd == self.listener.fileno():
            self._accept()
            return []
        connection = self.connections.get(fd)
        if connection is None:
            return []
        try:
            data = connection.sock.recv(READ_BYTES)
            frames = connection.framing.feed(data) if data else None
        except BlockingIOError:
            return []
        except (OSError, ValueError):
            frames = None
        if frames is None or (connection.framing.held and self._held() > HELD_BYTES):
            self._drop(fd)                                 # its API process closed it, or broke a bound
            return []
        if connection.identity is None and frames:
            connection.identity = self._bound(connection, frames.pop(0))
            if connection.identity is None:
                self._drop(fd)
                return []
            self.of[connection.identity] = connection
        identity = connection.identity
        return [(identity, SocketFrame(frame)) for frame in frames]

    def _held(self) -> int:
        return sum(len(c.framing.held) for c in self.connections.values())

    def close_all(self) -> None:
        for fd in list(self.connections):
            self._drop(fd)
        close_listener(self.listener, self.path)

    def _accept(self) -> None:
        for sock, pid in accept_own(self.listener):
            if len(self.connections) >= MAX_CONNECTIONS:
                sock.close()
                continue
            self.connections[sock.fileno()] = _Connection(sock, process_peer(pid), self.max_frame)

    def _bound(self, connection: _Connection, greeting: bytes) -> bytes | None:
        """The ZeroMQ connection of the session and epoch `greeting` names, among its peer's sessions."""
        name, _, epoch = greeting.partition(b"\0")
        owner = self.sessions.owners.get(session_key(connection.owner, name.decode("utf-8", "replace")))
        if owner is None or str(owner[0]).encode() != epoch:
            return None
        return owner[1]

    def _drop(self, fd: int) -> None:
        connection = self.connections.pop(fd, None)
        if connection is not None:
            self.waiting.pop(fd, None)
            if self.of.get(connection.identity) is connection:
                del self.of[connection.identity]
            connection.sock.close()
