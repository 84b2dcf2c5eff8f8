"""A stream's updates -> OpenAI ChatCompletionChunks: dicts (`chunks`), or the server-sent events a server
writes to the HTTP response (`sse`, `data: {json}\n\n` per chunk, the same chunks byte for byte as
msgspec.json would encode the dicts).

One chunk per delta, in order; the first chunk of a choice also carries role "assistant"; the update that
ends the stream puts finish_reason (and vLLM's stop_reason, an extra field OpenAI's SDK keeps) on its last
chunk, or on an empty-delta chunk when it has no delta. An update with nothing to say makes no chunk, so
text held back by the stop checker or a parser never turns into an empty chunk.
"""

from __future__ import annotations

import time

import msgspec

from tokworker.protocol.deltas import ChunkFormat, StreamUpdate

_to_builtins = msgspec.to_builtins
_json = msgspec.json.encode
_ROLE = b'{"role":"assistant"'
_OPEN = b',"finish_reason":null,"logprobs":null}]}\n\n'      # after the delta of every chunk but the last


class ChunkWriter:
    """Chunks for one choice of one response: `chunks(update) -> list[dict]`, `sse(update) -> bytes`.
    A writer serves one of the two for its whole response (both track whether the role was sent)."""

    __slots__ = ("id", "model", "created", "index", "_role_sent", "_head")

    def __init__(self, id: str, model: str, created: int | None = None, index: int = 0):
        self.id = id
        self.model = model
        self.created = int(time.time()) if created is None else created
        self.index = index
        self._role_sent = False
        # Every event starts with the same bytes up to its delta: encoded once per response.
        self._head = b'data: {"id":%s,"object":"chat.completion.chunk","created":%d,"model":%s,' \
                     b'"choices":[{"index":%d,"delta":' % (_json(id), self.created, _json(model), index)

    @classmethod
    def for_format(cls, chunk_format: ChunkFormat) -> "ChunkWriter":
        return cls(chunk_format.id, chunk_format.model, chunk_format.created, chunk_format.index)

    def chunks(self, update: StreamUpdate) -> list[dict]:
        out = [self._chunk(_to_builtins(delta)) for delta in update.deltas]
        if update.finish_reason is not None:
            if not out:
                out.append(self._chunk({}))
            choice = out[-1]["choices"][0]
            choice["finish_reason"] = update.finish_reason
            choice["stop_reason"] = update.stop_reason
        return out

    def sse(self, update: StreamUpdate) -> bytes:
        """The chunks of `update` as server-sent events; only each delta is encoded per call."""
        deltas = update.deltas
        ending = update.finish_reason is not None
        if not ending:
            if not deltas:
                return b""
            if len(deltas) == 1 and self._role_sent:              # the usual step: one delta mid-stream
                return self._head + _json(deltas[0]) + _OPEN
        encoded = [_json(delta) for delta in deltas] if deltas else [b"{}"]
        if not self._role_sent:
            self._role_sent = True
            first = encoded[0]
            encoded[0] = _ROLE + b"}" if first == b"{}" else _ROLE + b"," + first[1:]
        head = self._head
        last = b""
        if ending:
            last = b'%s%s,"finish_reason":%s,"logprobs":null,"stop_reason":%s}]}\n\n' % (
                head, encoded.pop(), _json(update.finish_reason), _json(update.stop_reason))
            if not encoded:
                return last
        return head + (_OPEN + head).join(encoded) + _OPEN + last

    def _chunk(self, delta: dict) -> dict:
        if not self._role_sent:
            self._role_sent = True
            delta = {"role": "assistant", **delta}
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [{"index": self.index, "delta": delta, "finish_reason": None, "logprobs": None}]}
