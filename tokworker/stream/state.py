"""TextStream: one request's whole streaming state, and the one place that decides when and why it ends.

Per push of generated ids: token-level stop conditions first (vLLM v1's check_stop, token by token, so
several ids in one push -- speculative decoding -- stop exactly where a one-by-one stream would), then text:

    ids -> IncrementalDetokenizer -> StopChecker -> reasoning parser -> tool parser -> deltas

vLLM's rules, in order for each token: the max_tokens-th token ends with "length"; otherwise, once past
min_tokens, eos (unless ignore_eos) ends with "stop" (stop_reason None) and a stop_token_id, or an extra
eos id from generation_config, with "stop" and the id; that token's text is left out unless
include_stop_str_in_output. A stop string ends with "stop", the string as stop_reason, and abort=True
(the text side decided, the engine must abort); it only counts when it ends in text of tokens past
min_tokens. A stream that ends with tool calls and would finish with "stop" finishes with "tool_calls";
cut by max_tokens it finishes with "length", as OpenAI's does (vLLM says "tool_calls" there too, though
the last call's arguments may not parse).

Parsers may need special tokens that skip_special_tokens removes (kimi's <|tool_calls_section_begin|>):
each declares them in `special_tokens` and the detokenizer keeps exactly those.

Every stage publishes when it is steady (the detokenizer's `idle`, the stop checker's `holding`, the
reasoning parser's `steady_end` and `steady_markup`, the tool parser's `string_args` with its
`is_string_piece` test): a token that a steady stage would pass through unchanged is handled here with a
lookup or a search, without calling the stage. Most tokens of a stream take that path, and the tests check
it against the stages' own answers under every grouping. The stream asks the parsers only through these
attributes (and `reads_reasoning`: a tool parser that splits reasoning itself gets no reasoning parser).
"""

from __future__ import annotations

import sys
import weakref

from tokworker.protocol.deltas import EMPTY, Delta, FunctionDelta, StreamParams, StreamUpdate, ToolCallDelta
from tokworker.parsers.reasoning import get_reasoning_parser
from tokworker.parsers.tools import get_tool_parser

from .accounting import StreamAccounting
from .coalesce import coalesce
from .detokenizer import IncrementalDetokenizer
from .stop import StopChecker


_WHITESPACE = " \t\r\n"
_EOS_IDS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _eos_ids(tokenizer) -> tuple[int | None, frozenset]:
    """(the tokenizer's eos id, every eos id generation may end with), read once per tokenizer."""
    known = _EOS_IDS.get(tokenizer)
    if known is None:
        eos = tokenizer.token_to_id(tokenizer.eos_token) if getattr(tokenizer, "eos_token", None) else None
        enders = frozenset(tokenizer.eos_token_ids) | ({eos} if eos is not None else frozenset())
        known = _EOS_IDS[tokenizer] = (eos, enders)
    return known


class TextStream:
    """`push(ids) -> StreamUpdate` per engine step; `finish() -> StreamUpdate` when the engine ended the
    request by itself (everything held is flushed). After the stream has ended both return an empty
    update: ids the engine produced before it saw the abort are ignored. Updates are read-only: every empty
    one is the same object.

    >>> from pathlib import Path
    >>> import tokworker
    >>> from tokworker.tokenizer import Tokenizer
    >>> tok = Tokenizer.from_dir(Path(tokworker.__file__).parent / "data" / "default")
    >>> update = TextStream(tok, StreamParams(stop=["!"])).push(tok.encode("Hi there! more"))
    >>> [d.content for d in update.deltas], update.finish_reason, update.stop_reason
    (['Hi there'], 'stop', '!')
    >>> stream = TextStream(tok, StreamParams(reasoning_parser="qwen3", tool_parser="hermes"),
    ...                     prompt_text="<|im_start|>assistant\\n")
    >>> stream.push(tok.encode("<think>Use f.</think>Sure.")).deltas
    [Delta(content=None, reasoning_content='Use f.', tool_calls=None), Delta(content='Sure.', reasoning_content=None, tool_calls=None)]
    >>> call = stream.push(tok.encode('<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>')).deltas[0]
    >>> call.tool_calls[0].function
    FunctionDelta(name='f', arguments='{"x": 1}')
    """

    def __init__(self, tokenizer, params: StreamParams, prompt_ids=None, prompt_text=None):
        self._reasoning = self._tools = self._string_piece = None
        if params.tool_parser:
            self._tools = get_tool_parser(params.tool_parser, params.tools)
            self._string_piece = self._tools.is_string_piece
        # a tool parser that reads reasoning itself (gpt-oss's channels) needs no reasoning parser in front;
        # the tool parser goes in too, as its calls may end an unclosed think block
        if params.reasoning_parser and not (self._tools is not None and self._tools.reads_reasoning):
            self._reasoning = get_reasoning_parser(params.reasoning_parser, prompt_text=prompt_text,
                                                   prompt_ids=prompt_ids, tokenizer=tokenizer,
                                                   tool_parser=self._tools)
        keep = tuple(getattr(self._reasoning, "special_tokens", ())) + tuple(getattr(self._tools, "special_tokens", ()))
        self._detok = IncrementalDetokenizer(tokenizer, params.skip_special_tokens,
                                             params.spaces_between_special_tokens, keep_special_tokens=keep)
        self._stop = StopChecker(params.stop, params.include_stop_str_in_output) if params.stop else None

        # vLLM: the tokenizer's eos ends with stop_reason None; generation_config's other eos ids join the
        # stop_token_ids (stop_reason = the id) unless ignore_eos.
        eos, enders = _eos_ids(tokenizer)
        if params.ignore_eos:
            self._eos, enders = None, frozenset()
        else:
            self._eos = eos
        self._enders = enders.union(params.stop_token_ids) if params.stop_token_ids else enders
        self._min_tokens = params.min_tokens
        self._max_tokens = params.max_tokens
        self._include_stop_token = params.include_stop_str_in_output
        self._count = 0
        # hot-path facts: a count below quiet_until means the next id meets no length, eos or min_tokens rule
        self._quiet_end = params.max_tokens - 1 if params.max_tokens is not None else sys.maxsize
        self._quiet_until = self._quiet_end if params.min_tokens <= 0 else 0
        self._size = tokenizer.vocab_size
        self._texts = self._detok.texts
        # A delta without any stop's first character cannot touch a stop while nothing is held. With one or
        # two such characters, two str searches test that faster than a set does.
        firsts = self._stop.firsts if self._stop is not None else frozenset()
        self._stop_firsts = firsts
        few = sorted(firsts)
        self._stop_a, self._stop_b = (few[0], few[-1]) if 1 <= len(few) <= 2 else ("", "")
        self._stop_holding = False
        self._idle = self._detok.idle
        self.finish_reason: str | None = None
        self.stop_reason: str | int | None = None
        self._accounted = self._counted = False
        if params.logprobs is not None or params.include_usage or params.continuous_usage_stats:
            # logprob entries and usage counts: push and finish go through the accounting, so a stream
            # without them pays nothing for them
            self.accounting = StreamAccounting(self, tokenizer, params, prompt_ids)
            self.push, self.finish = self.accounting.push, self.accounting.finish
            # push_text: a quiet accounting (usage at the end) lets plain content by; any other sees each push
            self._accounted, self._counted = True, not self.accounting.quiet

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    @property
    def num_tokens(self) -> int:
        """Generated tokens this stream has accepted (up to and including the one that ended it)."""
        return self._count

    def push(self, ids, logprobs=None) -> StreamUpdate:
        """The ids the engine generated this step. A bad id raises DetokenizeError (a ValueError) before
        anything changes, so the stream stays usable. `logprobs` (one `(logprob, [(top id, top logprob),
        ...])` per id) is read only by a stream opened with StreamParams.logprobs (see accounting.py)."""
        # The usual step takes as few operations as possible: ids that end nothing (the count stays inside
        # the window where no length, eos or min_tokens rule applies); for one id, one lookup decodes it
        # while the detokenizer holds nothing; the stop checker is asked only when the text could matter;
        # steady reasoning and argument strings become their delta without a parser call.
        count = self._count
        if len(ids) == 1:
            token_id = ids[0]
            if not (count < self._quiet_until and type(token_id) is int and 0 <= token_id < self._size
                    and token_id not in self._enders):
                return self._general_step(ids)
            text = self._texts[token_id] if self._idle else None
            if text is None:
                detok = self._detok
                text = detok.add_id(token_id)
                self._idle = detok.idle
            self._count = count + 1
        elif count + len(ids) <= self._quiet_until:
            detok = self._detok
            detok.check(ids)
            if not self._enders.isdisjoint(ids):
                return self._general_step(ids)
            text = detok.add(ids, checked=True)
            self._idle = detok.idle
            self._count = count + len(ids)
        else:
            return self._general_step(ids)
        return self._text_step(text)

    def push_text(self, token_id):
        """`push([token_id])` for the usual step of a stream served as events: when its update would be
        plain content, that content itself ("" for a token that shows nothing), with no Delta or update
        made; otherwise the update, as push gives it.

        >>> from pathlib import Path
        >>> import tokworker
        >>> from tokworker.tokenizer import Tokenizer
        >>> tok = Tokenizer.from_dir(Path(tokworker.__file__).parent / "data" / "default")
        >>> stream = TextStream(tok, StreamParams(stop=["!"]))
        >>> out = [stream.push_text(i) for i in tok.encode("Hi there!")]
        >>> out[:-1], out[-1].finish_reason, out[-1].stop_reason
        (['H', 'i', ' there'], 'stop', '!')
        """
        count = self._count
        if not (count < self._quiet_until and type(token_id) is int and 0 <= token_id < self._size
                and token_id not in self._enders) or self._counted:
            return self.push((token_id,))
        text = self._texts[token_id] if self._idle else None
        if text is None:
            if self._accounted:                 # its end must go through the accounting: push decides
                return self.push((token_id,))
            detok = self._detok
            text = detok.add_id(token_id)
            self._idle = detok.idle
        # plain content: no stop can begin in it, and no parser would change it (push's own fast tests)
        if self._stop is None or not self._stop_holding and (
                (self._stop_a not in text and self._stop_b not in text) if self._stop_a
                else self._stop_firsts.isdisjoint(text)):
            reasoning, tools = self._reasoning, self._tools
            if (tools is None or text and tools.steady_content and text[-1] not in _WHITESPACE and (
                    tools.first_marker is None or tools.first_marker(text) is None)) and (
                    reasoning is None or reasoning.steady_markup and reasoning.steady_markup not in text):
                self._count = count + 1
                return text
        if self._accounted:                     # nothing has changed yet: the accounting's push
            return self.push((token_id,))
        self._count = count + 1
        return self._text_step(text)

    def _text_step(self, text: str) -> StreamUpdate:
        """The rest of a quiet step: this text through the stop checker and the parsers."""
        stop = self._stop
        first = self._stop_a
        if stop is not None and (self._stop_holding or ((first in text or self._stop_b in text) if first
                                                        else not self._stop_firsts.isdisjoint(text))):
            text = stop.add(text)
            if stop.stopped:
                return self._update(text, "stop", stop.matched, abort=True)
            self._stop_holding = stop.holding
        if not text:
            return EMPTY
        reasoning, tools = self._reasoning, self._tools
        # once the answer has begun, a text without the reasoning parser's markup is content as it is
        if reasoning is None or reasoning.steady_markup and reasoning.steady_markup not in text:
            if tools is None:
                return StreamUpdate([Delta(text)])
            index = tools.string_args  # inside a call's argument string: a token of it is more of it
            if index >= 0 and self._string_piece(text):
                call = ToolCallDelta(index=index, function=FunctionDelta(arguments=text))
                return StreamUpdate([Delta(tool_calls=[call])])
            if tools.steady_content and text[-1] not in _WHITESPACE and (  # content that cannot begin a call
                    tools.first_marker is None or tools.first_marker(text) is None):
                return StreamUpdate([Delta(text)])
            deltas = tools.feed(text)
            if len(deltas) > 1:
                deltas = coalesce(deltas)
        else:
            end = reasoning.steady_end  # steady reasoning: a text that cannot end it is reasoning as it is
            if end and end not in text and text[-1] not in _WHITESPACE:
                return StreamUpdate([Delta(reasoning_content=text)])
            deltas = reasoning.feed(text)
            if reasoning.passthrough:  # the answer has begun: the rest is content, the parser is done
                self._reasoning = None
            if tools is None:
                if len(deltas) > 1:
                    deltas = coalesce(deltas)
            elif len(deltas) > 1 or deltas and deltas[0].content is not None:
                deltas = self._through_tools(deltas, False)  # reasoning passes by the tool parser
        return StreamUpdate(deltas) if deltas else EMPTY

    def _general_step(self, ids) -> StreamUpdate:
        if self.finish_reason is not None or not ids:
            return EMPTY
        update = self._step(ids)
        self._after_step()
        return update

    def _after_step(self) -> None:
        """Refresh the hot path's facts after a step it did not take."""
        self._idle = self._detok.idle
        self._stop_holding = self._stop is not None and self._stop.holding
        # one id at a time is quiet from min_tokens until the one before max_tokens, while not finished
        self._quiet_until = (self._quiet_end if self.finish_reason is None and self._count >= self._min_tokens
                             else 0)

    def _step(self, ids) -> StreamUpdate:
        detok, stop = self._detok, self._stop
        detok.check(ids)
        count, n = self._count, len(ids)
        finish_reason = stop_reason = None
        keep = text_end = n  # ids[:keep] are accepted, ids[:text_end] are detokenized
        if count + n - 1 >= self._quiet_end or not self._enders.isdisjoint(ids):
            limit, first_armed = self._max_tokens, self._min_tokens + 1
            for k, token_id in enumerate(ids):
                position = count + k + 1
                if limit is not None and position >= limit:
                    finish_reason, keep = "length", k + 1
                    text_end = keep
                    break
                if position >= first_armed and token_id in self._enders:
                    finish_reason, keep = "stop", k + 1
                    stop_reason = None if token_id == self._eos else token_id
                    text_end = keep if self._include_stop_token else k
                    break
        self._count = count + keep
        # The first min_tokens tokens cannot complete a stop string: detokenize them apart.
        disarmed = self._min_tokens - count
        if disarmed <= 0:
            text = ""
            armed = detok.add(ids if text_end == n else ids[:text_end], checked=True)
        else:
            disarmed = min(disarmed, text_end)
            text = detok.add(ids[:disarmed], checked=True)
            if stop is not None:
                text = stop.add(text, can_stop=False)
            armed = detok.add(ids[disarmed:text_end], checked=True)
        if finish_reason is not None:
            armed += detok.flush()
        if stop is None:
            return self._update(text + armed, finish_reason, stop_reason, abort=False)
        if armed:
            text += stop.add(armed, can_stop=count + text_end > self._min_tokens)
        if stop.stopped:
            return self._update(text, "stop", stop.matched, abort=True)
        if finish_reason is not None:
            text += stop.finish()
        return self._update(text, finish_reason, stop_reason, abort=False)

    def finish(self, finish_reason: str = "length") -> StreamUpdate:
        """The engine ended the request itself (max_model_len: "length", or e.g. "abort"); flush what is
        held. A stop string completed by the flushed text still wins, as in vLLM."""
        if self.finish_reason is not None:
            return EMPTY
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
            if finish_reason == "stop" and self._tools is not None and self._tools.called:
                finish_reason = "tool_calls"
            self.finish_reason, self.stop_reason = finish_reason, stop_reason
            self._quiet_until = 0
            return StreamUpdate(deltas=deltas, finish_reason=finish_reason, stop_reason=stop_reason, abort=abort)
        return StreamUpdate(deltas) if deltas else EMPTY

    def _parse(self, text: str, ending: bool) -> list[Delta]:
        reasoning, tools = self._reasoning, self._tools
        stage: list[Delta] = []
        if reasoning is None:
            if text:
                stage.append(Delta(content=text))
        else:
            if text:
                stage = reasoning.feed(text)
            if ending:
                stage += reasoning.finish()
        return coalesce(stage) if tools is None else self._through_tools(stage, ending)

    def _through_tools(self, stage: list[Delta], ending: bool) -> list[Delta]:
        """The tool parser reads the content; reasoning passes by it."""
        tools, out = self._tools, []
        for delta in stage:
            if delta.content is None:
                out.append(delta)
            else:
                out += tools.feed(delta.content)
        if ending:
            out += tools.finish()
        return coalesce(out)
