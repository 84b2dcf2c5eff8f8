"""Reasoning parsers by vLLM's names: split a model's answer into reasoning_content and content.

Every supported format is one pair of tag sets around the reasoning ("<think>" ... "</think>", "[THINK]" ...
"[/THINK]", Granite's "Here is my thought process:" ... "Here is my response:"), so one small state machine
serves them all and a table says what differs: the tags, the tags that end reasoning implicitly and stay in
the content (Kimi's tool-call section), and where generation starts. gpt-oss's harmony channels
(openai_gptoss) are not a tag pair: that name is served by the harmony grammar of the `openai` tool parser.

Where generation starts is read from the prompt, not guessed. A template that opened the block
(DeepSeek R1's and QwQ's generation prompt ends with "<think>\\n") means the output starts inside the
reasoning; a template that already closed it (Qwen3 with enable_thinking=False appends
"<think>\\n\\n</think>\\n\\n") means nothing is reasoning; a generation prompt with neither means the model
opens the block itself if it reasons at all. Without a prompt each parser falls back to what vLLM assumes.

Whitespace at the edges of the reasoning is formatting: "<think>\\n...\\n</think>\\n\\n" gives reasoning
without those newlines and content from its first real character. A tail that could still become a tag is
held back, so no client ever sees half a tag. `parse(text)` runs the same machine on the whole text, so the
streamed and the whole-text results agree by construction; the tests check the machine against splits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tokworker.protocol.deltas import Delta

# Where the output starts: inside the reasoning (an opening tag may still be repeated), in content that
# may open a reasoning block, or in content that never will.
INSIDE, EXPECT, CONTENT = "inside", "expect", "content"
_REASONING = "reasoning"  # inside, after the optional opening tag was ruled in or out
_WHITESPACE = " \t\r\n"


class ReasoningParserError(ValueError):
    """An unknown reasoning parser name or unusable arguments."""


@dataclass(frozen=True)
class ReasoningFormat:
    starts: tuple[str, ...]
    ends: tuple[str, ...]
    implicit_ends: tuple[str, ...] = ()  # end the reasoning and begin the content (kept in it)
    without_prompt: str = INSIDE  # the start when no prompt is known (vLLM's assumption)
    open_prompt: str = EXPECT  # the start when the prompt neither opened nor closed a block
    # The characters that may begin a tag ending the reasoning (text without any cannot end it), and the
    # one character when they all begin with the same one (a str search is cheaper than a set test).
    end_firsts: frozenset = field(init=False, repr=False, compare=False)
    end_first: str = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        firsts = frozenset(tag[0] for tag in self.ends + self.implicit_ends)
        if not firsts.isdisjoint(_WHITESPACE):  # whitespace before an end tag is held as formatting
            raise ValueError("a tag ending the reasoning must not begin with whitespace")
        object.__setattr__(self, "end_firsts", firsts)
        object.__setattr__(self, "end_first", next(iter(firsts)) if len(firsts) == 1 else "")

    @property
    def special_tokens(self) -> tuple[str, ...]:
        """The tags this parser consumes. Implicit ends stay in the content, so they are kept only when
        the tool parser reading that content asks for them too."""
        return self.starts + self.ends


_THINK = ("<think>",), ("</think>",)

FORMATS = {
    # Qwen3 up to 2507 writes <think> itself; later templates open it in the prompt; enable_thinking=False
    # closes it there. vLLM treats output as reasoning until </think> when it cannot see the prompt.
    "qwen3": ReasoningFormat(*_THINK),
    # R1 always reasons; its template opens the block, older ones let the model write <think>.
    "deepseek_r1": ReasoningFormat(*_THINK, open_prompt=INSIDE),
    # V3.1's template writes <think> (thinking=True) or </think> after <｜Assistant｜>; thinking is off by default.
    "deepseek_v3": ReasoningFormat(*_THINK, without_prompt=EXPECT),
    "glm45": ReasoningFormat(*_THINK, without_prompt=EXPECT),
    "minimax_m2": ReasoningFormat(*_THINK, open_prompt=INSIDE),
    "kimi_k2": ReasoningFormat(*_THINK, implicit_ends=("<|tool_calls_section_begin|>",)),
    "seed_oss": ReasoningFormat(("<seed:think>",), ("</seed:think>",)),
    "mistral": ReasoningFormat(("[THINK]",), ("[/THINK]",), without_prompt=EXPECT),
    "granite": ReasoningFormat(("Here is my thought process:", "Here's my thought process:"),
                               ("Here is my response:", "Here's my response:"), without_prompt=EXPECT),
}


class HarmonyReasoningParser:
    """openai_gptoss: gpt-oss's harmony channels (analysis is reasoning, final is content). The channel
    grammar lives once, in the `openai` tool parser; this is its reasoning-only face. A stream that also
    asks for the `openai` tool parser needs only that one (TextStream drops this stage then)."""

    passthrough = False  # channels can change at any point
    steady_end = ""

    def __init__(self):
        from tokworker.parsers.tools import get_tool_parser
        self._channels = get_tool_parser("openai")
        self.special_tokens = self._channels.special_tokens
        self.feed = self._channels.feed
        self.finish = self._channels.finish

    def parse(self, text: str) -> tuple[str | None, str | None]:
        message = self._channels.parse_message(text)
        return message["reasoning_content"], message["content"]


def starting_mode(fmt: ReasoningFormat, prompt_text: str | None) -> str:
    """Where generation starts, from the end of the rendered prompt."""
    if prompt_text is None:
        return fmt.without_prompt
    tail = prompt_text.rstrip(_WHITESPACE)
    if any(tail.endswith(tag) for tag in fmt.starts):
        return INSIDE
    if any(tail.endswith(tag) for tag in fmt.ends):
        return CONTENT
    return fmt.open_prompt


def get_reasoning_parser(name: str, prompt_text: str | None = None, prompt_ids=None, tokenizer=None):
    """A fresh per-stream parser for the format vLLM calls `name`, aware of how the prompt ended.

    Give prompt_text, or prompt_ids with the tokenizer (only the prompt's tail is decoded)."""
    if name == "openai_gptoss":
        return HarmonyReasoningParser()
    fmt = FORMATS.get(name)
    if fmt is None:
        known = ", ".join(sorted([*FORMATS, "openai_gptoss"]))
        raise ReasoningParserError(f"unknown reasoning parser {name!r}; known: {known}")
    if prompt_text is None and prompt_ids is not None:
        if tokenizer is None:
            raise ReasoningParserError("prompt_ids need the tokenizer to be read")
        prompt_text = tokenizer.decode(list(prompt_ids[-64:]), skip_special_tokens=False)
    return ReasoningParser(fmt, starting_mode(fmt, prompt_text))


class ReasoningParser:
    """One stream's reasoning state: `feed(text) -> list[Delta]`, `finish() -> list[Delta]`, and the
    whole-text `parse(text) -> (reasoning, content)` (None for an empty part).

    `passthrough` turns True once the answer has begun and nothing is held: from then on every text is
    content, unchanged, and finish() adds nothing, so a caller may stop feeding the parser.
    `steady_end` is the character that begins every tag ending the reasoning while the parser is inside
    reasoning that has started with nothing held (else ""): then a text without that character, not ending
    in whitespace, is one reasoning delta of itself and changes no state, so a caller may skip feed()."""

    __slots__ = ("fmt", "special_tokens", "passthrough", "steady_end", "_initial", "_mode", "_steady", "_held",
                 "_held_blank", "_started", "_emitted_content", "_end_firsts", "_end_first")

    def __init__(self, fmt: ReasoningFormat, mode: str):
        self.fmt = fmt
        self.special_tokens = fmt.special_tokens
        self._initial = mode
        self._end_firsts, self._end_first = fmt.end_firsts, fmt.end_first
        self._mode = mode
        self._steady = None
        self.passthrough = False
        self.steady_end = ""
        self._held = ""          # text not yet decided (a possible tag, or whitespace at an edge)
        self._held_blank: list[str] = []  # whitespace held after _held, kept apart so a run of it is O(1) a step
        self._started = False    # the current section has shown a non-whitespace character
        self._emitted_content = False

    def parse(self, text: str) -> tuple[str | None, str | None]:
        fresh = ReasoningParser(self.fmt, self._initial)
        deltas = fresh.feed(text) + fresh.finish()
        reasoning = "".join(d.reasoning_content for d in deltas if d.reasoning_content)
        content = "".join(d.content for d in deltas if d.content)
        return reasoning or None, content or None

    def feed(self, text: str) -> list[Delta]:
        steady = self._steady  # the hot path: a section that has started, nothing held but whitespace
        if steady is CONTENT:
            return [Delta(content=text)] if text else []
        if steady is _REASONING and text:
            first = self._end_first
            if (first not in text) if first else self._end_firsts.isdisjoint(text):
                if text[-1] in _WHITESPACE or self._held_blank:
                    return self._plain_reasoning(text)
                return [Delta(reasoning_content=text)]
        if self._held_blank or not self._held.strip(_WHITESPACE):
            if self._holds_blank() and not text.strip(_WHITESPACE):
                self._held_blank.append(text)  # still only whitespace: the machine would hold it all
                self._steady = None
                self.steady_end = ""
                return []
        out: list[Delta] = []
        self._run(self._take_held() + text, out, final=False)
        mode, held = self._mode, self._held
        if mode is _REASONING and self._started and held and not held.strip(_WHITESPACE):
            self._held_blank.append(held)  # only whitespace waits: the steady path can go on from here
            self._held = held = ""
        self._steady = mode if (mode is CONTENT or mode is _REASONING) and self._started and not held else None
        self.passthrough = self._steady is CONTENT
        self.steady_end = self._end_first if self._steady is _REASONING and not self._held_blank else ""
        return out

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
        self.steady_end = ""
        return out

    def _holds_blank(self) -> bool:
        """Whether whitespace fed now would be held whole (nothing shown yet in this section)."""
        mode = self._mode
        return mode is INSIDE or mode is _REASONING or (mode is EXPECT and not self._emitted_content)

    def _take_held(self) -> str:
        held = self._held
        if self._held_blank:
            held += "".join(self._held_blank)
            self._held_blank.clear()
        self._held = ""
        return held

    # ------------------------------------------------------------------ the machine
    def _run(self, text: str, out: list[Delta], final: bool) -> None:
        self._held = ""
        while True:
            mode = self._mode
            if mode is CONTENT:
                self._content(text, out)
                return
            if mode is INSIDE:
                text = self._skip_opening_tag(text, final)
                if text is None:
                    return
                continue
            if mode is _REASONING:
                text = self._reasoning(text, out, final)
            else:
                text = self._expect(text, out, final)
            if text is None:
                return

    def _content(self, text: str, out: list[Delta]) -> None:
        if not self._started:
            text = text.lstrip(_WHITESPACE)
            if not text:
                return
            self._started = True
        if text:
            out.append(Delta(content=text))
            self._emitted_content = True

    def _skip_opening_tag(self, text: str, final: bool):
        """Generation starts inside: an opening tag the model repeats anyway is dropped."""
        body = text.lstrip(_WHITESPACE)
        for tag in self.fmt.starts:
            if body.startswith(tag):
                self._enter_reasoning()
                return body[len(tag):]
        if not final and any(tag.startswith(body) for tag in self.fmt.starts):
            self._held = text
            return None
        self._enter_reasoning()
        return text

    def _enter_reasoning(self) -> None:
        self._mode, self._started = _REASONING, False

    def _reasoning(self, text: str, out: list[Delta], final: bool):
        fmt = self.fmt
        found = _first_tag(text, fmt.ends + fmt.implicit_ends)
        if found is not None:
            index, tag = found
            self._emit_reasoning(text[:index].rstrip(_WHITESPACE), out)
            self._mode, self._started = CONTENT, False
            return text[index:] if tag in fmt.implicit_ends else text[index + len(tag):]
        if final:
            self._emit_reasoning(text.rstrip(_WHITESPACE), out)
            return None
        cut = len(text) - _partial_tag(text, fmt.ends + fmt.implicit_ends)
        cut = len(text[:cut].rstrip(_WHITESPACE))
        self._emit_reasoning(text[:cut], out)
        self._held = text[cut:]
        return None

    def _emit_reasoning(self, text: str, out: list[Delta]) -> None:
        if not self._started:
            text = text.lstrip(_WHITESPACE)
            self._started = bool(text)
        if text:
            out.append(Delta(reasoning_content=text))

    def _expect(self, text: str, out: list[Delta], final: bool):
        """Content that may open a reasoning block; whitespace before an opening tag at the very start is
        formatting, after real content it is content."""
        found = _first_tag(text, self.fmt.starts)
        if found is not None:
            index, tag = found
            before = text[:index]
            if before and (self._emitted_content or before.strip(_WHITESPACE)):
                out.append(Delta(content=before))
                self._emitted_content = True
            self._enter_reasoning()
            return text[index + len(tag):]
        cut = len(text) if final else len(text) - _partial_tag(text, self.fmt.starts)
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
