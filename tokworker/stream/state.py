"""TextStream: one request's whole streaming state, and the one place that decides when and why it ends.

Per push of generated ids: token-level stop conditions first (vLLM v1's check_stop, token by token, so
several ids in one push -- speculative decoding -- stop exactly where a one-by-one stream would), then text:

    ids -> IncrementalDetokenizer -> StopChecker -> reasoning parser -> tool parser -> deltas

vLLM's rules, in order for each token: the max_tokens-th token ends with "length"; otherwise, once past
min_tokens, eos (unless ignore_eos) ends with "stop" (stop_reason None) and a stop_token_id, or an extra
eos id from generation_config, with "stop" and the id; that token's text is left out unless
include_stop_str_in_output. A stop string ends with "stop", the string as stop_reason, and abort=True
(the text side decided, the engine must abort); it only counts when it ends in text of tokens past
min_tokens. A stream that ends with tool calls and would finish with "stop" finishes with "tool_calls".

Parsers may need special tokens that skip_special_tokens removes (kimi's <|tool_calls_section_begin|>):
each declares them in `special_tokens` and the detokenizer keeps exactly those.
"""

from __future__ import annotations

from protocol.deltas import Delta, StreamParams, StreamUpdate

from .detokenizer import IncrementalDetokenizer
from .stop import StopChecker


class TextStream:
    """`push(ids) -> StreamUpdate` per engine step; `finish() -> StreamUpdate` when the engine ended the
    request by itself (everything held is flushed). After the stream has ended both return an empty
    update: ids the engine produced before it saw the abort are ignored."""

    def __init__(self, tokenizer, params: StreamParams, prompt_ids=None, prompt_text=None):
        self.params = params
        self._reasoning = self._tools = None
        if params.reasoning_parser:
            from tokworker.parsers.reasoning import get_reasoning_parser
            self._reasoning = get_reasoning_parser(params.reasoning_parser, prompt_text=prompt_text,
                                                   prompt_ids=prompt_ids, tokenizer=tokenizer)
        if params.tool_parser:
            from tokworker.parsers.tools import get_tool_parser
            self._tools = get_tool_parser(params.tool_parser, params.tools)
        keep = tuple(getattr(self._reasoning, "special_tokens", ())) + tuple(getattr(self._tools, "special_tokens", ()))
        self._detok = IncrementalDetokenizer(tokenizer, params.skip_special_tokens,
                                             params.spaces_between_special_tokens, keep_special_tokens=keep)
        self._stop = StopChecker(params.stop, params.include_stop_str_in_output) if params.stop else None

        # vLLM: the tokenizer's eos ends with stop_reason None; generation_config's other eos ids join the
        # stop_token_ids (stop_reason = the id) unless ignore_eos.
        eos = tokenizer.token_to_id(tokenizer.eos_token) if getattr(tokenizer, "eos_token", None) else None
        stop_ids = set(params.stop_token_ids)
        if not params.ignore_eos:
            stop_ids.update(i for i in tokenizer.eos_token_ids if i != eos)
        self._eos = None if params.ignore_eos else eos
        self._enders = frozenset(stop_ids | ({eos} if self._eos is not None else set()))
        self._min_tokens = params.min_tokens
        self._max_tokens = params.max_tokens
        self._include_stop_token = params.include_stop_str_in_output
        self._count = 0
        self._tool_calls = False
        self.finish_reason: str | None = None
        self.stop_reason: str | int | None = None

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    @property
    def num_tokens(self) -> int:
        """Generated tokens this stream has accepted (up to and including the one that ended it)."""
        return self._count

    def push(self, ids) -> StreamUpdate:
        """The ids the engine generated this step. A bad id raises DetokenizeError (a ValueError) before
        anything changes, so the stream stays usable."""
        if self.finish_reason is not None or not ids:
            return StreamUpdate()
        count, n = self._count, len(ids)
        limit = self._max_tokens
        if count >= self._min_tokens and (limit is None or count + n < limit) and self._enders.isdisjoint(ids):
            # The usual step: nothing ends on a token and every token may complete a stop string.
            text = self._detok.add(ids)
            self._count = count + n
            stop = self._stop
            if stop is not None:
                text = stop.add(text)
                if stop.stopped:
                    return self._update(text, "stop", stop.matched, abort=True)
            if self._tools is None:
                reasoning = self._reasoning
                if reasoning is None:
                    return StreamUpdate([Delta(text)]) if text else StreamUpdate()
                return StreamUpdate(_coalesce(reasoning.feed(text))) if text else StreamUpdate()
            return self._update(text, None, None, abort=False)
        self._detok.check(ids)
        finish_reason = stop_reason = None
        keep = n  # ids[:keep] are accepted, ids[:text_end] are detokenized
        text_end = n
        if (limit is not None and count + n >= limit) or not self._enders.isdisjoint(ids):
            for k, token_id in enumerate(ids):
                position = count + k + 1
                if limit is not None and position >= limit:
                    finish_reason, keep, text_end = "length", k + 1, k + 1
                    break
                if position > self._min_tokens and token_id in self._enders:
                    finish_reason, keep = "stop", k + 1
                    stop_reason = None if token_id == self._eos else token_id
                    text_end = keep if self._include_stop_token else k
                    break
        self._count = count + keep
        # The first min_tokens tokens cannot complete a stop string: detokenize them apart.
        disarmed = min(text_end, max(0, self._min_tokens - count))
        detok, stop = self._detok, self._stop
        if disarmed:
            text = detok.add(ids[:disarmed], checked=True)
            if stop is not None:
                text = stop.add(text, can_stop=False)
        else:
            text = ""
        armed = detok.add(ids[disarmed:text_end], checked=True) if text_end > disarmed else ""
        if finish_reason is not None:
            armed += detok.flush()
        if stop is not None:
            if armed:
                text += stop.add(armed, can_stop=count + text_end > self._min_tokens)
            if stop.stopped:
                finish_reason, stop_reason = "stop", stop.matched
            elif finish_reason is not None:
                text += stop.finish()
        else:
            text += armed
        return self._update(text, finish_reason, stop_reason, abort=stop is not None and stop.stopped)

    def finish(self, finish_reason: str = "length") -> StreamUpdate:
        """The engine ended the request itself (max_model_len: "length", or e.g. "abort"); flush what is
        held. A stop string completed by the flushed text still wins, as in vLLM."""
        if self.finish_reason is not None:
            return StreamUpdate()
        text = self._detok.flush()
        stop_reason = None
        stop = self._stop
        if stop is not None:
            text = stop.add(text, can_stop=self._count > self._min_tokens) if text else ""
            if stop.stopped:
                finish_reason, stop_reason = "stop", stop.matched
            else:
                text += stop.finish()
        return self._update(text, finish_reason, stop_reason, abort=False)

    # ------------------------------------------------------------------ text -> deltas
    def _update(self, text: str, finish_reason, stop_reason, abort: bool) -> StreamUpdate:
        ending = finish_reason is not None
        reasoning, tools = self._reasoning, self._tools
        if reasoning is None and tools is None:
            deltas = [Delta(content=text)] if text else []
        else:
            deltas = self._parse(text, ending)
        if ending:
            if self._tool_calls and finish_reason == "stop":
                finish_reason = "tool_calls"
            self.finish_reason, self.stop_reason = finish_reason, stop_reason
            return StreamUpdate(deltas=deltas, finish_reason=finish_reason, stop_reason=stop_reason, abort=abort)
        return StreamUpdate(deltas=deltas)

    def _parse(self, text: str, ending: bool) -> list[Delta]:
        reasoning, tools = self._reasoning, self._tools
        stage = []
        if reasoning is None:
            if text:
                stage.append(Delta(content=text))
        else:
            if text:
                stage = reasoning.feed(text)
            if ending:
                stage += reasoning.finish()
        if tools is None:
            return _coalesce(stage)
        out = []
        for delta in stage:
            if delta.content is None:
                out.append(delta)
            else:
                out += tools.feed(delta.content)
        if ending:
            out += tools.finish()
        if not self._tool_calls:
            self._tool_calls = any(d.tool_calls for d in out)
        return _coalesce(out)


def _coalesce(deltas: list[Delta]) -> list[Delta]:
    """Adjacent deltas of one kind become one: content with content, reasoning with reasoning, and a call's
    argument fragments with the fragment before them."""
    if len(deltas) < 2:
        return deltas
    out = [deltas[0]]
    for delta in deltas[1:]:
        last = out[-1]
        if delta.content is not None and last.content is not None and last.tool_calls is None:
            out[-1] = Delta(content=last.content + delta.content)
        elif (delta.reasoning_content is not None and last.reasoning_content is not None
              and last.tool_calls is None):
            out[-1] = Delta(reasoning_content=last.reasoning_content + delta.reasoning_content)
        elif _is_argument_fragment(delta) and last.tool_calls and last.tool_calls[-1].index == delta.tool_calls[0].index \
                and last.tool_calls[-1].function is not None:
            previous = last.tool_calls[-1]
            merged = (previous.function.arguments or "") + delta.tool_calls[0].function.arguments
            calls = last.tool_calls[:-1] + [type(previous)(index=previous.index, id=previous.id, type=previous.type,
                                                           function=type(previous.function)(name=previous.function.name,
                                                                                            arguments=merged))]
            out[-1] = Delta(tool_calls=calls)
        else:
            out.append(delta)
    return out


def _is_argument_fragment(delta: Delta) -> bool:
    calls = delta.tool_calls
    if not calls or len(calls) != 1 or delta.content is not None or delta.reasoning_content is not None:
        return False
    call = calls[0]
    return (call.id is None and call.type is None and call.function is not None and call.function.name is None
            and call.function.arguments is not None)
