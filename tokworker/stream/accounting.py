"""Per-token bookkeeping a TextStream does only when asked: logprob entries and usage counts.

A stream opened with StreamParams.logprobs, include_usage or continuous_usage_stats routes its push and
finish through a StreamAccounting, so a stream without them runs TextStream's own push untouched.

Alignment. A token's entry rides with the first delta made at or after its push: when one id is pushed
its text is either in that push's deltas or held back (a partial UTF-8 character, a possible stop string,
a parser's marker), and held text comes out in a later push's delta together with that push's token. So
ids are pushed one at a time here (TextStream's output does not depend on grouping) and each one's
entries wait in `_pending` until a delta carries them; the update that ends the stream carries the rest
(the eos token's entry, text that never showed). Adjacent deltas of one kind are then joined as a push of
the whole batch would join them, their entry lists with them.

Reasoning tokens (where a reasoning parser runs): the tokens from the first whose push showed reasoning
text through the last, so the markers around the reasoning are not counted, as vLLM counts the tokens
between its think tokens (a first reasoning character split across tokens counts from its last piece).
"""

from __future__ import annotations

import math
import weakref

from tokworker.protocol.deltas import EMPTY, StreamParams, StreamUpdate, TokenLogprob, TopLogprob, Usage

from .coalesce import coalesce

_FLOOR = -9999.0          # vLLM's floor: JSON has no -inf, and OpenAI writes very unlikely tokens so
_NAME_CACHE_LIMIT = 65536  # entries per tokenizer; a token's name and bytes are short, so this bounds bytes
_NAMES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _token_names(tokenizer) -> dict:
    names = _NAMES.get(tokenizer)
    if names is None:
        names = _NAMES[tokenizer] = {}
    return names


def token_name(tokenizer, names: dict, token_id: int) -> tuple[str, list[int]]:
    """(the token decoded alone, as vLLM writes it; the bytes it adds to the text, as OpenAI writes them)."""
    known = names.get(token_id)
    if known is None:
        text = tokenizer.decode([token_id])       # ValueError names an id out of range
        raw = tokenizer.token_bytes(token_id) if tokenizer.decode_is_bytewise else text.encode("utf-8")
        if len(names) >= _NAME_CACHE_LIMIT:
            names.clear()
        known = names[token_id] = (text, list(raw))
    return known


def _logprob(value) -> float:
    value = float(value)
    return _FLOOR if value < _FLOOR or math.isnan(value) else value


class StreamAccounting:
    """Wraps one TextStream's push and finish (see the module docstring)."""

    def __init__(self, stream, tokenizer, params: StreamParams, prompt_ids):
        self._stream = stream
        self._push = type(stream).push.__get__(stream)
        self._finish = type(stream).finish.__get__(stream)
        self._tokenizer = tokenizer
        self._names = _token_names(tokenizer)
        self._top = params.logprobs
        self._reasoning = bool(params.reasoning_parser) and params.reasoning_parser != "none"
        self._per_token = self._top is not None or self._reasoning
        self._usage_at_end = params.include_usage or params.continuous_usage_stats
        self._usage_always = params.continuous_usage_stats
        # until the stream ends, its updates are TextStream's own (usage at the end only, nothing per token)
        self.quiet = not self._per_token and not self._usage_always
        self._prompt_tokens = len(prompt_ids) if prompt_ids is not None else 0
        self._pending: list[TokenLogprob] = []
        self._first_reasoning = -1        # the position of the first token that showed reasoning text
        self.reasoning_tokens = 0
        self._empty, self._coalesce = EMPTY, coalesce

    def usage(self) -> Usage:
        return Usage(prompt_tokens=self._prompt_tokens, completion_tokens=self._stream.num_tokens,
                     reasoning_tokens=self.reasoning_tokens if self._reasoning else None)

    def entries(self, ids, logprobs) -> list[TokenLogprob]:
        """One entry per id; a clear ValueError or TypeError for a wrong shape or id, before any push."""
        if len(logprobs) != len(ids):
            raise ValueError(f"{len(ids)} ids but {len(logprobs)} logprobs: one (logprob, top) per id")
        entry = self._entry
        return [entry(token_id, item) for token_id, item in zip(ids, logprobs)]

    def _entry(self, token_id: int, item) -> TokenLogprob:
        try:
            sampled, alternatives = item
        except (TypeError, ValueError):
            raise TypeError(f"a token's logprobs are (logprob, [(top id, top logprob), ...]), not {item!r}") from None
        tokenizer, names = self._tokenizer, self._names
        text, raw = names.get(token_id) or token_name(tokenizer, names, token_id)
        tops = []
        for top_id, top_logprob in alternatives[:self._top]:
            top_text, top_raw = names.get(top_id) or token_name(tokenizer, names, top_id)
            tops.append(TopLogprob(top_text, _logprob(top_logprob), top_raw))
        return TokenLogprob(text, _logprob(sampled), raw, tops)

    def push(self, ids, logprobs=None) -> StreamUpdate:
        stream = self._stream
        if not self._per_token:
            update = self._push(ids)
            if update.finish_reason is None and not self._usage_always:
                return update
            return self._counted(update, [])
        if stream.finish_reason is not None or not ids:
            return self._push(ids)
        # ids pushed without logprobs (a replay after a worker's death) make no entries
        scored = self._top is not None and logprobs is not None
        deltas: list = []
        lists: list[list[TokenLogprob]] = []
        if len(ids) == 1:                      # the usual step: its update is all this id's
            entry = self._entry(ids[0], logprobs[0]) if scored and len(logprobs) == 1 else \
                (self.entries(ids, logprobs)[0] if scored else None)
            before = stream._count
            update = self._push(ids)
            if update.finish_reason is None and not self._usage_always:
                found = update.deltas
                if self._reasoning and found:
                    self._count_reasoning(found, before)
                if entry is None:
                    return update
                if not found:
                    self._pending.append(entry)
                    return update
                if len(found) == 1:
                    pending = self._pending
                    if pending:
                        pending.append(entry)
                        self._pending = []
                        return StreamUpdate(found, logprobs=[pending])
                    return StreamUpdate(found, logprobs=[[entry]])
                self._absorb(update, entry, before, deltas, lists, counted=True)
            else:
                self._absorb(update, entry, before, deltas, lists)
            return self._counted(update, lists, deltas)
        stream._detok.check(ids)              # a bad id fails the whole step before anything changes
        entries = self.entries(ids, logprobs) if scored else None
        for k, token_id in enumerate(ids):
            before = stream._count
            update = self._push([token_id])
            if stream._count == before:
                break                          # the stream had already ended
            self._absorb(update, entries[k] if entries is not None else None, before, deltas, lists)
            if update.finish_reason is not None:
                break
        return self._counted(update, lists, deltas)

    def _absorb(self, update: StreamUpdate, entry, before: int, deltas: list, lists: list,
                counted: bool = False) -> None:
        """One accepted id's update: its entry waits for a delta; its deltas join the step's."""
        pending = self._pending
        if entry is not None:
            pending.append(entry)
        if self._reasoning and not counted and update.deltas:
            self._count_reasoning(update.deltas, before)
        for delta in update.deltas:
            self._join(deltas, lists, delta, pending)
            pending = self._pending = []

    def _count_reasoning(self, deltas, before: int) -> None:
        """The token at position `before` made these deltas: reasoning text moves the count's end to it."""
        if deltas[0].reasoning_content is not None or any(d.reasoning_content is not None for d in deltas):
            if self._first_reasoning < 0:
                self._first_reasoning = before
            self.reasoning_tokens = before - self._first_reasoning + 1

    def finish(self, finish_reason: str = "length") -> StreamUpdate:
        update = self._finish(finish_reason)
        if not self._per_token:
            return self._counted(update, [])
        lists, deltas = [], []
        for delta in update.deltas:
            self._join(deltas, lists, delta, self._pending)
            self._pending = []
        return self._counted(update, lists, deltas)

    def _counted(self, update: StreamUpdate, lists, deltas=None) -> StreamUpdate:
        """`update` with the joined deltas and their entries, the leftover entries at the end, and usage."""
        ending = update.finish_reason is not None
        if deltas is None:
            deltas = update.deltas
        if ending and self._pending:
            if lists:
                lists[-1] = lists[-1] + self._pending
            else:
                lists = [self._pending]
            self._pending = []
        if self._top is None:
            lists = []
        usage = self.usage() if (ending and self._usage_at_end) or (self._usage_always and deltas) else None
        if not ending and not deltas:
            return self._empty
        if deltas is update.deltas and not lists and usage is None:
            return update
        return StreamUpdate(deltas=deltas, finish_reason=update.finish_reason, stop_reason=update.stop_reason,
                            abort=update.abort, logprobs=lists, usage=usage)


    def _join(self, deltas: list, lists: list, delta, entries: list) -> None:
        """Append `delta` with its entries, joined to the previous delta as TextStream would join them."""
        if deltas:
            joined = self._coalesce([deltas[-1], delta])
            if len(joined) == 1:
                deltas[-1] = joined[0]
                if entries:
                    lists[-1] = lists[-1] + entries
                return
        deltas.append(delta)
        lists.append(entries)
