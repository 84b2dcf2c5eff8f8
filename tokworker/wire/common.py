"""What the formats share: JSON encoding, event framing, usage objects, a delta's pieces in order, one
choice's output gathered for a whole body, and OpenAI's error body (three of the five formats answer with it)."""

from __future__ import annotations

import msgspec

from tokworker.protocol.deltas import Delta, StreamUpdate, Usage

json = msgspec.json.encode
LAST_CHUNK = b"0\r\n\r\n"              # the zero-length chunk that ends a chunked body (after http_chunk's)


def http_chunk(data: bytes) -> bytes:
    """`data` framed as one HTTP/1.1 chunk (a streamed body is written in chunks, by the API process or by
    a worker that holds the client's socket).

    >>> http_chunk(b"data: [DONE]\\n\\n")
    b'e\\r\\ndata: [DONE]\\n\\n\\r\\n'
    """
    return b"%x\r\n%b\r\n" % (len(data), data)


def event(name: bytes, payload: bytes) -> bytes:
    """A named server-sent event (the Responses and Anthropic APIs name every event)."""
    return b"event: " + name + b"\ndata: " + payload + b"\n\n"


def openai_usage(usage: Usage | None) -> bytes:
    """OpenAI's CompletionUsage object (vLLM's field order), reasoning tokens in completion_tokens_details."""
    if usage is None:
        usage = Usage()
    prompt, completion = usage.prompt_tokens, usage.completion_tokens
    details = b"" if usage.reasoning_tokens is None else \
        b',"completion_tokens_details":{"reasoning_tokens":%d}' % usage.reasoning_tokens
    return b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d%s}' % (
        prompt, prompt + completion, completion, details)


def summed(usages: list[Usage | None], prompt_tokens: int | None = None) -> Usage:
    """The usage of a response whose choices used `usages`: completion and reasoning tokens summed, the
    prompt counted once (or `prompt_tokens`: a completions request's prompts, each counted once).

    >>> summed([Usage(5, 2), Usage(5, 3, 1), None])
    Usage(prompt_tokens=5, completion_tokens=5, reasoning_tokens=1)
    """
    known = [u for u in usages if u is not None]
    reasoning = [u.reasoning_tokens for u in known if u.reasoning_tokens is not None]
    if prompt_tokens is None:
        prompt_tokens = known[0].prompt_tokens if known else 0
    return Usage(prompt_tokens=prompt_tokens,
                 completion_tokens=sum(u.completion_tokens for u in known),
                 reasoning_tokens=sum(reasoning) if reasoning else None)


TEXT, REASONING, CALL = 0, 1, 2


def pieces(delta: Delta):
    """(kind, ...) for each piece of one delta: (TEXT, text), (REASONING, text), (CALL, index, id, name,
    arguments). A parser emits one kind per delta, so this is usually one piece."""
    if delta.reasoning_content is not None:
        yield REASONING, delta.reasoning_content
    if delta.content is not None:
        yield TEXT, delta.content
    for call in delta.tool_calls or ():
        function = call.function
        yield (CALL, call.index, call.id, function.name if function is not None else None,
               function.arguments if function is not None else None)


class Collected:
    """One choice's output gathered from its updates, for a whole body: output items in the order the
    model wrote them ([TEXT | REASONING, text] or [CALL, index, id, name, arguments]), every generated
    token's logprob entry, the finish, the usage and (when asked) the generated ids.

    >>> from tokworker.protocol.deltas import FunctionDelta, ToolCallDelta
    >>> c = Collected()
    >>> c.add(StreamUpdate(deltas=[Delta(content="Hi"), Delta(content="!")]))
    >>> c.add(StreamUpdate(deltas=[Delta(tool_calls=[ToolCallDelta(0, "call_1", "function",
    ...                                                            FunctionDelta("f", '{"a"'))])]))
    >>> c.add(StreamUpdate(deltas=[Delta(tool_calls=[ToolCallDelta(0, function=FunctionDelta(arguments=': 1}'))])],
    ...                    finish_reason="tool_calls"))
    >>> c.items, c.text(TEXT), c.finish_reason
    ([[0, 'Hi!'], [2, 0, 'call_1', 'f', '{"a": 1}']], 'Hi!', 'tool_calls')
    """

    __slots__ = ("items", "entries", "finish_reason", "stop_reason", "usage", "ids")

    def __init__(self):
        self.items: list[list] = []
        self.entries: list = []
        self.finish_reason: str | None = None
        self.stop_reason = None
        self.usage: Usage | None = None
        self.ids: list[int] = []

    def add(self, update: StreamUpdate) -> None:
        items = self.items
        for delta in update.deltas:
            for piece in pieces(delta):
                kind = piece[0]
                last = items[-1] if items else None
                if kind != CALL:
                    if last is not None and last[0] == kind:
                        last[1] += piece[1]
                    else:
                        items.append([kind, piece[1]])
                elif last is not None and last[0] == CALL and last[1] == piece[1]:
                    last[4] += piece[4] or ""
                else:
                    items.append([CALL, piece[1], piece[2], piece[3] or "", piece[4] or ""])
        for entries in update.logprobs:
            self.entries += entries
        if update.finish_reason is not None:
            self.finish_reason, self.stop_reason = update.finish_reason, update.stop_reason
        if update.usage is not None:
            self.usage = update.usage

    def text(self, kind: int) -> str | None:
        parts = [item[1] for item in self.items if item[0] == kind]
        return "".join(parts) if parts else None

    def calls(self) -> list[dict]:
        return [{"id": item[2], "type": "function", "function": {"name": item[3], "arguments": item[4]}}
                for item in self.items if item[0] == CALL]


class OneChoiceHome:
    """What a format whose response is one choice shares (Responses, Messages): its writer and gatherer
    take the prompt's token count, the body is the choice's own JSON, and nothing follows its last event."""

    writer_class: type
    whole_class: type

    def writer(self, chunk_format, params, prompt_ids=None, tokenizer=None):
        return self.writer_class(chunk_format, params, len(prompt_ids) if prompt_ids is not None else 0)

    def whole(self, chunk_format, params, prompt_ids=None, tokenizer=None):
        return self.whole_class(chunk_format, params, len(prompt_ids) if prompt_ids is not None else 0)

    def body(self, chunk_format, fragments: list[bytes], usages, prompt_tokens=None, prompt_ids=None) -> bytes:
        return fragments[0]

    def tail(self, chunk_format, usages, include_usage: bool, prompt_tokens=None) -> bytes:
        return b""


# OpenAI's error body: `type` follows the HTTP status (another 4xx: invalid_request_error, a 5xx: server_error).
OPENAI_TYPE = {403: "permission_error", 429: "rate_limit_error"}     # as OpenAI's own (its 401 too)


RETRY_AFTER_S = "1"                      # a 503's Retry-After: the engine's health is polled about this often


def error_headers(status: int) -> dict[str, str]:
    """The headers of an error response (every format's error body is JSON), whoever writes it: the API
    process, or the worker that holds a whole response's socket.

    >>> error_headers(503)
    {'Content-Type': 'application/json', 'Retry-After': '1'}
    """
    headers = {"Content-Type": "application/json"}
    if status == 503:
        headers["Retry-After"] = RETRY_AFTER_S
    return headers


def header_lines(headers: dict[str, str]) -> bytes:
    """Headers as HTTP/1.1 writes them (what a worker writes of a whole response after its status line).

    >>> header_lines({"Content-Type": "application/json"})
    b'Content-Type: application/json\\r\\n'
    """
    return b"".join(b"%s: %s\r\n" % (name.encode("latin-1"), value.encode("latin-1"))
                    for name, value in headers.items())


def openai_error(status: int, code: str, message: str, param: str | None) -> bytes:
    """OpenAI's error object, `{"error": {message, type, param, code}}`.

    >>> openai_error(400, "invalid", "max_tokens must be at least 1", "max_tokens")
    b'{"error":{"message":"max_tokens must be at least 1","type":"invalid_request_error","param":"max_tokens","code":"invalid"}}'
    """
    kind = OPENAI_TYPE.get(status) or ("invalid_request_error" if status < 500 else "server_error")
    return json({"error": {"message": message, "type": kind, "param": param, "code": code}})
