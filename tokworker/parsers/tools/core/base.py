"""The streaming core every tool-call format shares: a buffer, a current mode, and OpenAI deltas out.

A format is a small state machine. Each mode is a method `mode(final) -> bool` that looks at the
unconsumed text (`self._buf`), consumes what it can decide, emits deltas, and returns True when it made
progress (the loop runs it, or the next mode, again) or False when it needs more text. `final=True`
means no more text will come: modes must then decide everything.

Text before a call is committed is never consumed: if the call's opening turns out malformed, the text
is released as content, so nothing is dropped. A call is committed once its name is complete and its
arguments have begun; from then on its arguments stream as they arrive, and only validated JSON text
is sent. If the arguments break off (end of stream) the call keeps what was streamed, as OpenAI's own
API does on finish_reason "length"; text that breaks the call's syntax is released as content.

`parse(text)` runs a fresh parser over the whole text, so whole and streamed results agree by
construction; the tests check that the result is the same however the text is split.
"""

from __future__ import annotations

import re
from types import MethodType

from tokworker.protocol.deltas import Delta

from .jsonargs import HEADER_LIMIT, JsonArgs
from .shapes import assemble, tool_schemas

FEED_PIECE = 4096


class ToolParser(JsonArgs):
    """Base of every format: feed/finish/parse, the loop over modes, the content scan (its deltas are
    emit.py's, a call's arguments jsonargs.py's)."""

    name = ""
    special_tokens: tuple[str, ...] = ()
    starts: tuple[str, ...] = ()  # markers that may open a call, searched for in content
    drop_rejected_markers = False  # a marker that opens no call is a control token: never content
    stray_markers: tuple[str, ...] = ()  # closing markers (also in `starts`) dropped when met outside a call
    # True while plain content is scanned (or passed through) with nothing held, after some content and not
    # next to a call: a text in which `first_marker` (a search; None for a format with no markers) finds
    # nothing and that does not end in whitespace is then content, one delta of itself, and changes no state
    # (TextStream emits it without feed(), per token).
    steady_content = False
    first_marker = None
    reads_reasoning = False  # splits reasoning from content itself (harmony's channels): needs no reasoning parser
    # The markers with which the model begins to act: a call, or a section of calls. Written inside a think
    # block the model never closed, one ends the reasoning there (where the reasoning format says its models
    # do that: reasoning/formats.py). None: the `starts` that are control tokens and open something.
    call_openings: tuple[str, ...] | None = None

    def __init__(self, tools: list[dict] | None = None):
        super().__init__()
        self._tools = tools
        self._schemas = tool_schemas(tools)
        self._buf = ""
        self._probe: tuple[ToolParser, str] | None = None  # opens_call's undecided parser and the text it read
        self._mode = self._initial_mode()

    def __init_subclass__(cls, **kwargs):
        """Compile each format's marker search once, for all its streams."""
        super().__init_subclass__(**kwargs)
        if cls.starts:
            ordered = sorted(cls.starts, key=len, reverse=True)
            cls._start_re = re.compile("|".join(re.escape(s) for s in ordered))
            cls._start_prefixes = frozenset(s[:k] for s in cls.starts for k in range(1, len(s)))
            cls._start_first = re.compile("[" + "".join(re.escape(c) for c in {s[0] for s in cls.starts}) + "]")
            cls.first_marker = cls._start_first.search
            cls._start_hold = max(map(len, cls.starts)) - 1

    # ---- public surface ----

    def feed(self, text: str) -> list[Delta]:
        if self._args_open:  # inside a call's arguments with nothing buffered: scan the text where it is
            self._args_open, self.string_args = False, -1
            if self._scan_args(text):
                self._run(False)
        else:
            for start in range(0, len(text), FEED_PIECE):  # a huge text in pieces: consuming copies the buffer,
                self._buf += text[start:start + FEED_PIECE]  # so it must stay short (parsing is split-invariant)
                while self._mode(False):
                    pass
        out = self._take()
        mode = self._mode
        self.steady_content = (not self._buf and not self._held_ws and not self._after_call and self._content_seen
                               and not self._args_open and (mode == self._content_mode
                                                            or mode == self._passthrough_mode))
        return out

    def finish(self) -> list[Delta]:
        self.steady_content = False
        self._args_open, self.string_args, self._probe = False, -1, None
        self._run(True)
        if self._held_ws and not self._after_call:
            self._emit_content(self._held_ws)
            self._held_ws = ""
        self._drop_modes()
        return self._take()

    def _drop_modes(self) -> None:
        """Modes are bound methods, each a reference cycle through self: once the stream has finished,
        replace them so the parser is freed by refcounting, not left for the cyclic collector."""
        state = self.__dict__
        for key, value in state.items():
            if type(value) is MethodType and value.__self__ is self:
                state[key] = None
        self._mode = _finished_mode

    def parse(self, text: str) -> tuple[str | None, list[dict]]:
        """The whole model output -> (content or None, tool calls in OpenAI's format)."""
        message = self.parse_message(text)
        return message["content"], message["tool_calls"]

    def parse_message(self, text: str) -> dict:
        """The whole model output -> {"content", "reasoning_content", "tool_calls"} (None when absent)."""
        fresh = type(self)(self._tools)
        return assemble(fresh.feed(text) + fresh.finish())

    def opens_call(self, text: str, final: bool) -> bool | None:
        """Whether `text`, which begins with one of the call openings, is a call: True once a fresh parser
        commits one there, False once it gives the opening back as text (a mention of the marker, a header
        that breaks), None while it still holds the opening undecided. `final`: no more text follows. Text
        whose opening is decided is decided for good, however much text follows (parsing is split-invariant).

        >>> from tokworker.parsers.tools import get_tool_parser
        >>> hermes = get_tool_parser("hermes")
        >>> hermes.opens_call('<tool_call>\\n{"name": "f', False)  # the name may still go on
        >>> hermes.opens_call('<tool_call>\\n{"name": "f", "arguments": {', False)
        True
        >>> hermes.opens_call("<tool_call> is the tag I would use", False), hermes.opens_call("<tool_call>", True)
        (False, False)
        """
        # the same opening asked again with more text after it (a stream's next token): read only the new text
        probe, seen = self._probe if self._probe is not None and text.startswith(self._probe[1]) \
            else (type(self)(self._tools), "")
        self._probe = None
        deltas = probe.feed(text[len(seen):]) + (probe.finish() if final else [])
        if deltas:
            return deltas[0].tool_calls is not None
        if final:
            return False
        # still holding text, or inside a section whose first call is yet to come: not known yet
        if probe._buf or probe._mode != probe._content_mode:
            self._probe = (probe, text)
            return None
        return False

    # ---- the loop ----

    def _initial_mode(self):
        return self._content_mode

    def _run(self, final: bool) -> None:
        while self._mode(final):
            pass

    def _consume(self, n: int) -> None:
        self._buf = self._buf[n:]

    def _match(self, pattern, final: bool, pos: int = 0):
        """Anchored match of pattern at pos: the Match when complete, None while the text so far
        could still become one (never at final), False when it cannot."""
        m = pattern.match(self._buf, pos, partial=not final)
        if m is None:
            return False
        if m.partial:
            return None if len(self._buf) - pos <= HEADER_LIMIT else False
        return m

    # ---- content ----

    def _content_mode(self, final: bool) -> bool:
        """Plain text: release it, holding back only a tail that could still start a marker."""
        buf = self._buf
        if not buf:
            return False
        if not self.starts or self._start_first.search(buf) is None:  # the common case: plain text
            self._content(buf)
            self._buf = ""
            return False
        m = self._start_re.search(buf)
        if m:
            if m.start():
                self._content(buf[: m.start()])
                self._consume(m.start())
            self._mode = self._opening
            return True
        keep = 0 if final else self._held_marker_prefix(buf)
        if len(buf) > keep:
            self._content(buf[: len(buf) - keep])
            self._consume(len(buf) - keep)
        return False

    def _passthrough_mode(self, final: bool) -> bool:
        """Everything from here on is content (formats whose calls may only open the output)."""
        if self._buf:
            self._content(self._buf)
            self._buf = ""
        return False

    def _held_marker_prefix(self, buf: str) -> int:
        prefixes = self._start_prefixes
        for m in self._start_first.finditer(buf, max(0, len(buf) - self._start_hold)):
            if buf[m.start():] in prefixes:
                return len(buf) - m.start()
        return 0

    def _opening(self, final: bool) -> bool:  # pragma: no cover - every format with starts defines it
        raise NotImplementedError

    def _pass_until(self, end: str, final: bool, as_reasoning: bool, keep_end: bool, then=None) -> bool:
        """A mode's body: text up to the marker `end` is content (or reasoning), never calls; then
        scanning resumes after it (keep_end: the marker stays in that text) in the mode `then`, by
        default where it resumes after a call. Holds back only a tail that may still become `end`."""
        buf = self._buf
        at = buf.find(end)
        if at < 0:
            held = 0 if final else next((k for k in range(min(len(end) - 1, len(buf)), 0, -1)
                                         if buf.endswith(end[:k])), 0)
            at = len(buf) - held
        found = buf.startswith(end, at)
        text = buf[: at + (len(end) if found and keep_end else 0)]
        if as_reasoning:
            self._reasoning(text)
        elif text:
            self._content(text)
        self._consume(at + (len(end) if found else 0))
        if not found:
            return False
        self._mode = then or self._resume_mode()
        return True

    def _dropped_stray_marker(self) -> bool:
        """A closing marker met outside a call (one of stray_markers) is a control token with nothing to
        close: drop it and scan on. False when the buffer does not start with one."""
        stray = next((m for m in self.stray_markers if self._buf.startswith(m)), None)
        if stray is None:
            return False
        self._consume(len(stray))
        self._mode = self._content_mode
        return True

    def _reject_opening(self, n: int) -> bool:
        """The text at the buffer's start is not a call: its first n characters are content (or dropped,
        for formats whose markers are control tokens that no content can hold)."""
        if n:
            if not self.drop_rejected_markers:
                self._content(self._buf[:n])
            self._consume(n)
        self._mode = self._resume_mode()
        return True

    def _resume_mode(self):
        """Where scanning continues after a call or a rejected opening."""
        return self._content_mode

    def _expect_closing(self, pattern, final: bool, then=None) -> bool:
        """After a complete call: consume its closing text (pattern) if it is there; anything else,
        including a closing cut off by the end of the stream, is content."""
        m = self._match(pattern, final)
        if m is None:
            return False
        if m:
            self._consume(m.end())
        self._close_call()
        self._mode = then or self._resume_mode()
        return True


def _finished_mode(final: bool) -> bool:
    """The mode of a finished parser: finishing again is a no-op, more text is a caller error."""
    if final:
        return False
    raise ValueError("this tool parser has finished; use a new parser for each stream")
