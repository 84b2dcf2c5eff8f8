"""Reasoning parsers by vLLM's names: split a model's answer into reasoning_content and content.

Every supported format is a pair of tag sets around the reasoning ("<think>" ... "</think>", "[THINK]" ...
"[/THINK]", Granite's "Here is my thought process:" ... "Here is my response:", Command's
<|START_THINKING|> ...), so one small state machine (machine.py) serves them all and a table (formats.py)
says what differs. gpt-oss's harmony channels (openai_gptoss) are not a tag pair: that name is served by
the harmony grammar of the `openai` tool parser. Where generation starts is read from the prompt's last
turn, not guessed (prompt.py); without a prompt each parser falls back to what vLLM assumes.

A reasoning block ends where the model ends it: at its end tag, at a tag that begins the content (Kimi's
tool-call section, DeepSeek V4's DSML calls), or, with a tool parser, where the model opens a tool call
inside a block it never closed (Qwen3 with its hermes calls and Qwen3.5 with its XML ones both do):
get_reasoning_parser(..., tool_parser=parser) makes that parser's call openings end the reasoning, in the
stream and in `parse` alike, wherever the format says its models act from inside their thinking
(`ReasoningFormat.tool_calls_end`; formats.py gives each format's reason). An opening ends it only where
the tool parser reads a call after it (`opens_call`; vLLM's qwen3 parser looks for <function= after
<tool_call> to the same end): the marker mentioned in the reasoning ("I will wrap it in <tool_call>")
stays reasoning.
"""

from __future__ import annotations

from tokworker.protocol.deltas import Delta

from .formats import ALIASES, CONTENT, EXPECT, FORMATS, INSIDE, ReasoningFormat
from .machine import ReasoningParser
from .prompt import CONTENT_TEXT, INSIDE_TEXT, last_turn_ids, starting_mode

REASONING_PARSERS = tuple(sorted([*FORMATS, *ALIASES, "openai_gptoss"]))


class ReasoningParserError(ValueError):
    """An unknown reasoning parser name or unusable arguments."""


class HarmonyReasoningParser:
    """openai_gptoss: gpt-oss's harmony channels (analysis is reasoning, final is content). The channel
    grammar lives once, in the `openai` tool parser; this is its reasoning-only face. A stream that also
    asks for the `openai` tool parser needs only that one (it `reads_reasoning`: TextStream builds no
    reasoning parser in front of it)."""

    passthrough = False  # channels can change at any point
    steady_end = steady_markup = ""

    def __init__(self):
        from tokworker.parsers.tools import get_tool_parser
        self._channels = get_tool_parser("openai")
        self.special_tokens = self._channels.special_tokens
        self.feed = self._channels.feed
        self.finish = self._channels.finish

    def parse(self, text: str) -> tuple[str | None, str | None]:
        message = self._channels.parse_message(text)
        return message["reasoning_content"], message["content"]


class AppendThinkParser:
    """minimax_m2_append_think: nothing is split off; the whole answer is content, and when the prompt
    opened the think block the content begins with that opening tag, so a client that reads think blocks
    inline (MiniMax's recommended use for interleaved thinking) sees the block whole. The one format whose
    content carries its tags: asking for them is what this name means."""

    __slots__ = ("fmt", "special_tokens", "passthrough", "steady_end", "steady_markup", "_initial", "_prefix")

    def __init__(self, fmt: ReasoningFormat, mode: str):
        self.fmt, self._initial = fmt, mode
        self.special_tokens = fmt.special_tokens
        self._prefix = fmt.append_think if mode in (INSIDE, INSIDE_TEXT) else ""
        self.passthrough = not self._prefix
        self.steady_end = self.steady_markup = ""

    def feed(self, text: str) -> list[Delta]:
        if not text:
            return []
        if self._prefix:
            text, self._prefix, self.passthrough = self._prefix + text, "", True
        return [Delta(content=text)]

    def finish(self) -> list[Delta]:
        return []

    def parse(self, text: str) -> tuple[str | None, str | None]:
        fresh = AppendThinkParser(self.fmt, self._initial)
        return None, "".join(d.content for d in fresh.feed(text)) or None


def tool_openers(tool_parser, fmt: ReasoningFormat) -> tuple[str, ...]:
    """The markers with which `tool_parser` sees its model begin to act (its `call_openings`; by default its
    `starts` that are control tokens and neither close nor continue something), when the format lets a
    tool call end its reasoning; none that would clash with the format's own tags.

    >>> from tokworker.parsers.tools import get_tool_parser
    >>> tool_openers(get_tool_parser("hermes"), FORMATS["qwen3"])
    ('<tool_call>',)
    >>> tool_openers(get_tool_parser("kimi_k2"), FORMATS["kimi_k2"])  # the section's is the format's own end
    ('<|tool_call_begin|>',)
    >>> tool_openers(get_tool_parser("granite"), FORMATS["granite"])
    ()
    """
    if tool_parser is None or not fmt.tool_calls_end:
        return ()
    openings = getattr(tool_parser, "call_openings", None)
    if openings is None:
        markers, strays = set(getattr(tool_parser, "special_tokens", ())), getattr(tool_parser, "stray_markers", ())
        openings = tuple(start for start in getattr(tool_parser, "starts", ())
                         if start in markers and start not in strays and "end" not in start.lower())
    tags = fmt.starts + fmt.ends + fmt.implicit_ends + fmt.answer_starts + fmt.answer_ends
    return tuple(start for start in openings if start[0] not in " \t\r\n"
                 and not any(start.startswith(tag) or tag.startswith(start) for tag in tags))


def get_reasoning_parser(name: str, prompt_text: str | None = None, prompt_ids=None, tokenizer=None,
                         tool_parser=None):
    """A fresh per-stream parser for the format vLLM calls `name`, aware of how the prompt ended.

    Give prompt_text, or prompt_ids with the tokenizer (only the prompt's last turn is decoded: the ids
    after its last special token). tool_parser: the stream's tool parser, whose call openings end an
    unclosed block where the format allows it.

    >>> parser = get_reasoning_parser("qwen3", prompt_text="<|im_start|>assistant\\n")
    >>> parser.feed("<think>\\nThe user greets.")
    [Delta(content=None, reasoning_content='The user greets.', tool_calls=None)]
    >>> parser.feed("\\n</think>\\n\\nHel")
    [Delta(content='Hel', reasoning_content=None, tool_calls=None)]
    >>> parser.feed("lo!"), parser.finish()
    ([Delta(content='lo!', reasoning_content=None, tool_calls=None)], [])

    A prompt that opened the block (Qwen3's template with thinking forced on) starts the parser inside it:

    >>> inside = get_reasoning_parser("qwen3", prompt_text="<|im_start|>assistant\\n<think>\\n")
    >>> inside.parse("Hmm.\\n</think>\\n\\nHello!")
    ('Hmm.', 'Hello!')
    """
    if name == "openai_gptoss":
        return HarmonyReasoningParser()
    fmt = FORMATS.get(ALIASES.get(name, name)) if isinstance(name, str) else None
    if fmt is None:
        raise ReasoningParserError(f"unknown reasoning parser {name!r}; known: {', '.join(REASONING_PARSERS)}")
    if prompt_text is None and prompt_ids is not None:
        if tokenizer is None:
            raise ReasoningParserError("prompt_ids need the tokenizer to be read")
        prompt_text = tokenizer.decode(last_turn_ids(prompt_ids, tokenizer, fmt), skip_special_tokens=False)
    mode = starting_mode(fmt, prompt_text)
    if fmt.append_think:
        return AppendThinkParser(fmt, mode)
    openers = tool_openers(tool_parser, fmt)
    return ReasoningParser(fmt, mode, openers, tool_parser.opens_call if openers else None)


__all__ = ["CONTENT", "CONTENT_TEXT", "EXPECT", "FORMATS", "INSIDE", "INSIDE_TEXT", "REASONING_PARSERS",
           "ReasoningFormat", "ReasoningParser", "ReasoningParserError", "get_reasoning_parser",
           "starting_mode", "tool_openers"]
