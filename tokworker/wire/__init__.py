"""What each wire API writes, one home per format: its ids, streamed events, whole body, what ends a
stream, usage and errors, all made from the same TextStream updates (deltas, logprob entries, usage,
finish):

    chat.py         OpenAI chat.completion(.chunk) (/v1/chat/completions)
    completions.py  OpenAI text_completion (/v1/completions)
    responses.py    OpenAI Responses API `response` and its events (/v1/responses)
    anthropic.py    Anthropic Messages `message` and its events (/v1/messages)
    derender.py     vLLM's derender: chat.completion / text_completion, and one chunk per call
                    (/v1/chat/completions/derender, /v1/completions/derender)

A home (`home(api)`) gives, for one choice of one response (a ChunkFormat): `writer(...)`, whose
`sse(update) -> bytes` writes each update's events, or `whole(...)`, whose `add(update, ids)` gathers them
and `fragment()` gives the choice's finished JSON; and for the response: `body(format, fragments, usages,
prompt_tokens, prompt_ids)` (the choices' fragments joined as bytes), `tail(format, usages, include_usage,
prompt_tokens)` (what follows the last event), `error_event(format, status, code, message, param)` (an error that ends a stream) and
`error_body(status, code, message, param)` (an error before the headers). The worker runs the writers
and the whole gatherers, where the text is; the API process only joins bytes.
"""

from __future__ import annotations

import msgspec

from tokworker.protocol.deltas import ChunkFormat, StreamParams

from . import anthropic, chat, completions, derender, responses

HOMES = {home.api: home for home in (chat.HOME, completions.HOME, responses.HOME, anthropic.HOME,
                                     derender.HOME_CHAT, derender.HOME_COMPLETIONS)}
APIS = ("chat", "completions", "responses", "anthropic")    # the generation routes' formats (not vLLM's derender)


def home(api: str):
    """The home of a wire format; ValueError names an unknown one.

    >>> home("chat").id_prefix, home("anthropic").id_prefix
    ('chatcmpl-', 'msg_')
    """
    try:
        return HOMES[api]
    except KeyError:
        raise ValueError(f"unknown chunk api {api!r}: one of {', '.join(HOMES)}") from None


def params_for(chunk_format: ChunkFormat, params: StreamParams) -> StreamParams:
    """The stream's params as its format needs them: a whole body, Responses and Messages always report
    usage."""
    if (chunk_format.whole or chunk_format.api in ("responses", "anthropic")) and not params.include_usage:
        return msgspec.structs.replace(params, include_usage=True)
    return params


def writer_for(chunk_format: ChunkFormat, params: StreamParams, prompt_ids=None, tokenizer=None):
    """What the worker keeps beside a stream opened with `chunk_format`: its format's writer, or its whole
    gatherer."""
    fmt = home(chunk_format.api)
    make = fmt.whole if chunk_format.whole else fmt.writer
    return make(chunk_format, params, prompt_ids, tokenizer)
