"""The worker's plain Unix listeners beside its ipc endpoint (client sockets handed over: sinks.py; requests:
request_socket.py): the socket file is its user's alone, and only that user's processes are kept, each known
by its pid (SO_PEERCRED), as ZeroMQ knows its ipc peers.
"""

from __future__ import annotations

import os
import socket
import struct

_CREDENTIALS = struct.Struct("3i")


def listen(path: str, kind: int) -> socket.socket:
    """A non-blocking listener of `kind` (SOCK_STREAM, SOCK_SEQPACKET) at `path`, replacing a stale file."""
    if os.path.exists(path):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, kind)
    old = os.umask(0o177)
    try:
        listener.bind(path)
    finally:
        os.umask(old)
    listener.listen(16)
    listener.setblocking(False)
    return listener


def accept_own(listener: socket.socket) -> list[tuple[socket.socket, int]]:
    """Every connection waiting, non-blocking, with its process's pid; another user's are closed."""
    accepted = []
    while True:
        try:
            peer, _ = listener.accept()
        except BlockingIOError:
            return accepted
        pid, uid, _ = _CREDENTIALS.unpack(peer.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size))
        if uid != os.getuid():
            peer.close()                                 # the directory is private: this is not our user
            continue
        peer.setblocking(False)
        accepted.append((peer, pid))


def close_listener(listener: socket.socket, path: str) -> None:
    listener.close()
    if os.path.exists(path):
        os.unlink(path)
