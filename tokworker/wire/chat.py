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

from .common import REASONING, TEXT, Collected, json as _json, openai_error, openai_usage, summed

_to_builtins = msgspec.to_builtins
_ROLE = b'{"role":"assistant"'
_OPEN = b',"finish_reason":null,"logprobs":null}]}\n\n'      # after the delta of every chunk but the last
_ENTRIES = b',"finish_reason":null,"logprobs":{"content":'
_TEXT_TAIL = b"}" + _OPEN                                     # after a plain content delta's text


class ChunkWriter:
    """Chunks for one choice of one response: `chunks(update) -> list[dict]`, `sse(update) -> bytes`.
    A writer serves one of the two for its whole response (both track whether the role was sent).
    `for_format` gives a ScoredChunkWriter to a stream with logprobs or continuous usage, so this one's
    short path stays as short as it was. As vLLM's, a choice opens with a chunk of its own that carries
    the role and empty content, at its first step (so a client sees the choices' first chunks in index
    order: the openai SDK needs choice 0's first):

    >>> from tokworker.protocol.deltas import Delta, StreamUpdate
    >>> writer = ChunkWriter("chatcmpl-1", "my-model", created=1700000000)
    >>> writer.sse(StreamUpdate(deltas=[Delta(content="Hi")]))
    b'data: {...,"delta":{"role":"assistant","content":""},...}]}\\n\\ndata: {...,"delta":{"content":"Hi"},"finish_reason":null,...}]}\\n\\n'
    >>> writer.sse(StreamUpdate(deltas=[Delta(content="!")], finish_reason="stop"))
    b'data: {...,"delta":{"content":"!"},"finish_reason":"stop","logprobs":null,"stop_reason":null}]}\\n\\n'
    """

    __slots__ = ("id", "model", "created", "index", "_role_sent", "_head", "_text_head", "_usage_chunk")

    def __init__(self, id: str, model: str, created: int | None = None, index: int = 0, *,
                 include_usage: bool = False):
        self.id = id
        self.model = model
        self.created = int(time.time()) if created is None else created
        self.index = index
        self._role_sent = False
        self._usage_chunk = include_usage
        # Every event starts with the same bytes up to its delta: encoded once per response.
        self._head = b'data: {"id":%s,"object":"chat.completion.chunk","created":%d,"model":%s,' \
                     b'"choices":[{"index":%d,"delta":' % (_json(id), self.created, _json(model), index)
        self._text_head = self._head + b'{"content":'

    @classmethod
    def for_format(cls, chunk_format: ChunkFormat, params: StreamParams | None = None) -> "ChunkWriter":
        params = params or StreamParams()
        include = params.include_usage and chunk_format.n == 1     # n > 1: the API process writes it once
        args = (chunk_format.id, chunk_format.model, chunk_format.created, chunk_format.index)
        continuous = params.include_usage and params.continuous_usage_stats   # vLLM: needs include_usage
        if params.logprobs is not None or continuous:
            return ScoredChunkWriter(*args, include_usage=include, continuous_usage=continuous)
        return cls(*args, include_usage=include)

    def chunks(self, update: StreamUpdate) -> list[dict]:
        lists = update.logprobs
        out = []
        if not self._role_sent:
            self._role_sent = True
            out.append(self._chunk({"role": "assistant", "content": ""}))
        for i, delta in enumerate(update.deltas):
            chunk = self._chunk(_to_builtins(delta))
            if i < len(lists) and lists[i]:
                chunk["choices"][0]["logprobs"] = {"content": _to_builtins(lists[i])}
            out.append(chunk)
        if update.finish_reason is not None:
            if not update.deltas:
                out.append(self._chunk({}))
                if lists and lists[0]:
                    out[-1]["choices"][0]["logprobs"] = {"content": _to_builtins(lists[0])}
            choice = out[-1]["choices"][0]
            choice["finish_reason"] = update.finish_reason
            choice["stop_reason"] = update.stop_reason
        return out

    def sse(self, update: StreamUpdate) -> bytes:
        """The chunks of `update` as server-sent events; only each delta is encoded per call."""
        deltas = update.deltas
        ending = update.finish_reason is not None
        if self._role_sent:
            if not ending:
                if not deltas:
                    return b""
                if len(deltas) == 1:                               # the usual step: one delta mid-stream
                    return self._head + _json(deltas[0]) + _OPEN
            announced = b""
        else:
            announced = self._role_chunk()
            if not deltas and not ending:
                return announced
        encoded = [_json(delta) for delta in deltas] if deltas else [b"{}"]
        head = self._head
        last = b""
        if ending:
            last = b'%s%s,"finish_reason":%s,"logprobs":null,"stop_reason":%s}]}\n\n' % (
                head, encoded.pop(), _json(update.finish_reason), _json(update.stop_reason))
            last += self._usage_end(update)
            if not encoded:
                return announced + last
        return announced + head + (_OPEN + head).join(encoded) + _OPEN + last

    def text_event(self, text: str) -> bytes | None:
        """`sse(StreamUpdate([Delta(content=text)]))` without the update, once the role chunk is out (None
        before: then sse writes it). The usual step of a stream with no logprobs and no continuous usage.

        >>> from tokworker.protocol.deltas import Delta, StreamUpdate
        >>> writer = ChunkWriter("chatcmpl-1", "my-model", created=1700000000)
        >>> writer.text_event("Hi") is None, b'"delta":{"content":"Hi"}' in writer.sse(StreamUpdate([Delta("Hi")]))
        (True, True)
        >>> writer.text_event("!") == writer.sse(StreamUpdate([Delta(content="!")]))
        True
        """
        if self._role_sent:
            return self._text_head + _json(text) + _TEXT_TAIL
        return None

    def _role_chunk(self, usage: bytes = b"") -> bytes:
        """vLLM's first chunk of a choice: the role and empty content (and `usage`, the usage field with its
        comma, for continuous usage stats)."""
        self._role_sent = True
        if usage:
            return self._head + _ROLE + b',"content":""},"finish_reason":null,"logprobs":null}]' + usage + b"}\n\n"
        return self._head + _ROLE + b',"content":""}' + _OPEN

    def _usage_end(self, update: StreamUpdate) -> bytes:
        if not self._usage_chunk:
            return b""
        return usage_event(self.id, self.model, self.created, [update.usage])

    def _chunk(self, delta: dict) -> dict:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [{"index": self.index, "delta": delta, "finish_reason": None, "logprobs": None}]}


class ScoredChunkWriter(ChunkWriter):
    """Chat chunks that carry logprob entries (`{"content": [...]}`) and, with continuous usage stats,
    the usage so far on every chunk."""

    __slots__ = ("_continuous",)

    text_event = None            # every event may carry entries or usage: no short path

    def __init__(self, *args, include_usage: bool = False, continuous_usage: bool = False):
        super().__init__(*args, include_usage=include_usage)
        self._continuous = continuous_usage

    def sse(self, update: StreamUpdate) -> bytes:
        deltas = update.deltas
        ending = update.finish_reason is not None
        usage = b',"usage":' + openai_usage(update.usage) if self._continuous else b""
        announced = self._role_chunk(usage) if not self._role_sent else b""
        if not ending:
            if not deltas:
                return announced
            lists = update.logprobs
            if len(deltas) == 1 and not self._continuous and lists and lists[0]:
                return announced + b"%s%s%s%s}}]}\n\n" % (self._head, _json(deltas[0]), _ENTRIES, _json(lists[0]))
        encoded = [_json(delta) for delta in deltas] if deltas else [b"{}"]
        lists, head = update.logprobs, self._head
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
                object: str = "chat.completion.chunk", prompt_tokens: int | None = None) -> bytes:
    """vLLM's final usage chunk for a response whose choices are `usages` (one per choice: n > 1 sums the
    completion and reasoning tokens; the prompt is counted once, or as `prompt_tokens`)."""
    return b'data: {"id":%s,"object":%s,"created":%d,"model":%s,"choices":[],"usage":%s}\n\n' % (
        _json(id), _json(object), created, _json(model), openai_usage(summed(usages, prompt_tokens)))


DONE = b"data: [DONE]\n\n"


class ChatWhole:
    """One choice of a whole chat.completion, gathered from the same updates its stream would write; its
    `fragment()` is the choice's JSON object (`choices[i]`). No `tool_calls` key without a call: OpenAI
    refuses an empty list when a client sends the message back."""

    __slots__ = ("index", "collected", "logprobs", "token_ids")
    reasoning_key = "reasoning_content"             # vLLM 0.33's derender names it "reasoning"

    def __init__(self, chunk_format: ChunkFormat, params: StreamParams):
        self.index = chunk_format.index
        self.collected = Collected()
        self.logprobs = params.logprobs is not None
        self.token_ids = chunk_format.token_ids

    def add(self, update: StreamUpdate, ids) -> None:
        self.collected.add(update)
        if self.token_ids:
            self.collected.ids += ids

    def fragment(self) -> bytes:
        c = self.collected
        message = {"role": "assistant", "content": c.text(TEXT)}
        reasoning = c.text(REASONING)
        if reasoning is not None:
            message[self.reasoning_key] = reasoning
        calls = c.calls()
        if calls:
            message["tool_calls"] = calls
        choice = {"index": self.index, "message": message,
                  "logprobs": {"content": c.entries} if self.logprobs else None,
                  "finish_reason": c.finish_reason, "stop_reason": c.stop_reason}
        if self.token_ids:
            choice["token_ids"] = c.ids
        return _json(choice)


def whole_body(object: str, chunk_format: ChunkFormat, fragments: list[bytes], usages: list[Usage | None],
               prompt_tokens: int | None = None, prompt_ids: list[int] | None = None) -> bytes:
    """A whole OpenAI response (chat.completion or text_completion) from its choices' fragments."""
    f = chunk_format
    extra = b',"prompt_token_ids":' + _json(prompt_ids) if prompt_ids is not None else b""
    return b'{"id":%s,"object":"%s","created":%d,"model":%s,"choices":[%s],"usage":%s%s}' % (
        _json(f.id), object.encode(), f.created, _json(f.model), b",".join(fragments),
        openai_usage(summed(usages, prompt_tokens)), extra)


class ChatHome:
    """Everything /v1/chat/completions writes: the id, streamed chunks, the whole body, what ends a stream,
    usage and errors (before the headers and mid-stream, as vLLM writes them: an error chunk, then [DONE])."""

    api = "chat"
    id_prefix = "chatcmpl-"
    object = "chat.completion"
    chunk_object = "chat.completion.chunk"

    def writer(self, chunk_format: ChunkFormat, params: StreamParams, prompt_ids=None, tokenizer=None):
        return ChunkWriter.for_format(chunk_format, params)

    def whole(self, chunk_format: ChunkFormat, params: StreamParams, prompt_ids=None, tokenizer=None):
        return ChatWhole(chunk_format, params)

    def body(self, chunk_format: ChunkFormat, fragments: list[bytes], usages: list[Usage | None],
             prompt_tokens: int | None = None, prompt_ids: list[int] | None = None) -> bytes:
        return whole_body(self.object, chunk_format, fragments, usages, prompt_tokens, prompt_ids)

    def tail(self, chunk_format: ChunkFormat, usages: list[Usage | None], include_usage: bool,
             prompt_tokens: int | None = None) -> bytes:
        """After a stream's last event: the one usage chunk of several choices (one choice writes its own),
        then [DONE]."""
        if include_usage and chunk_format.n > 1:
            f = chunk_format
            return usage_event(f.id, f.model, f.created, usages, self.chunk_object, prompt_tokens) + DONE
        return DONE

    def error_event(self, chunk_format: ChunkFormat, status: int, code: str, message: str,
                    param: str | None = None, sequence: int = 0) -> bytes:
        return b"data: " + openai_error(status, code, message, param) + b"\n\n" + DONE

    def error_body(self, status: int, code: str, message: str, param: str | None = None) -> bytes:
        return openai_error(status, code, message, param)


HOME = ChatHome()
