"""What the writers share: JSON encoding, event framing, usage objects and a delta's pieces in order."""

from __future__ import annotations

import msgspec

from tokworker.protocol.deltas import Delta, Usage

json = msgspec.json.encode


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
