"""A stream's updates -> Anthropic Messages streaming events (/v1/messages).

    message_start                      with the first output (usage.input_tokens = the prompt's tokens)
    per content block, in order of the text:
      content_block_start              {"type": "thinking"}, {"type": "text"} or {"type": "tool_use", id, name}
      content_block_delta...           thinking_delta, text_delta or input_json_delta (partial_json)
      content_block_stop
    message_delta                      stop_reason, stop_sequence, usage.output_tokens
    message_stop

stop_reason: a stop string is "stop_sequence" (the string in stop_sequence), a length finish
"max_tokens", a finish with tool calls "tool_use", any other stop "end_turn". A block ends when the next
begins or the message does. The Messages API has no logprobs. A tool_use id is the call's id with
Anthropic's prefix (`toolu_`), the same streamed and whole. Usage carries Anthropic's cache fields (this
server caches nothing: 0).
"""

from __future__ import annotations

import msgspec

from tokworker.protocol.deltas import ChunkFormat, StreamParams, StreamUpdate, Usage

from .common import CALL, REASONING, TEXT, Collected, OneChoiceHome, event, json, pieces

_DELTA = (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
          b'"delta":{"type":"%s","%s":%s}}\n\n')
_TEXT_DELTA = _DELTA.replace(b"%s", b"text_delta", 1).replace(b"%s", b"text", 1)
_THINKING_DELTA = _DELTA.replace(b"%s", b"thinking_delta", 1).replace(b"%s", b"thinking", 1)
_TEXT_BLOCK, _THINKING_BLOCK = (TEXT, None), (REASONING, None)
_DELTA_KIND = {TEXT: (b"text_delta", b"text"), REASONING: (b"thinking_delta", b"thinking"),
               CALL: (b"input_json_delta", b"partial_json")}


class MessagesWriter:
    __slots__ = ("_format", "_prompt_tokens", "_started", "_blocks", "_open")

    def __init__(self, chunk_format: ChunkFormat, params: StreamParams, prompt_tokens: int = 0):
        self._format = chunk_format
        self._prompt_tokens = prompt_tokens
        self._started = False
        self._blocks = 0                            # blocks begun so far: the next block's index
        self._open: tuple | None = None             # (kind, call index or None) of the block being written

    def text_event(self, text: str) -> bytes | None:
        """`sse(StreamUpdate([Delta(content=text)]))` without the update while a text block is open (None
        otherwise: then sse opens one)."""
        if self._open == _TEXT_BLOCK:
            return _TEXT_DELTA % (self._blocks - 1, json(text))
        return None

    def sse(self, update: StreamUpdate) -> bytes:
        ending = update.finish_reason is not None
        deltas = update.deltas
        if not ending:
            if not deltas:
                return b""
            if len(deltas) == 1:               # the usual step: more text of the open text or thinking block
                delta = deltas[0]
                if delta.tool_calls is None:
                    if delta.content is not None and delta.reasoning_content is None and self._open == _TEXT_BLOCK:
                        return _TEXT_DELTA % (self._blocks - 1, json(delta.content))
                    if delta.reasoning_content is not None and delta.content is None and \
                            self._open == _THINKING_BLOCK:
                        return _THINKING_DELTA % (self._blocks - 1, json(delta.reasoning_content))
        out: list[bytes] = []
        if not self._started:
            self._started = True
            f = self._format
            message = {"id": f.id, "type": "message", "role": "assistant", "model": f.model, "content": [],
                       "stop_reason": None, "stop_sequence": None,
                       "usage": usage(Usage(prompt_tokens=self._prompt_tokens))}
            out.append(event(b"message_start", json({"type": "message_start", "message": message})))
        for delta in update.deltas:
            for piece in pieces(delta):
                self._write(out, piece)
        if ending:
            self._close(out)
            reason, sequence = stop_reason(update.finish_reason, update.stop_reason)
            out.append(event(b"message_delta", json({
                "type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
                "usage": usage(update.usage or Usage(prompt_tokens=self._prompt_tokens))})))
            out.append(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
        return b"".join(out)

    def _write(self, out: list, piece: tuple) -> None:
        kind = piece[0]
        if kind == CALL:
            _, index, call_id, name, text = piece
            if self._open != (CALL, index):
                self._close(out)
                self._begin(out, (CALL, index), {"type": "tool_use", "id": tool_use_id(call_id, index),
                                                 "name": name or "", "input": {}})
        else:
            text = piece[1]
            if self._open != (kind, None):
                self._close(out)
                self._begin(out, (kind, None), {"type": "text", "text": ""} if kind == TEXT else
                            {"type": "thinking", "thinking": "", "signature": ""})
        if text:
            name, field = _DELTA_KIND[kind]
            out.append(_DELTA % (self._blocks - 1, name, field, json(text)))

    def _begin(self, out: list, key: tuple, block: dict) -> None:
        self._open = key
        out.append(event(b"content_block_start", json({"type": "content_block_start", "index": self._blocks,
                                                       "content_block": block})))
        self._blocks += 1

    def _close(self, out: list) -> None:
        if self._open is not None:
            self._open = None
            out.append(b'event: content_block_stop\ndata: {"type":"content_block_stop","index":%d}\n\n'
                       % (self._blocks - 1))


def stop_reason(finish: str | None, stop) -> tuple[str, str | None]:
    """Anthropic's (stop_reason, stop_sequence) for a stream's finish_reason and stop_reason."""
    if finish == "length":
        return "max_tokens", None
    if finish == "tool_calls":
        return "tool_use", None
    if isinstance(stop, str):
        return "stop_sequence", stop
    return "end_turn", None


def tool_use_id(call_id: str | None, index: int) -> str:
    """A call's id as Anthropic writes it.

    >>> tool_use_id("call_3f2a", 0), tool_use_id("functions.get_weather:0", 1), tool_use_id(None, 2)
    ('toolu_3f2a', 'toolu_functions.get_weather:0', 'toolu_2')
    """
    if call_id is None:
        return f"toolu_{index}"
    return call_id if call_id.startswith("toolu_") else "toolu_" + call_id.removeprefix("call_")


def usage(counts: Usage) -> dict:
    """Anthropic's usage object: this server caches nothing, so its cache fields are 0."""
    return {"input_tokens": counts.prompt_tokens, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
            "output_tokens": counts.completion_tokens}


class MessagesWhole:
    """A whole Messages `message`, gathered from the updates its stream would write: blocks in the order
    the stream begins them, the same tool_use ids."""

    __slots__ = ("format", "collected", "prompt_tokens")

    def __init__(self, chunk_format: ChunkFormat, params: StreamParams, prompt_tokens: int = 0):
        self.format = chunk_format
        self.collected = Collected()
        self.prompt_tokens = prompt_tokens

    def add(self, update: StreamUpdate, ids) -> None:
        self.collected.add(update)

    def fragment(self) -> bytes:
        c, f = self.collected, self.format
        content = []
        for item in c.items:
            kind = item[0]
            if kind == CALL:
                try:
                    arguments = msgspec.json.decode(item[4] or "{}")
                except msgspec.DecodeError:     # a call cut short (max_tokens): its text is not JSON yet
                    arguments = {}
                content.append({"type": "tool_use", "id": tool_use_id(item[2], item[1]), "name": item[3],
                                "input": arguments})
            elif kind == TEXT:
                content.append({"type": "text", "text": item[1]})
            else:
                content.append({"type": "thinking", "thinking": item[1], "signature": ""})
        reason, sequence = stop_reason(c.finish_reason, c.stop_reason)
        return json({"id": f.id, "type": "message", "role": "assistant", "model": f.model, "content": content,
                     "stop_reason": reason, "stop_sequence": sequence,
                     "usage": usage(c.usage or Usage(prompt_tokens=self.prompt_tokens))})


# Anthropic's error types by HTTP status (its API's own list)
ERROR_TYPE = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
              404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 501: "invalid_request_error",
              503: "overloaded_error", 504: "timeout_error"}


def error_json(status: int, message: str) -> bytes:
    """Anthropic's error object.

    >>> error_json(400, "max_tokens must be at least 1")
    b'{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens must be at least 1"}}'
    """
    kind = ERROR_TYPE.get(status) or ("invalid_request_error" if status < 500 else "api_error")
    return json({"type": "error", "error": {"type": kind, "message": message}})


class MessagesHome(OneChoiceHome):
    """Everything /v1/messages writes; an error mid-stream is Anthropic's `error` event (its last)."""

    api = "anthropic"
    id_prefix = "msg_"
    writer_class = MessagesWriter
    whole_class = MessagesWhole

    def error_event(self, chunk_format: ChunkFormat, status: int, code: str, message: str,
                    param: str | None = None, sequence: int = 0) -> bytes:
        return event(b"error", error_json(status, message))

    def error_body(self, status: int, code: str, message: str, param: str | None = None) -> bytes:
        return error_json(status, message)


HOME = MessagesHome()
