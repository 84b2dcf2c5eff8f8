"""The one state machine every tag-pair format in formats.py runs on: text in, reasoning and content out.

Whitespace at the edges of the reasoning (and of an answer wrapper) is formatting: "<think>\\n...\\n</think>
\\n\\n" gives reasoning without those newlines and content from its first real character. A tail that could
still become a tag is held back, so no client ever sees half a tag. Markup tags that reach the content (a
stray end tag, an answer wrapper's tags) are dropped. `parse(text)` runs the same machine on the whole
text, so the streamed and the whole-text results agree by construction; the tests check it against splits.
"""

from __future__ import annotations

from tokworker.protocol.deltas import Delta

from .formats import CONTENT, EXPECT, INSIDE, ReasoningFormat
from .prompt import CONTENT_TEXT, INSIDE_TEXT

_REASONING = "reasoning"  # inside, after the optional opening tag (and label) was ruled in or out
_LABEL = "label"  # just inside the block: the format's label may come first
_ANSWER = "answer"  # inside an answer wrapper: content whose edge whitespace is formatting
_WHITESPACE = " \t\r\n"


def _firsts(tags: tuple[str, ...]) -> tuple[frozenset, str]:
    """The characters that begin the tags, and the one character when they all begin with it (a str
    search is cheaper than a set test)."""
    firsts = frozenset(tag[0] for tag in tags)
    return firsts, next(iter(firsts)) if len(firsts) == 1 else ""


class ReasoningParser:
    """One stream's reasoning state: `feed(text) -> list[Delta]`, `finish() -> list[Delta]`, and the
    whole-text `parse(text) -> (reasoning, content)` (None for an empty part).

    `passthrough` turns True once the answer has begun and nothing is held, for a format whose content
    holds no markup to drop: from then on every text is content, unchanged, and finish() adds nothing, so a
    caller may stop feeding the parser.
    `steady_end` is the character that begins every tag ending the reasoning while the parser is inside
    reasoning that has started with nothing held (else ""): then a text without that character, not ending
    in whitespace, is one reasoning delta of itself and changes no state, so a caller may skip feed().
    `steady_markup` is the character that begins every markup tag the parser cuts from the content, while
    the answer has begun with nothing held, or every tag that could open a block or be cut, while no block
    has opened yet, content has been shown and nothing is held (else ""): then a text without it is
    content as it is and changes no state, so a caller may skip feed().
    `tool_starts` are a tool parser's call openings: they end the reasoning implicitly and stay in the
    content, where that parser reads them. With `opens_call` (that parser's test of what follows an
    opening: a call, text, or not yet known) only an opening that begins a call ends the reasoning; one the
    model merely mentions stays reasoning, and an undecided one is held (at most a call header's length)."""

    __slots__ = ("fmt", "special_tokens", "passthrough", "steady_end", "steady_markup", "_initial",
                 "_tool_starts", "_opens_call", "_probed", "_mode", "_steady", "_held", "_held_blank", "_started",
                 "_emitted_content", "_ends", "_implicit", "_end_firsts", "_end_first", "_content_tags",
                 "_content_firsts", "_content_first", "_expect_tags", "_expect_firsts", "_expect_first",
                 "_answer_firsts", "_answer_first")

    def __init__(self, fmt: ReasoningFormat, mode: str, tool_starts: tuple[str, ...] = (), opens_call=None):
        self.fmt = fmt
        self.special_tokens = fmt.special_tokens
        self._initial, self._tool_starts, self._opens_call = mode, tool_starts, opens_call
        self._probed = tuple(t for t in tool_starts if t not in fmt.implicit_ends) if opens_call else ()
        self._implicit = fmt.implicit_ends + tuple(t for t in tool_starts if t not in fmt.implicit_ends)
        self._ends = fmt.ends + self._implicit
        self._end_firsts, self._end_first = _firsts(self._ends)
        self._content_tags = fmt.strays + fmt.answer_starts
        self._content_firsts, self._content_first = _firsts(self._content_tags)
        self._expect_tags = fmt.starts + self._content_tags
        self._expect_firsts, self._expect_first = _firsts(self._expect_tags)
        self._answer_firsts, self._answer_first = _firsts(fmt.answer_ends)
        self._mode = _REASONING if mode == INSIDE_TEXT else CONTENT if mode == CONTENT_TEXT else mode
        self._started = mode == INSIDE_TEXT or mode == CONTENT_TEXT  # a prefill already wrote text
        self._emitted_content = mode == CONTENT_TEXT
        self._held = ""          # text not yet decided (a possible tag, or whitespace at an edge)
        self._held_blank: list[str] = []  # whitespace held after _held, kept apart so a run of it is O(1) a step
        self._refresh()

    def parse(self, text: str) -> tuple[str | None, str | None]:
        fresh = ReasoningParser(self.fmt, self._initial, self._tool_starts, self._opens_call)
        deltas = fresh.feed(text) + fresh.finish()
        reasoning = "".join(d.reasoning_content for d in deltas if d.reasoning_content)
        content = "".join(d.content for d in deltas if d.content)
        return reasoning or None, content or None

    def feed(self, text: str) -> list[Delta]:
        steady = self._steady  # the hot path: a section that has started, nothing held but whitespace
        if steady is CONTENT:
            first = self._content_first
            if not self._content_tags or ((first not in text) if first else self._content_firsts.isdisjoint(text)):
                return [Delta(content=text)] if text else []
        elif steady is EXPECT:  # no block yet, content shown: text that cannot begin a tag is content
            first = self._expect_first
            if (first not in text) if first else self._expect_firsts.isdisjoint(text):
                return [Delta(content=text)] if text else []
        elif steady is _REASONING and text:
            first = self._end_first
            if (first not in text) if first else self._end_firsts.isdisjoint(text):
                if text[-1] in _WHITESPACE or self._held_blank:
                    return self._plain_reasoning(text)
                return [Delta(reasoning_content=text)]
        elif steady is _ANSWER and text and text[-1] not in _WHITESPACE and not self._held_blank:
            first = self._answer_first  # inside an answer wrapper: text that cannot end it is content
            if (first not in text) if first else self._answer_firsts.isdisjoint(text):
                return [Delta(content=text)]
        if self._held_blank or not self._held.strip(_WHITESPACE):
            if self._holds_blank() and not text.strip(_WHITESPACE):
                self._held_blank.append(text)  # still only whitespace: the machine would hold it all
                self._steady = None
                self.steady_end = self.steady_markup = ""
                return []
        out: list[Delta] = []
        self._run(self._take_held() + text, out, final=False)
        self._refresh()
        return out

    def _refresh(self) -> None:
        """Publish the steady facts for the state the machine is in."""
        mode, held = self._mode, self._held
        if (mode is _REASONING or mode is _ANSWER) and self._started and held and not held.strip(_WHITESPACE):
            self._held_blank.append(held)  # only whitespace waits: the steady path can go on from here
            self._held = held = ""
        if (mode is CONTENT or mode is _REASONING or mode is _ANSWER) and self._started and not held:
            self._steady = mode
        else:  # before any block: steady once content was shown (whitespace is then content, never held)
            self._steady = EXPECT if mode is EXPECT and self._emitted_content and not held \
                and not self._held_blank else None
        self.passthrough = self._steady is CONTENT and not self._content_tags
        self.steady_end = self._end_first if self._steady is _REASONING and not self._held_blank else ""
        self.steady_markup = self._content_first if self._steady is CONTENT and self._content_tags else \
            self._expect_first if self._steady is EXPECT else ""

    def _plain_reasoning(self, text: str) -> list[Delta]:
        """Steady reasoning and text that cannot begin an end tag, next to whitespace: what the machine would
        do, without it. Whitespace at the end waits (it is formatting if the end tag follows) and joins the
        next text."""
        blank = self._held_blank
        if text[-1] in _WHITESPACE:
            self.steady_end = ""
            body = text.rstrip(_WHITESPACE)
            if not body:
                blank.append(text)
                return []
            if blank:
                shown = "".join(blank) + body
                blank.clear()
            else:
                shown = body
            blank.append(text[len(body):])
            return [Delta(reasoning_content=shown)]
        if blank:
            text = "".join(blank) + text
            blank.clear()
            self.steady_end = self._end_first
        return [Delta(reasoning_content=text)]

    def finish(self) -> list[Delta]:
        out: list[Delta] = []
        held = self._take_held()
        if held:
            self._run(held, out, final=True)
        self._steady = None
        self.steady_end = self.steady_markup = ""
        return out

    def _holds_blank(self) -> bool:
        """Whether whitespace fed now would be held whole (nothing shown yet in this section)."""
        mode = self._mode
        return mode is not CONTENT and (mode is not EXPECT or not self._emitted_content)

    def _take_held(self) -> str:
        held = self._held
        if self._held_blank:
            held += "".join(self._held_blank)
            self._held_blank.clear()
        self._held = ""
        return held

    # ------------------------------------------------------------------ the machine
    def _run(self, text: str, out: list[Delta], final: bool) -> None:
        """Every mode consumes what it can decide and returns the rest (None when it needs more text)."""
        self._held = ""
        while text is not None:
            mode = self._mode
            if mode is CONTENT:
                text = self._content(text, out, final)
            elif mode is _REASONING:
                text = self._section(text, out, final, True)
            elif mode is _ANSWER:
                text = self._section(text, out, final, False)
            elif mode is INSIDE:
                text = self._skip(text, final, self.fmt.starts)
            elif mode is _LABEL:
                text = self._skip(text, final, self.fmt.labels)
            else:
                text = self._expect(text, out, final)

    def _skip(self, text: str, final: bool, tags: tuple[str, ...]):
        """Just inside the block: an opening tag the model repeats anyway (or the format's label) is dropped."""
        body = text.lstrip(_WHITESPACE)
        for tag in tags:
            if body.startswith(tag):
                self._enter_block(from_label=tags is self.fmt.labels)
                return body[len(tag):]
        if not final and any(tag.startswith(body) for tag in tags):
            self._held = text
            return None
        self._enter_block(from_label=tags is self.fmt.labels)
        return text

    def _enter_block(self, from_label: bool = False) -> None:
        self._mode = _LABEL if self.fmt.labels and not from_label else _REASONING
        self._started = False

    def _section(self, text: str, out: list[Delta], final: bool, reasoning: bool):
        """Reasoning, or an answer wrapper's content, up to its end tag."""
        ends, implicit = (self._ends, self._implicit) if reasoning else (self.fmt.answer_ends, ())
        found = _first_tag(text, ends)
        if found is not None:
            index, tag = found
            if tag in self._probed:
                opens = self._opens_call(text[index:], final)
                if opens is None:  # not known yet: hold the opening, and the whitespace a call would drop
                    cut = len(text[:index].rstrip(_WHITESPACE))
                    self._emit(text[:cut], out, reasoning)
                    self._held = text[cut:]
                    return None
                if not opens:  # the marker written as text: the reasoning goes on after it
                    self._emit(text[:index + len(tag)], out, reasoning)
                    return text[index + len(tag):]
            self._emit(text[:index].rstrip(_WHITESPACE), out, reasoning)
            self._mode, self._started = CONTENT, False
            return text[index:] if tag in implicit else text[index + len(tag):]
        if final:
            self._emit(text.rstrip(_WHITESPACE), out, reasoning)
            return None
        cut = len(text) - _partial_tag(text, ends)
        cut = len(text[:cut].rstrip(_WHITESPACE))
        self._emit(text[:cut], out, reasoning)
        self._held = text[cut:]
        return None

    def _emit(self, text: str, out: list[Delta], reasoning: bool) -> None:
        if not self._started:
            text = text.lstrip(_WHITESPACE)
            self._started = bool(text)
        if text:
            if reasoning:
                out.append(Delta(reasoning_content=text))
            else:
                out.append(Delta(content=text))
                self._emitted_content = True

    def _content(self, text: str, out: list[Delta], final: bool):
        """The answer: its leading whitespace is formatting, markup in it is dropped, an answer wrapper
        opens. Text is read once, left to right: what came before dropped markup is never read again."""
        rest = answer = None
        tags = self._content_tags
        if tags:
            found = _first_tag(text, tags)
            if found is not None:
                index, tag = found
                text, rest = text[:index], text[index + len(tag):]
                answer = tag in self.fmt.answer_starts
            elif not final:
                cut = len(text) - _partial_tag(text, tags)
                text, self._held = text[:cut], text[cut:]
        if not self._started:
            text = text.lstrip(_WHITESPACE)
            self._started = bool(text)
        if text:
            out.append(Delta(content=text))
            self._emitted_content = True
        if answer:
            self._mode, self._started = _ANSWER, False
        return rest

    def _expect(self, text: str, out: list[Delta], final: bool):
        """Content that may open a reasoning block; whitespace before an opening tag at the very start is
        formatting, after real content it is content. A stray end tag is dropped."""
        found = _first_tag(text, self._expect_tags)
        if found is not None:
            index, tag = found
            before = text[:index]
            if before and (self._emitted_content or before.strip(_WHITESPACE)):
                out.append(Delta(content=before))
                self._emitted_content = True
            if tag in self.fmt.starts:
                self._enter_block()
            elif tag in self.fmt.answer_starts:
                self._mode, self._started = _ANSWER, False
            return text[index + len(tag):]  # after a stray end tag (dropped) content is still expected
        cut = len(text) if final else len(text) - _partial_tag(text, self._expect_tags)
        if not self._emitted_content and not final and not text[:cut].strip(_WHITESPACE):
            cut = 0
        if cut:
            out.append(Delta(content=text[:cut]))
            self._emitted_content = True
        self._held = text[cut:]
        return None


def _first_tag(text: str, tags: tuple[str, ...]):
    """(index, tag) of the earliest tag in text, the longest one on a tie; None if there is none."""
    best = None
    for tag in tags:
        index = text.find(tag)
        if index >= 0 and (best is None or index < best[0] or (index == best[0] and len(tag) > len(best[1]))):
            best = (index, tag)
    return best


def _partial_tag(text: str, tags: tuple[str, ...]) -> int:
    """The length of the longest tail of text that is a proper prefix of one of the tags."""
    longest = 0
    for tag in tags:
        for k in range(min(len(tag) - 1, len(text)), longest, -1):
            if text.endswith(tag[:k]):
                longest = k
                break
    return longest
