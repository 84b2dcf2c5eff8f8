"""The API process's side of direct streaming: hand a client's socket to the worker that streams its
response (see tokworker/worker/sinks.py). One Unix SEQPACKET connection per worker, at its sinks_path; one
message per stream, "session\\0stream id" with the socket as SCM_RIGHTS."""

from __future__ import annotations

import socket


class SinkSender:
    """Hands sockets to one worker."""

    def __init__(self, path: str, timeout: float = 5.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.settimeout(timeout)
        self.sock.connect(path)

    def hand(self, session: str, stream_id: str, fd: int) -> None:
        """The worker gets its own reference to `fd`; the caller's stays open until it closes it."""
        socket.send_fds(self.sock, [f"{session}\0{stream_id}".encode()], [fd])

    def close(self) -> None:
        self.sock.close()
