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

from tokworker.protocol.deltas import ChunkFormat, StreamParams, StreamUpdate, Usage

from .chat import ChatHome, ChatWhole, usage_event, whole_body
from .common import TEXT, json, openai_usage


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

    def text_event(self, text: str) -> bytes | None:
        """`sse(StreamUpdate([Delta(content=text)]))` without the update, where that is the usual chunk
        (None where it is not: continuous usage, an echo not yet written, entries carried)."""
        if self._continuous or self._echo or self._carry:
            return None
        return self._head + json(text) + _PLAIN_TAIL

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
        logprobs, self._offset = completion_logprobs(entries, self._offset)
        return json(logprobs)


def completion_logprobs(entries, offset: int) -> tuple[dict, int]:
    """Tokens in the completions shape, and the offset after them: each offset is the previous one plus the
    previous token's length (vLLM's text_offset).

    >>> from tokworker.protocol.deltas import TokenLogprob, TopLogprob
    >>> completion_logprobs([TokenLogprob("Hi", -0.5, [72, 105], [TopLogprob("Hi", -0.5, [72, 105])])], 3)
    ({'text_offset': [3], 'token_logprobs': [-0.5], 'tokens': ['Hi'], 'top_logprobs': [{'Hi': -0.5}]}, 5)
    """
    offsets = []
    at = offset
    for entry in entries:
        offsets.append(at)
        at += len(entry.token)
    return {"text_offset": offsets, "token_logprobs": [e.logprob for e in entries],
            "tokens": [e.token for e in entries],
            "top_logprobs": [{t.token: t.logprob for t in e.top_logprobs} for e in entries]}, at


class CompletionWhole(ChatWhole):
    """One choice of a whole text_completion, gathered as chat's; `prefix`: the echoed prompt's text."""

    __slots__ = ("prefix",)

    def __init__(self, chunk_format: ChunkFormat, params: StreamParams, prompt_text: str = ""):
        super().__init__(chunk_format, params)
        self.prefix = prompt_text

    def fragment(self) -> bytes:
        c = self.collected
        choice = {"index": self.index, "text": self.prefix + (c.text(TEXT) or ""),
                  "logprobs": completion_logprobs(c.entries, len(self.prefix))[0] if self.logprobs else None,
                  "finish_reason": c.finish_reason, "stop_reason": c.stop_reason}
        if self.token_ids:
            choice["token_ids"] = c.ids
        return json(choice)


def _prompt_text(chunk_format: ChunkFormat, params: StreamParams, prompt_ids, tokenizer) -> str:
    if chunk_format.echo and prompt_ids and tokenizer is not None:
        return tokenizer.decode(prompt_ids, skip_special_tokens=params.skip_special_tokens)
    return ""


class CompletionsHome(ChatHome):
    """Everything /v1/completions writes; its usage chunk, [DONE] and errors are chat's."""

    api = "completions"
    id_prefix = "cmpl-"
    object = "text_completion"
    chunk_object = "text_completion"

    def writer(self, chunk_format: ChunkFormat, params: StreamParams, prompt_ids=None, tokenizer=None):
        return CompletionWriter(chunk_format, params, _prompt_text(chunk_format, params, prompt_ids, tokenizer))

    def whole(self, chunk_format: ChunkFormat, params: StreamParams, prompt_ids=None, tokenizer=None):
        return CompletionWhole(chunk_format, params, _prompt_text(chunk_format, params, prompt_ids, tokenizer))

    def body(self, chunk_format: ChunkFormat, fragments: list[bytes], usages: list[Usage | None],
             prompt_tokens: int | None = None, prompt_ids: list[int] | None = None) -> bytes:
        return whole_body(self.object, chunk_format, fragments, usages, prompt_tokens)


HOME = CompletionsHome()
