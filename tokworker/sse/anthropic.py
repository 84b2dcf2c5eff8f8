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
begins or the message does. The Messages API has no logprobs.
"""

from __future__ import annotations

from tokworker.protocol.deltas import ChunkFormat, StreamParams, StreamUpdate

from .common import CALL, REASONING, TEXT, event, json, pieces

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
                       "usage": {"input_tokens": self._prompt_tokens, "output_tokens": 0}}
            out.append(event(b"message_start", json({"type": "message_start", "message": message})))
        for delta in update.deltas:
            for piece in pieces(delta):
                self._write(out, piece)
        if ending:
            self._close(out)
            reason, sequence = stop_reason(update.finish_reason, update.stop_reason)
            usage = update.usage
            out.append(event(b"message_delta", json({
                "type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
                "usage": {"output_tokens": usage.completion_tokens if usage is not None else 0}})))
            out.append(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
        return b"".join(out)

    def _write(self, out: list, piece: tuple) -> None:
        kind = piece[0]
        if kind == CALL:
            _, index, call_id, name, text = piece
            if self._open != (CALL, index):
                self._close(out)
                self._begin(out, (CALL, index), {"type": "tool_use", "id": call_id or f"toolu_{index}",
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
