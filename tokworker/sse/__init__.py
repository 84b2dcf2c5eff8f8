"""Stream updates -> finished server-sent event bytes, one writer per wire format, all fed the same
TextStream updates (deltas, logprob entries, usage, finish):

    chat.py         OpenAI chat.completion.chunk (/v1/chat/completions)
    completions.py  OpenAI text_completion chunks (/v1/completions)
    responses.py    OpenAI Responses API events (/v1/responses)
    anthropic.py    Anthropic Messages events (/v1/messages)

A writer serves one response choice: `sse(update) -> bytes` per update, in order; an update with nothing
to say gives b"". `writer_for` picks one by ChunkFormat.api, as the worker does per stream; the stream's
TextStream takes `params_for(chunk_format, params)`.
"""

from __future__ import annotations

import msgspec

from tokworker.protocol.deltas import ChunkFormat, StreamParams

APIS = ("chat", "completions", "responses", "anthropic")


def params_for(chunk_format: ChunkFormat, params: StreamParams) -> StreamParams:
    """The stream's params as its format needs them: Responses and Messages always report usage."""
    if chunk_format.api in ("responses", "anthropic") and not params.include_usage:
        return msgspec.structs.replace(params, include_usage=True)
    return params


def done_event(api: str) -> bytes:
    """What ends a streamed response of this api after its last chunk: `data: [DONE]` for OpenAI's chat and
    completions, nothing for Responses and Messages (their last event says so).

    >>> done_event("chat"), done_event("anthropic")
    (b'data: [DONE]\\n\\n', b'')
    """
    return b"data: [DONE]\n\n" if api in ("chat", "completions") else b""


def writer_for(chunk_format: ChunkFormat, params: StreamParams, prompt_ids=None, tokenizer=None):
    """The writer of `chunk_format.api` for one stream; ValueError names an unknown api."""
    api = chunk_format.api
    prompt_tokens = len(prompt_ids) if prompt_ids is not None else 0
    if api == "chat":
        from .chat import ChunkWriter
        return ChunkWriter.for_format(chunk_format, params)
    if api == "completions":
        from .completions import CompletionWriter
        prompt_text = ""
        if chunk_format.echo and prompt_ids and tokenizer is not None:
            prompt_text = tokenizer.decode(prompt_ids, skip_special_tokens=params.skip_special_tokens)
        return CompletionWriter(chunk_format, params, prompt_text)
    if api == "responses":
        from .responses import ResponsesWriter
        return ResponsesWriter(chunk_format, params, prompt_tokens)
    if api == "anthropic":
        from .anthropic import MessagesWriter
        return MessagesWriter(chunk_format, params, prompt_tokens)
    raise ValueError(f"unknown chunk api {api!r}: one of {', '.join(APIS)}")
