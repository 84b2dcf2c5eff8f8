"""A stream's updates -> OpenAI text_completion chunks (/v1/completions), as vLLM streams them.

One chunk per update that has text: `{id, object: "text_completion", created, model, choices: [{index,
text, logprobs, finish_reason, stop_reason}]}`; the update that ends the stream sets finish_reason and
stop_reason (a chunk with empty text if it has none). The completions API has only text: reasoning and
tool-call deltas are not part of it (a completions request runs no parsers), their entries ride with the
next text.

Logprobs in this API's shape: `{tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}`,
offsets in characters from the start of the choice's text (the echoed prompt included). `echo` puts the
prompt's text in front of the first chunk (its tokens have no entries: the engine sends none for them).
"""

from __future__ import annotations

from tokworker.protocol.deltas import ChunkFormat, StreamParams, StreamUpdate

from .chat import usage_event
from .common import json, openai_usage


_PLAIN_TAIL = b',"logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'


class CompletionWriter:
    __slots__ = ("_format", "_head", "_echo", "_offset", "_carry", "_usage_chunk", "_continuous")

    def __init__(self, chunk_format: ChunkFormat, params: StreamParams, prompt_text: str = ""):
        self._format = chunk_format
        self._head = b'data: {"id":%s,"object":"text_completion","created":%d,"model":%s,"choices":[{"index":%d,' \
                     b'"text":' % (json(chunk_format.id), chunk_format.created, json(chunk_format.model),
                                   chunk_format.index)
        self._echo = prompt_text
        self._offset = len(prompt_text)
        self._carry: list = []          # entries of tokens whose text has not been written yet
        self._usage_chunk = params.include_usage and chunk_format.n == 1
        self._continuous = params.include_usage and params.continuous_usage_stats

    def sse(self, update: StreamUpdate) -> bytes:
        deltas = update.deltas
        if len(deltas) == 1 and update.finish_reason is None and not update.logprobs and not self._continuous \
                and not self._echo and not self._carry:       # the usual step: more text, nothing else
            text = deltas[0].content
            if text is None:
                return b""
            return self._head + json(text) + _PLAIN_TAIL
        parts = [d.content for d in deltas if d.content is not None]
        entries = self._carry
        for extra in update.logprobs:
            entries = entries + extra if extra else entries
        ending = update.finish_reason is not None
        if not parts and not ending:
            self._carry = entries
            return b""
        self._carry = []
        text = "".join(parts)
        if self._echo:
            text, self._echo = self._echo + text, ""
        logprobs = self._logprobs(entries) if update.logprobs or entries else b"null"
        usage = b',"usage":' + openai_usage(update.usage) if self._continuous else b""
        if ending:
            tail = b',"finish_reason":%s,"stop_reason":%s}]%s}\n\n' % (
                json(update.finish_reason), json(update.stop_reason), usage)
        else:
            tail = b',"finish_reason":null,"stop_reason":null}]%s}\n\n' % usage
        out = self._head + json(text) + b',"logprobs":' + logprobs + tail
        if ending and self._usage_chunk:
            f = self._format
            out += usage_event(f.id, f.model, f.created, [update.usage], object="text_completion")
        return out

    def _logprobs(self, entries) -> bytes:
        """This chunk's tokens in the completions shape; each offset is the previous one plus the previous
        token's length (vLLM's text_offset)."""
        offsets = []
        at = self._offset
        for entry in entries:
            offsets.append(at)
            at += len(entry.token)
        self._offset = at
        return json({"text_offset": offsets, "token_logprobs": [e.logprob for e in entries],
                     "tokens": [e.token for e in entries],
                     "top_logprobs": [{t.token: t.logprob for t in e.top_logprobs} for e in entries]})
