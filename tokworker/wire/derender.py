"""vLLM's derender (its render tier's /v1/chat/completions/derender and /v1/completions/derender, served by
tokworker.api.derender): an engine's generated ids back into OpenAI's responses, in vLLM 0.33's shapes.

Whole: chat.py's chat.completion and completions.py's text_completion, except that a chat message names its
reasoning `reasoning` (vLLM 0.33's name), as the chunks do.

Streamed: one HTTP call per chunk of the engine's generate stream, each answered with one chunk and the state
the client carries to the next call (`call`):

    {"chunk": {id, object, created, model, choices: [choice], usage}, "stream_state": {...}}

The worker writes each update of the stream as one choice and a comma (`writer(...).sse`), even an update
with nothing to say, so every call has its choice; updates merged after a hung worker are two choices of one
chunk, in order. Chat: one delta per choice holding all the update's pieces, `role` on the stream's first,
then `reasoning`, `content` and `tool_calls` (each call's fragments joined), and `logprobs: {content:
[entries]}` when the request asked for them. Completions: the update's text and that API's logprobs, their
offsets counted across the stream's calls as the whole body counts them. The usage is the generate chunk's
(the engine counted it; the client may name the prompt's count), on a chunk that carried one.

Errors: every call is an HTTP response of its own, so an error is vLLM's error body, before a stream began or
in the middle of one.
"""

from __future__ import annotations

from http import HTTPStatus

from tokworker.protocol.deltas import ChunkFormat, StreamParams, StreamUpdate, Usage

from .chat import ChatHome, ChatWhole
from .common import CALL, REASONING, TEXT, Collected, json, openai_usage
from .completions import CompletionWhole, completion_logprobs

# What vLLM's client carries from call to call (a valid DerenderStreamState). Each streamed sequence lives in a
# worker here, so the state is never read: it is the same every time.
STATE = json({"prev_tokens": [], "prefix_offset": 0, "read_offset": 0, "role_sent": True,
              "logprob_context_token_ids": [], "logprob_text_offset": 0, "output_token_ids": [],
              "output_chunk_lens": [], "tools_streamed": False, "last_tool_call_ids": []})
VLLM_TYPE = {400: "BadRequestError", 401: "Unauthorized", 403: "PermissionDeniedError", 404: "NotFoundError",
             501: "NotImplementedError", 500: "InternalServerError"}


def vllm_error(status: int, message: str, param: str | None) -> bytes:
    """vLLM's own error body (its render tier answers with it): OpenAI's shape, vLLM's type names and the
    HTTP status as `code`.

    >>> vllm_error(404, "the model `x` does not exist", "model")
    b'{"error":{"message":"the model `x` does not exist","type":"NotFoundError","param":"model","code":404}}'
    """
    kind = VLLM_TYPE.get(status) or HTTPStatus(status).phrase
    return json({"error": {"message": message, "type": kind, "param": param, "code": status}})


class DerenderChatWriter:
    """One streamed chat sequence's choices, one per update:

    >>> from tokworker.protocol.deltas import Delta
    >>> writer = DerenderChatWriter(ChunkFormat(id="r", model="m", created=1), StreamParams())
    >>> writer.sse(StreamUpdate(deltas=[Delta(reasoning_content="Hm."), Delta(content="Hi")]))
    b'{"index":0,"delta":{"role":"assistant","reasoning":"Hm.","content":"Hi"},"logprobs":null,"finish_reason":null,"stop_reason":null},'
    >>> writer.sse(StreamUpdate(finish_reason="stop"))
    b'{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop","stop_reason":null},'
    """

    __slots__ = ("index", "logprobs", "first")

    def __init__(self, chunk_format: ChunkFormat, params: StreamParams):
        self.index = chunk_format.index
        self.logprobs = params.logprobs is not None
        self.first = True

    def sse(self, update: StreamUpdate) -> bytes:
        collected = Collected()
        collected.add(update)
        delta = {"role": "assistant"} if self.first else {}
        self.first = False
        reasoning, content = collected.text(REASONING), collected.text(TEXT)
        if reasoning is not None:
            delta["reasoning"] = reasoning
        if content is not None:
            delta["content"] = content
        calls = [_call(item) for item in collected.items if item[0] == CALL]
        if calls:
            delta["tool_calls"] = calls
        return json({"index": self.index, "delta": delta,
                     "logprobs": {"content": collected.entries} if self.logprobs else None,
                     "finish_reason": update.finish_reason, "stop_reason": update.stop_reason}) + b","


def _call(item: list) -> dict:
    """A call's fragments of one update as one tool_calls entry: its id, type and name when they began here."""
    _, index, id, name, arguments = item
    call: dict = {"index": index}
    if id:
        call["id"], call["type"] = id, "function"
    call["function"] = {"name": name, "arguments": arguments} if name else {"arguments": arguments}
    return call


class DerenderCompletionWriter:
    """One streamed completions sequence's choices, one per update (the completions API has text only).

    >>> from tokworker.protocol.deltas import Delta
    >>> writer = DerenderCompletionWriter(ChunkFormat(id="r", model="m", created=1, index=2), StreamParams())
    >>> writer.sse(StreamUpdate(deltas=[Delta(content="Hi")], finish_reason="length"))
    b'{"index":2,"text":"Hi","logprobs":null,"finish_reason":"length","stop_reason":null},'
    """

    __slots__ = ("index", "logprobs", "offset")

    def __init__(self, chunk_format: ChunkFormat, params: StreamParams):
        self.index = chunk_format.index
        self.logprobs = params.logprobs is not None
        self.offset = 0                     # the next token's text_offset

    def sse(self, update: StreamUpdate) -> bytes:
        text = "".join(delta.content for delta in update.deltas if delta.content is not None)
        logprobs = None
        if self.logprobs:
            entries = [e for listed in update.logprobs for e in listed]
            if entries or not text:
                logprobs, self.offset = completion_logprobs(entries, self.offset)
            else:       # a replay after a worker's death carries no entries: its text moves the offset on
                self.offset += len(text)
        return json({"index": self.index, "text": text, "logprobs": logprobs,
                     "finish_reason": update.finish_reason, "stop_reason": update.stop_reason}) + b","


class DerenderChatWhole(ChatWhole):
    __slots__ = ()
    reasoning_key = "reasoning"


class DerenderChatHome(ChatHome):
    """Everything /v1/chat/completions/derender writes: chat's whole body (reasoning named as vLLM 0.33 names
    it), one chunk per call, vLLM's error body. The id is the generate response's (the render route gave it
    chat's prefix)."""

    api = "derender_chat"
    writer_class: type = DerenderChatWriter
    quiet = b'{"index":%d,"delta":{},"logprobs":null,"finish_reason":null,"stop_reason":null}'

    def writer(self, chunk_format: ChunkFormat, params: StreamParams, prompt_ids=None, tokenizer=None):
        return self.writer_class(chunk_format, params)

    def whole(self, chunk_format: ChunkFormat, params: StreamParams, prompt_ids=None, tokenizer=None):
        return DerenderChatWhole(chunk_format, params)

    def call(self, chunk_format: ChunkFormat, choices: bytes | None, usage: Usage | None) -> bytes:
        """One streamed call's answer: its chunk and the stream_state for the next call. `choices`: what the
        worker wrote for the call's choice (b"": its step said nothing, an empty choice); None: a chunk
        without choices (the usage that ends a stream).

        >>> f = ChunkFormat(id="r", model="m", created=1)
        >>> HOME_CHAT.call(f, None, Usage(3, 2))
        b'{"chunk":{"id":"r",...,"choices":[],"usage":{"prompt_tokens":3,"total_tokens":5,...}},"stream_state":{...}}'
        >>> HOME_CHAT.call(f, b'{"index":0,"delta":{"content":"Hi"}},', None)
        b'{"chunk":{...,"choices":[{"index":0,"delta":{"content":"Hi"}}],"usage":null},"stream_state":{...}}'
        """
        f = chunk_format
        listed = b"" if choices is None else choices[:-1] if choices else self.quiet % f.index
        return b'{"chunk":{"id":%s,"object":"%s","created":%d,"model":%s,"choices":[%s],"usage":%s},' \
               b'"stream_state":%s}' % (json(f.id), self.chunk_object.encode(), f.created, json(f.model), listed,
                                        openai_usage(usage) if usage is not None else b"null", STATE)

    def tail(self, chunk_format: ChunkFormat, usages, include_usage: bool, prompt_tokens=None) -> bytes:
        return b""

    def error_event(self, chunk_format: ChunkFormat, status: int, code: str, message: str,
                    param: str | None = None, sequence: int = 0) -> bytes:
        return vllm_error(status, message, param)

    def error_body(self, status: int, code: str, message: str, param: str | None = None) -> bytes:
        return vllm_error(status, message, param)


class DerenderCompletionsHome(DerenderChatHome):
    """Everything /v1/completions/derender writes: completions' whole body, one chunk per call."""

    api = "derender_completions"
    id_prefix = "cmpl-"
    object = "text_completion"
    chunk_object = "text_completion"
    writer_class = DerenderCompletionWriter
    quiet = b'{"index":%d,"text":"","logprobs":null,"finish_reason":null,"stop_reason":null}'

    def whole(self, chunk_format: ChunkFormat, params: StreamParams, prompt_ids=None, tokenizer=None):
        return CompletionWhole(chunk_format, params)


HOME_CHAT = DerenderChatHome()
HOME_COMPLETIONS = DerenderCompletionsHome()
