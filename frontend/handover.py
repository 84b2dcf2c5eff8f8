"""Giving a client's socket to the worker that writes its response (direct streaming), from the pool's side:
the response's streams (the first choice's, and those opened beside it) go over together, or, when the
worker cannot take the socket now, each is turned into a forwarded stream (a Forward), whose events the
caller writes from then on.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokworker.protocol.deltas import StreamUpdate
from tokworker.protocol.messages import ErrorCode, Forward
from tokworker.frontend.errors import InvalidRequest, WorkerLost
from tokworker.frontend.link import encode_request
from tokworker.frontend.recovery import quiet


def hand_over(streams: dict, stream_id: str, fd: int, shared: Sequence[str] = (), head: bytes = b"") -> bool:
    """TokenizerPool.hand_over on the pool's table of `streams`; see its docstring."""
    stream = streams[stream_id]
    if not stream.direct:
        raise InvalidRequest(ErrorCode.INVALID, f"stream {stream_id!r} was not opened for direct streaming")
    group = [stream, *(streams[name] for name in shared)]
    link = stream.link
    if all(s.sink for s in group):
        if link.hand_over(stream_id, fd, head):
            for member in group:
                member.handed_over()
            return True
    else:                                                # a recovery forwarded them already
        link.handover_fallbacks += 1
    for member in group:         # a streamed one's events wait in a sink no socket will reach (a whole
        if member.sink and member.finished and not member.chunks.whole:     # one's body came with its end)
            raise WorkerLost(ErrorCode.WORKER_LOST, f"the worker of {member.id!r} could not take its client's "
                                                    f"socket, and the stream ended before it could be forwarded")
    for member in group:
        if member.sink:
            link.request(encode_request(Forward(stream_id=member.id)), on_reply=_forwarded(member),
                         on_error=member.fail, stateful=True).add_done_callback(quiet)
    return False


def _forwarded(stream):
    """A Forward's reply: the events its stream's worker made before, which the caller writes first."""
    def on_reply(reply) -> None:
        stream.forwarded(StreamUpdate(sse=reply.sse) if reply.sse else None)
    return on_reply
