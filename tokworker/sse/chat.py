"""A stream's updates -> OpenAI ChatCompletionChunks: dicts (`chunks`), or the server-sent events a server
writes to the HTTP response (`sse`, `data: {json}\n\n` per chunk, the same chunks byte for byte as
msgspec.json would encode the dicts).

One chunk per delta, in order; the first chunk of a choice also carries role "assistant"; the update that
ends the stream puts finish_reason (and vLLM's stop_reason, an extra field OpenAI's SDK keeps) on its last
chunk, or on an empty-delta chunk when it has no delta. An update with nothing to say makes no chunk, so
text held back by the stop checker or a parser never turns into an empty chunk.

Logprobs: a chunk whose delta carries tokens has `"logprobs": {"content": [entries]}` (vLLM's shape),
others null. Usage: with include_usage the stream ends with vLLM's `{"choices": [], "usage": {...}}`
chunk (for n > 1 the API process writes one for all choices: `usage_event`); with continuous usage stats
every chunk also carries the usage so far. n > 1: each choice's first step writes its role chunk.
"""

from __future__ import annotations

import time

import msgspec

from tokworker.protocol.deltas import ChunkFormat, StreamParams, StreamUpdate, Usage

from .common import json as _json, openai_usage

_to_builtins = msgspec.to_builtins
_ROLE = b'{"role":"assistant"'
_OPEN = b',"finish_reason":null,"logprobs":null}]}\n\n'      # after the delta of every chunk but the last
_ENTRIES = b',"finish_reason":null,"logprobs":{"content":'


class ChunkWriter:
    """Chunks for one choice of one response: `chunks(update) -> list[dict]`, `sse(update) -> bytes`.
    A writer serves one of the two for its whole response (both track whether the role was sent).
    `for_format` gives a ScoredChunkWriter to a stream with logprobs or continuous usage, so this one's
    short path stays as short as it was. The first chunk carries the role:

    >>> from tokworker.protocol.deltas import Delta, StreamUpdate
    >>> writer = ChunkWriter("chatcmpl-1", "my-model", created=1700000000)
    >>> writer.sse(StreamUpdate(deltas=[Delta(content="Hi")]))
    b'data: {"id":"chatcmpl-1",...,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null,...}]}\\n\\n'
    >>> writer.sse(StreamUpdate(deltas=[Delta(content="!")], finish_reason="stop"))
    b'data: {...,"delta":{"content":"!"},"finish_reason":"stop","logprobs":null,"stop_reason":null}]}\\n\\n'
    """

    __slots__ = ("id", "model", "created", "index", "_role_sent", "_head", "_usage_chunk", "_announce")

    def __init__(self, id: str, model: str, created: int | None = None, index: int = 0, *,
                 include_usage: bool = False, announce: bool = False):
        self.id = id
        self.model = model
        self.created = int(time.time()) if created is None else created
        self.index = index
        self._role_sent = False
        self._usage_chunk = include_usage
        # n > 1: like vLLM, each choice's first step announces its role in a chunk of its own, so a client
        # sees the choices' first chunks in index order (the openai SDK needs choice 0's first)
        self._announce = announce
        # Every event starts with the same bytes up to its delta: encoded once per response.
        self._head = b'data: {"id":%s,"object":"chat.completion.chunk","created":%d,"model":%s,' \
                     b'"choices":[{"index":%d,"delta":' % (_json(id), self.created, _json(model), index)

    @classmethod
    def for_format(cls, chunk_format: ChunkFormat, params: StreamParams | None = None) -> "ChunkWriter":
        params = params or StreamParams()
        include = params.include_usage and chunk_format.n == 1     # n > 1: the API process writes it once
        args = (chunk_format.id, chunk_format.model, chunk_format.created, chunk_format.index)
        continuous = params.include_usage and params.continuous_usage_stats   # vLLM: needs include_usage
        announce = chunk_format.n > 1
        if params.logprobs is not None or continuous:
            return ScoredChunkWriter(*args, include_usage=include, announce=announce, continuous_usage=continuous)
        return cls(*args, include_usage=include, announce=announce)

    def chunks(self, update: StreamUpdate) -> list[dict]:
        lists = update.logprobs
        out = []
        for i, delta in enumerate(update.deltas):
            chunk = self._chunk(_to_builtins(delta))
            if i < len(lists) and lists[i]:
                chunk["choices"][0]["logprobs"] = {"content": _to_builtins(lists[i])}
            out.append(chunk)
        if update.finish_reason is not None:
            if not out:
                out.append(self._chunk({}))
                if lists and lists[0]:
                    out[0]["choices"][0]["logprobs"] = {"content": _to_builtins(lists[0])}
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
                return self._role_chunk() if self._announce and not self._role_sent else b""
            if len(deltas) == 1 and self._role_sent:              # the usual step: one delta mid-stream
                return self._head + _json(deltas[0]) + _OPEN
        announced = self._role_chunk() if self._announce and not self._role_sent else b""
        encoded = self._encoded(deltas)
        head = self._head
        last = b""
        if ending:
            last = b'%s%s,"finish_reason":%s,"logprobs":null,"stop_reason":%s}]}\n\n' % (
                head, encoded.pop(), _json(update.finish_reason), _json(update.stop_reason))
            last += self._usage_end(update)
            if not encoded:
                return announced + last
        return announced + head + (_OPEN + head).join(encoded) + _OPEN + last

    def _encoded(self, deltas) -> list[bytes]:
        """Each delta's JSON (an empty one when there is none), the first of the choice with its role."""
        encoded = [_json(delta) for delta in deltas] if deltas else [b"{}"]
        if not self._role_sent:
            self._role_sent = True
            first = encoded[0]
            encoded[0] = _ROLE + b"}" if first == b"{}" else _ROLE + b"," + first[1:]
        return encoded

    def _role_chunk(self) -> bytes:
        """vLLM's first chunk of a choice of several: the role and empty content."""
        self._role_sent = True
        return self._head + _ROLE + b',"content":""}' + _OPEN

    def _usage_end(self, update: StreamUpdate) -> bytes:
        if not self._usage_chunk:
            return b""
        return usage_event(self.id, self.model, self.created, [update.usage])

    def _chunk(self, delta: dict) -> dict:
        if not self._role_sent:
            self._role_sent = True
            delta = {"role": "assistant", **delta}
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [{"index": self.index, "delta": delta, "finish_reason": None, "logprobs": None}]}



class ScoredChunkWriter(ChunkWriter):
    """Chat chunks that carry logprob entries (`{"content": [...]}`) and, with continuous usage stats,
    the usage so far on every chunk."""

    __slots__ = ("_continuous",)

    def __init__(self, *args, include_usage: bool = False, announce: bool = False, continuous_usage: bool = False):
        super().__init__(*args, include_usage=include_usage, announce=announce)
        self._continuous = continuous_usage

    def sse(self, update: StreamUpdate) -> bytes:
        deltas = update.deltas
        ending = update.finish_reason is not None
        announced = self._role_chunk() if self._announce and not self._role_sent else b""
        if not ending:
            if not deltas:
                return announced
            lists = update.logprobs
            if len(deltas) == 1 and self._role_sent and not self._continuous and lists and lists[0]:
                return announced + b"%s%s%s%s}}]}\n\n" % (self._head, _json(deltas[0]), _ENTRIES, _json(lists[0]))
        encoded = self._encoded(deltas)
        lists, head = update.logprobs, self._head
        usage = b',"usage":' + openai_usage(update.usage) if self._continuous else b""
        out = [announced]
        final = len(encoded) - 1
        for i, body in enumerate(encoded):
            entries = lists[i] if i < len(lists) else None
            logprobs = b'{"content":' + _json(entries) + b"}" if entries else b"null"
            if ending and i == final:
                out.append(b'%s%s,"finish_reason":%s,"logprobs":%s,"stop_reason":%s}]%s}\n\n' % (
                    head, body, _json(update.finish_reason), logprobs, _json(update.stop_reason), usage))
            else:
                out.append(b'%s%s,"finish_reason":null,"logprobs":%s}]%s}\n\n' % (head, body, logprobs, usage))
        if ending:
            out.append(self._usage_end(update))
        return b"".join(out)

def usage_event(id: str, model: str, created: int, usages: list[Usage | None],
                object: str = "chat.completion.chunk") -> bytes:
    """vLLM's final usage chunk for a response whose choices are `usages` (one per choice: n > 1 sums the
    completion and reasoning tokens; the prompt is counted once)."""
    known = [u for u in usages if u is not None]
    reasoning = [u.reasoning_tokens for u in known if u.reasoning_tokens is not None]
    total = Usage(prompt_tokens=known[0].prompt_tokens if known else 0,
                  completion_tokens=sum(u.completion_tokens for u in known),
                  reasoning_tokens=sum(reasoning) if reasoning else None)
    return b'data: {"id":%s,"object":%s,"created":%d,"model":%s,"choices":[],"usage":%s}\n\n' % (
        _json(id), _json(object), created, _json(model), openai_usage(total))
