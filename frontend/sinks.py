"""The API process's side of direct streaming: hand a client's socket to the worker that streams its
response (see tokworker/worker/sinks.py). One Unix SEQPACKET connection per worker, at its sinks_path; one
message per response, "session\\0stream id" (its first stream's), then "\\0" and the headers the worker
writes (a whole response's header lines; a streamed one's status line and headers), with the socket as
SCM_RIGHTS.

Nothing here waits: it runs on the API process's event loop. The socket is non-blocking, so a worker that
cannot take a socket now (its lane stopped or busy: the connection's queue, or its listener's backlog, is
full) is a False from `hand`, or BlockingIOError from connecting, at once; the caller then forwards that
response itself (a Forward, see frontend/client.py).
"""

from __future__ import annotations

import socket

from tokworker.worker.sinks import MAX_MESSAGE


def takes_sink(capabilities, chunks) -> bool:
    """Whether a worker of these capabilities writes a response of the chunk format `chunks` to its client
    itself: it takes sockets, and this response's kind (several choices on one socket, a whole body)."""
    return chunks is not None and "sinks" in capabilities and (chunks.n == 1 or "sink_groups" in capabilities) \
        and (not chunks.whole or "whole_sinks" in capabilities)


class SinkSender:
    """Hands sockets to one worker. Connecting raises OSError (BlockingIOError when its backlog is full)."""

    def __init__(self, path: str):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_NONBLOCK)
        try:
            self.sock.connect(path)                 # a Unix socket connects at once, or fails at once
        except OSError:
            self.sock.close()
            raise

    def hand(self, session: str, stream_id: str, fd: int, head: bytes = b"") -> bool:
        """True when the worker has its own reference to `fd` on the way (the caller's stays open until it
        closes it); False when the connection's queue is full (the worker does not read it now), or the
        message (`head`: a whole response's header lines, or a streamed one's status line and headers) is past
        what the worker reads."""
        message = f"{session}\0{stream_id}".encode() + (b"\0" + head if head else b"")
        if len(message) > MAX_MESSAGE:
            return False
        try:
            socket.send_fds(self.sock, [message], [fd])
        except BlockingIOError:
            return False
        return True

    def close(self) -> None:
        self.sock.close()
