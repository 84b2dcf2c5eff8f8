"""A stream's updates -> OpenAI ChatCompletionChunk dicts (what a server sends as `data: {...}` lines).

One chunk per delta, in order; the first chunk of a choice also carries role "assistant"; the update that
ends the stream puts finish_reason (and vLLM's stop_reason, an extra field OpenAI's SDK keeps) on its last
chunk, or on an empty-delta chunk when it has no delta. An update with nothing to say makes no chunk, so
text held back by the stop checker or a parser never turns into an empty chunk.
"""

from __future__ import annotations

import time

import msgspec

from protocol.deltas import StreamUpdate

_to_builtins = msgspec.to_builtins


class ChunkWriter:
    """Chunks for one choice of one response: `chunks(update) -> list[dict]`."""

    __slots__ = ("id", "model", "created", "index", "_role_sent")

    def __init__(self, id: str, model: str, created: int | None = None, index: int = 0):
        self.id = id
        self.model = model
        self.created = int(time.time()) if created is None else created
        self.index = index
        self._role_sent = False

    def chunks(self, update: StreamUpdate) -> list[dict]:
        out = [self._chunk(_to_builtins(delta)) for delta in update.deltas]
        if update.finish_reason is not None:
            if not out:
                out.append(self._chunk({}))
            choice = out[-1]["choices"][0]
            choice["finish_reason"] = update.finish_reason
            choice["stop_reason"] = update.stop_reason
        return out

    def _chunk(self, delta: dict) -> dict:
        if not self._role_sent:
            self._role_sent = True
            delta = {"role": "assistant", **delta}
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [{"index": self.index, "delta": delta, "finish_reason": None, "logprobs": None}]}
