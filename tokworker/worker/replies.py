"""Replies sized before they are encoded: a reply over the message limit is answered TOO_LARGE without
being built, and a large one is encoded into a buffer allocated up front, so running out of memory is a
MemoryError (an OUT_OF_MEMORY reply) and never a failed reallocation inside the encoder (msgspec's encoder
has crashed the process there under RLIMIT_AS).

Bounds are upper bounds of the msgpack size: a character of ASCII text is a byte, of other text at most 4
(counted exactly when that decides), an id (below 2**32) at most 5 bytes.
"""

from __future__ import annotations

import msgspec

from tokworker.protocol.messages import (CodedError, DecodeReply, EncodeReply, ErrorCode, GuideReply, RenderReply,
                                         StepReply)

PREALLOCATE = 1 << 20          # replies that may be larger are encoded into a buffer of their bound
_ENCODER = msgspec.msgpack.Encoder()
_OVERHEAD = 64


def _text(value) -> int:
    if value is None:
        return 0
    return len(value) + 5 if value.isascii() else 4 * len(value) + 5


def _exact_text(value) -> int:
    if value is None:
        return 0
    return len(value) + 5 if value.isascii() else len(value.encode("utf-8", "surrogatepass")) + 5


def _ids(ids) -> int:
    return 5 * len(ids) + 5


def _update(update, text) -> int:
    reason = update.stop_reason
    size = _OVERHEAD + len(update.sse) + len(update.body) + (text(reason) if isinstance(reason, str) else 0)
    for delta in update.deltas:
        size += _OVERHEAD + text(delta.content) + text(delta.reasoning_content)
        for call in delta.tool_calls or ():
            function = call.function
            size += _OVERHEAD + text(call.id) + (text(function.name) + text(function.arguments) if function else 0)
    return size


def reply_bound(reply, text=_text) -> int:
    """An upper bound of `reply`'s encoded size (0 for the replies whose size is small by construction)."""
    kind = type(reply)
    if kind is DecodeReply:
        return _OVERHEAD + sum(map(text, reply.texts))
    if kind is EncodeReply:
        return _OVERHEAD + sum(map(_ids, reply.ids))
    if kind is RenderReply:
        return _OVERHEAD + _ids(reply.ids) + text(reply.text)
    if kind is StepReply:
        return _OVERHEAD + sum(_update(u, text) for u in reply.updates if u is not None) + \
            sum(text(key) + text(e.message) + _OVERHEAD for key, e in reply.errors.items())
    if kind is GuideReply:
        return _OVERHEAD + sum(len(mask) + 5 for mask in reply.masks) + 4 * _OVERHEAD * len(reply.results)
    return 0


def encode_reply(reply, limit: int, sized: bool = True) -> bytes:
    """The reply's body; raises CodedError(TOO_LARGE) for one over `limit` bytes, before building it, and
    MemoryError if its buffer cannot be had. `sized=False` for replies known to be small (a step of a few
    ids), which skips the count."""
    bound = reply_bound(reply) if sized else 0
    if bound > limit:
        bound = reply_bound(reply, _exact_text)
        if bound > limit:
            raise CodedError(ErrorCode.TOO_LARGE, f"the reply would be up to {bound} bytes, over the message "
                                                  f"limit of {limit}")
    if bound <= PREALLOCATE:
        body = _ENCODER.encode(reply)
        if len(body) > limit:
            raise CodedError(ErrorCode.TOO_LARGE, f"the reply would be {len(body)} bytes, over the message "
                                                  f"limit of {limit}")
        return body
    buffer = bytearray(bound)                          # the encoder never has to grow it
    _ENCODER.encode_into(reply, buffer)
    return buffer
