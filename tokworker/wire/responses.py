"""A stream's updates -> OpenAI Responses API streaming events (/v1/responses), as vLLM writes them.

    response.created, response.in_progress                       with the first output
    per output item, in order of the text:
      reasoning      output_item.added, content_part.added (reasoning_text), reasoning_text.delta...,
                     reasoning_text.done, content_part.done, output_item.done
      message        output_item.added, content_part.added (output_text), output_text.delta... (with
                     logprobs), output_text.done, content_part.done, output_item.done
      function_call  output_item.added (call_id, name), function_call_arguments.delta...,
                     function_call_arguments.done, output_item.done
    response.completed                                           status "incomplete" for a length finish

Every event is `event: <type>\ndata: {json}\n\n` with a sequence_number. An item ends when the next one
begins or the response does; the writer keeps the items' texts for their .done events. Logprobs are
output_text's: entries that ride with reasoning or a tool call are not part of this API's output.
"""

from __future__ import annotations

from tokworker.protocol.deltas import ChunkFormat, StreamParams, StreamUpdate, Usage

from .common import CALL, REASONING, TEXT, OneChoiceHome, event, json, openai_error, pieces

# The delta events are most of a response: each item's delta events share their bytes up to the delta
# (encoded once per item); the sequence number goes last.
_TEXT_HEAD = (b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":%s,'
              b'"output_index":%d,"content_index":0,"delta":')
_REASONING_HEAD = (b'event: response.reasoning_text.delta\ndata: {"type":"response.reasoning_text.delta",'
                   b'"item_id":%s,"output_index":%d,"content_index":0,"delta":')
_ARGUMENTS_HEAD = (b'event: response.function_call_arguments.delta\ndata: {"type":'
                   b'"response.function_call_arguments.delta","item_id":%s,"output_index":%d,"delta":')
_HEADS = {TEXT: _TEXT_HEAD, REASONING: _REASONING_HEAD, CALL: _ARGUMENTS_HEAD}
_TAIL = b',"sequence_number":%d}\n\n'
_TEXT_TAIL = b',"logprobs":%s,"sequence_number":%d}\n\n'
_PLAIN_TEXT_TAIL = b',"logprobs":[],"sequence_number":%d}\n\n'

class ResponsesWriter:
    __slots__ = ("_format", "_sequence", "_started", "_items", "_open", "_carry", "_prefix", "response")

    def __init__(self, chunk_format: ChunkFormat, params: StreamParams, prompt_tokens: int = 0):
        self._format = chunk_format
        self._sequence = 0
        self._started = False
        self._items: list[dict] = []      # finished items, for response.completed
        self._open: dict | None = None    # the item being written: {kind, id, index, text, ...}
        self._carry: list = []            # entries waiting for the next output_text delta
        self._prefix = chunk_format.id.removeprefix("resp_")
        self.response: dict | None = None     # the finished `response` object (what response.completed carries)

    def text_event(self, text: str) -> bytes | None:
        """`sse(StreamUpdate([Delta(content=text)]))` without the update while a message's text is open and
        no entries wait (None otherwise: then sse writes it)."""
        current = self._open
        if current is None or current["kind"] != TEXT or self._carry:
            return None
        current["parts"].append(text)
        number = self._sequence
        self._sequence = number + 1
        return current["head"] + json(text) + _PLAIN_TEXT_TAIL % number

    def sse(self, update: StreamUpdate) -> bytes:
        ending = update.finish_reason is not None
        deltas = update.deltas
        if not ending:
            if not deltas:
                return b""
            current = self._open
            if len(deltas) == 1 and current is not None and deltas[0].tool_calls is None:
                delta = deltas[0]      # the usual step: more of the open message's text or reasoning
                kind = current["kind"]
                if kind == TEXT and delta.content is not None and delta.reasoning_content is None:
                    lists = update.logprobs
                    if not lists and not self._carry:
                        text = delta.content
                        current["parts"].append(text)
                        number = self._sequence
                        self._sequence = number + 1
                        return current["head"] + json(text) + _PLAIN_TEXT_TAIL % number
                    if lists and lists[0]:
                        self._carry = self._carry + lists[0]
                    out: list[bytes] = []
                    self._text_delta(out, delta.content)
                    return out[0]
                if kind == REASONING and delta.reasoning_content is not None and delta.content is None:
                    current["parts"].append(delta.reasoning_content)
                    return current["head"] + json(delta.reasoning_content) + _TAIL % self._next()
        out: list[bytes] = []
        if not self._started:
            self._started = True
            response = self._response("in_progress", [], None)
            self._emit(out, "response.created", {"response": response})
            self._emit(out, "response.in_progress", {"response": response})
        lists = update.logprobs
        for i, delta in enumerate(update.deltas):
            if i < len(lists) and lists[i] and delta.content is not None:   # output_text tokens only
                self._carry = self._carry + lists[i]
            for piece in pieces(delta):
                self._write(out, piece)
        if ending:
            for extra in lists[len(update.deltas):]:
                self._carry = self._carry + extra
            if self._carry and self._open is not None and self._open["kind"] == TEXT:
                self._text_delta(out, "")
            self._close(out)
            status = "incomplete" if update.finish_reason in ("length", "abort") else "completed"
            self.response = self._response(status, self._items, update.usage, update.finish_reason == "length")
            self._emit(out, "response.completed", {"response": self.response})
        return b"".join(out)

    # ------------------------------------------------------------ items
    def _write(self, out: list, piece: tuple) -> None:
        kind = piece[0]
        current = self._open
        if kind == CALL:
            _, index, call_id, name, arguments = piece
            if current is None or current["kind"] != CALL or current["call"] != index:
                self._close(out)
                current = self._begin(out, CALL, {"call": index, "call_id": call_id or f"call_{index}",
                                                  "name": name or ""})
            if arguments:
                current["parts"].append(arguments)
                out.append(current["head"] + json(arguments) + _TAIL % self._next())
            return
        if current is None or current["kind"] != kind:
            self._close(out)
            self._begin(out, kind, {})
        if kind == TEXT:
            self._text_delta(out, piece[1])
        else:
            current = self._open
            current["parts"].append(piece[1])
            out.append(current["head"] + json(piece[1]) + _TAIL % self._next())

    def _text_delta(self, out: list, text: str) -> None:
        current = self._open
        current["parts"].append(text)
        entries = self._carry
        if entries:
            self._carry = []
            current["logprobs"] += entries
        tail = _TEXT_TAIL % (json(entries), self._next()) if entries else _PLAIN_TEXT_TAIL % self._next()
        out.append(current["head"] + json(text) + tail)

    def _begin(self, out: list, kind: int, extra: dict) -> dict:
        index = len(self._items)
        tag = {TEXT: "msg", REASONING: "rs", CALL: "fc"}[kind]
        item_id = f"{tag}_{self._prefix}_{index}"
        current = self._open = {"kind": kind, "id": item_id, "index": index, "parts": [], "logprobs": [],
                                "head": _HEADS[kind] % (json(item_id), index), **extra}
        self._emit(out, "response.output_item.added", {"output_index": index, "item": self._item(current, False)})
        if kind != CALL:
            self._emit(out, "response.content_part.added", {"item_id": current["id"], "output_index": index,
                                                           "content_index": 0, "part": self._part(current, "")})
        return current

    def _close(self, out: list) -> None:
        current = self._open
        if current is None:
            return
        self._open = None
        text = current["text"] = "".join(current["parts"])
        kind, item_id, index = current["kind"], current["id"], current["index"]
        if kind == CALL:
            self._emit(out, "response.function_call_arguments.done", {"item_id": item_id, "output_index": index,
                                                                     "name": current["name"], "arguments": text})
        else:
            done = {"item_id": item_id, "output_index": index, "content_index": 0, "text": text}
            if kind == TEXT:
                done["logprobs"] = current["logprobs"]
            self._emit(out, "response.output_text.done" if kind == TEXT else "response.reasoning_text.done", done)
            self._emit(out, "response.content_part.done", {"item_id": item_id, "output_index": index,
                                                          "content_index": 0, "part": self._part(current, text)})
        item = self._item(current, True)
        self._items.append(item)
        self._emit(out, "response.output_item.done", {"output_index": index, "item": item})

    @staticmethod
    def _part(current: dict, text: str) -> dict:
        if current["kind"] == TEXT:
            return {"type": "output_text", "text": text, "annotations": [],
                    "logprobs": current["logprobs"] if text else []}
        return {"type": "reasoning_text", "text": text}

    def _item(self, current: dict, done: bool) -> dict:
        status = "completed" if done else "in_progress"
        kind, text = current["kind"], current["text"] if done else ""
        if kind == CALL:
            return {"id": current["id"], "type": "function_call", "call_id": current["call_id"],
                    "name": current["name"], "arguments": text, "status": status}
        content = [self._part(current, text)] if done else []
        if kind == TEXT:
            return {"id": current["id"], "type": "message", "role": "assistant", "status": status, "content": content}
        return {"id": current["id"], "type": "reasoning", "summary": [], "content": content, "status": status}

    # ------------------------------------------------------------ the response
    def _response(self, status: str, output: list, usage: Usage | None, cut: bool = False) -> dict:
        """The `response` object; `cut`: incomplete for max_output_tokens (an aborted one says no reason)."""
        f = self._format
        response = {"id": f.id, "object": "response", "created_at": f.created, "model": f.model, "status": status,
                    "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
                    "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
                    "usage": None}
        if usage is not None:
            response["usage"] = {"input_tokens": usage.prompt_tokens,
                                 "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                                 "output_tokens": usage.completion_tokens,
                                 "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens or 0},
                                 "total_tokens": usage.prompt_tokens + usage.completion_tokens}
        return response

    def _emit(self, out: list, name: str, fields: dict) -> None:
        out.append(event(name.encode(), json({"type": name, "sequence_number": self._next(), **fields})))

    @property
    def sequence(self) -> int:
        """The events written so far (the next event's sequence_number)."""
        return self._sequence

    def _next(self) -> int:
        number = self._sequence
        self._sequence = number + 1
        return number


class ResponsesWhole:
    """A whole Responses `response`: the writer runs as for a stream, and the body is what its
    response.completed carries, so the two agree by construction."""

    __slots__ = ("writer",)

    def __init__(self, chunk_format: ChunkFormat, params: StreamParams, prompt_tokens: int = 0):
        self.writer = ResponsesWriter(chunk_format, params, prompt_tokens)

    def add(self, update: StreamUpdate, ids) -> None:
        self.writer.sse(update)

    def fragment(self) -> bytes:
        return json(self.writer.response)


class ResponsesHome(OneChoiceHome):
    """Everything /v1/responses writes. Its errors are OpenAI's body before the headers; mid-stream an
    `error` event, then `response.failed` (the last event, as response.completed would have been)."""

    api = "responses"
    id_prefix = "resp_"
    writer_class = ResponsesWriter
    whole_class = ResponsesWhole

    def error_event(self, chunk_format: ChunkFormat, status: int, code: str, message: str,
                    param: str | None = None, sequence: int = 0) -> bytes:
        """`sequence`: the events the response has had so far.

        >>> f = ChunkFormat(id="resp_1", model="m", created=1, api="responses")
        >>> print(HOME.error_event(f, 503, "worker_lost", "gone", sequence=7).decode())
        event: error
        data: {"type":"error","code":"worker_lost","message":"gone","param":null,"sequence_number":7}
        <BLANKLINE>
        event: response.failed
        data: {"type":"response.failed","sequence_number":8,"response":{"id":"resp_1",...,"status":"failed",...,"error":{"code":"server_error","message":"gone"}}}
        <BLANKLINE>
        <BLANKLINE>
        """
        writer = ResponsesWriter(chunk_format, StreamParams())
        response = writer._response("failed", [], None)
        # the response's error code is one of the API's own few; the error event keeps ours
        kind = "rate_limit_exceeded" if status == 429 else "server_error" if status >= 500 else "invalid_prompt"
        response["error"] = {"code": kind, "message": message}
        return event(b"error", json({"type": "error", "code": code, "message": message, "param": param,
                                     "sequence_number": sequence})) + \
            event(b"response.failed", json({"type": "response.failed", "sequence_number": sequence + 1,
                                            "response": response}))

    def error_body(self, status: int, code: str, message: str, param: str | None = None) -> bytes:
        return openai_error(status, code, message, param)


HOME = ResponsesHome()
