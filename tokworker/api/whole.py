"""Whole (not streamed) responses: each choice's updates gathered, then written as OpenAI's chat.completion,
text_completion or Responses `response` object, or Anthropic's `message`.

Text, reasoning and tool calls are kept as output items in the order the model wrote them (the Responses
and Messages APIs show that order); chat and completions join them per kind. Logprob entries are every
generated token's, in order.
"""

from __future__ import annotations

import msgspec

from tokworker.protocol.deltas import StreamUpdate, Usage
from tokworker.sse.anthropic import stop_reason
from tokworker.sse.common import CALL, REASONING, TEXT, pieces


class Collected:
    """One choice's output so far."""

    __slots__ = ("items", "entries", "finish_reason", "stop_reason", "usage", "ids")

    def __init__(self):
        self.items: list[list] = []        # [TEXT | REASONING, text] or [CALL, index, id, name, arguments]
        self.entries: list = []            # TokenLogprob per generated token
        self.finish_reason: str | None = None
        self.stop_reason = None
        self.usage: Usage | None = None
        self.ids: list[int] = []           # generated ids (return_token_ids)

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


def chat_completion(id: str, model: str, created: int, choices: list[Collected], prompt_tokens: int,
                    prompt_ids: list[int] | None = None, logprobs: bool = False) -> dict:
    out = []
    for index, choice in enumerate(choices):
        message = {"role": "assistant", "content": choice.text(TEXT)}
        reasoning = choice.text(REASONING)
        if reasoning is not None:
            message["reasoning_content"] = reasoning
        calls = choice.calls()
        message["tool_calls"] = calls
        entry = {"index": index, "message": message,
                 "logprobs": {"content": msgspec.to_builtins(choice.entries)} if logprobs else None,
                 "finish_reason": choice.finish_reason, "stop_reason": choice.stop_reason}
        if prompt_ids is not None:
            entry["token_ids"] = choice.ids
        out.append(entry)
    body = {"id": id, "object": "chat.completion", "created": created, "model": model, "choices": out,
            "usage": _totals(choices, prompt_tokens)}
    if prompt_ids is not None:
        body["prompt_token_ids"] = prompt_ids
    return body


def text_completion(id: str, model: str, created: int, choices: list[Collected], prompt_tokens: int,
                    prefixes: list[str], logprobs: bool = False, token_ids: bool = False) -> dict:
    """`prefixes[i]`: choice i's echoed prompt text ("" without echo)."""
    out = []
    for index, (choice, prefix) in enumerate(zip(choices, prefixes)):
        entry = {"index": index, "text": prefix + (choice.text(TEXT) or ""),
                 "logprobs": completion_logprobs(choice.entries, len(prefix)) if logprobs else None,
                 "finish_reason": choice.finish_reason, "stop_reason": choice.stop_reason}
        if token_ids:
            entry["token_ids"] = choice.ids
        out.append(entry)
    return {"id": id, "object": "text_completion", "created": created, "model": model, "choices": out,
            "usage": _totals(choices, prompt_tokens)}


def completion_logprobs(entries, offset: int) -> dict:
    tokens, lps, tops, offsets = [], [], [], []
    for entry in entries:
        tokens.append(entry.token)
        lps.append(entry.logprob)
        tops.append({top.token: top.logprob for top in entry.top_logprobs} or None)
        offsets.append(offset)
        offset += len(entry.token)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}


def _totals(choices: list[Collected], prompt_tokens: int) -> dict:
    completion = sum(c.usage.completion_tokens for c in choices if c.usage is not None)
    usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion,
             "completion_tokens": completion}
    reasoning = [c.usage.reasoning_tokens for c in choices if c.usage is not None and c.usage.reasoning_tokens is not None]
    if reasoning:
        usage["completion_tokens_details"] = {"reasoning_tokens": sum(reasoning)}
    return usage


def response_object(id: str, model: str, created: int, choice: Collected, prompt_tokens: int,
                    logprobs: bool = False) -> dict:
    """The Responses API's `response` (what response.completed carries when streamed)."""
    prefix = id.removeprefix("resp_")
    output = []
    for index, item in enumerate(choice.items):
        kind = item[0]
        if kind == CALL:
            output.append({"id": f"fc_{prefix}_{index}", "type": "function_call", "call_id": item[2] or f"call_{index}",
                           "name": item[3], "arguments": item[4], "status": "completed"})
        elif kind == TEXT:
            output.append({"id": f"msg_{prefix}_{index}", "type": "message", "role": "assistant", "status": "completed",
                           "content": [{"type": "output_text", "text": item[1], "annotations": [],
                                        "logprobs": msgspec.to_builtins(choice.entries) if logprobs else []}]})
        else:
            output.append({"id": f"rs_{prefix}_{index}", "type": "reasoning", "summary": [], "status": "completed",
                           "content": [{"type": "reasoning_text", "text": item[1]}]})
    usage = choice.usage or Usage(prompt_tokens=prompt_tokens)
    incomplete = choice.finish_reason == "length"
    return {"id": id, "object": "response", "created_at": created, "model": model,
            "status": "incomplete" if incomplete else "completed", "output": output, "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [],
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "usage": {"input_tokens": usage.prompt_tokens,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": usage.completion_tokens,
                      "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens or 0},
                      "total_tokens": usage.prompt_tokens + usage.completion_tokens}}


def anthropic_message(id: str, model: str, choice: Collected, prompt_tokens: int) -> dict:
    content = []
    for item in choice.items:
        kind = item[0]
        if kind == CALL:
            try:
                arguments = msgspec.json.decode(item[4] or "{}")
            except msgspec.DecodeError:
                arguments = {}
            content.append({"type": "tool_use", "id": item[2] or f"toolu_{len(content)}", "name": item[3],
                            "input": arguments})
        elif kind == TEXT:
            content.append({"type": "text", "text": item[1]})
        else:
            content.append({"type": "thinking", "thinking": item[1], "signature": ""})
    usage = choice.usage or Usage(prompt_tokens=prompt_tokens)
    reason, sequence = stop_reason(choice.finish_reason, choice.stop_reason)
    return {"id": id, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": reason, "stop_sequence": sequence,
            "usage": {"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens}}
