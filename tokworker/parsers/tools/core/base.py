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

from tokworker.protocol.deltas import Delta, FunctionDelta, ToolCallDelta

from .callids import call_id
from .jsonscan import STRING_PIECE, JsonScanner
from .literals import LiteralEnd, literal_json

# An opening (marker + call header) longer than this is not a call: stop holding it back.
HEADER_LIMIT = 1024
FEED_PIECE = 4096
_WHITESPACE = " \t\n\r"


class ToolParser:
    """Base of every format: feed/finish/parse, the content scan, JSON argument streaming."""

    name = ""
    special_tokens: tuple[str, ...] = ()
    starts: tuple[str, ...] = ()  # markers that may open a call, searched for in content
    id_style = "openai"  # the shape of the call ids this format issues (see callids.py)
    drop_rejected_markers = False  # a marker that opens no call is a control token: never content
    stray_markers: tuple[str, ...] = ()  # closing markers (also in `starts`) dropped when met outside a call
    # The index of the call whose JSON arguments are inside a string, with nothing buffered, else -1: a
    # text that `is_string_piece` matches whole is then more of those arguments, one fragment of itself,
    # and changes no state, so a caller may emit it without feed() (TextStream does, per token).
    string_args = -1
    is_string_piece = STRING_PIECE.fullmatch  # characters and whole escapes: what leaves a JSON string open
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
        self._tools = tools
        self._schemas = tool_schemas(tools)
        self._buf = ""
        self._out: list[Delta] = []
        self._last_args: FunctionDelta | None = None  # open args fragment to append to, this feed
        self._held_ws = ""  # whitespace ending the content so far: dropped if a call follows
        self._after_call = False  # whitespace right after a call is formatting, not content
        self._content_seen = False  # whitespace after a call separates content only if some came before
        self._index = -1
        self._call_name = ""
        self._scanner: JsonScanner | None = None
        self._after_args = None  # the mode to enter once the arguments object closes
        self._args_open = False  # streaming JSON arguments with nothing buffered: feed scans text directly
        self.called = False
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

    def _take(self) -> list[Delta]:
        out = self._out
        if not out:
            return []
        self._out = []
        self._last_args = None
        return out

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

    # ---- emission ----

    def _content(self, text: str) -> None:
        """Content text. Whitespace next to a call is formatting: dropped before a call, after the last
        one and at the start of the content; kept where it separates content on both sides of a call."""
        body = text.rstrip(_WHITESPACE)
        if not body:
            self._held_ws += text
            return
        lead, trail = self._held_ws, text[len(body):]
        if self._after_call:
            self._after_call = False
            if not self._content_seen:
                lead, body = "", body.lstrip(_WHITESPACE)
        self._held_ws = trail
        self._emit_content(lead + body)
        self._content_seen = True

    def _emit_content(self, text: str) -> None:
        out = self._out
        if out and out[-1].content is not None:
            out[-1].content += text
        else:
            out.append(Delta(content=text))
        self._last_args = None

    def _reasoning(self, text: str) -> None:
        if not text:
            return
        out = self._out
        if out and out[-1].reasoning_content is not None:
            out[-1].reasoning_content += text
        else:
            out.append(Delta(reasoning_content=text))
        self._last_args = None

    def _open_call(self, name: str, model_id: str | None = None) -> None:
        """model_id: the id the model wrote for the call, used as it is when the format's ids are the
        model's own (its template links results to that text)."""
        self._held_ws = ""
        self._after_call = False
        self._index += 1
        self._call_name = name
        self.called = True
        function = FunctionDelta(name=name, arguments="")
        header = ToolCallDelta(index=self._index, id=model_id or call_id(self.id_style, name, self._index),
                               type="function", function=function)
        self._out.append(Delta(tool_calls=[header]))
        self._last_args = function  # arguments that follow at once join the header

    def _args(self, fragment: str) -> None:
        if not fragment:
            return
        if self._last_args is not None:
            self._last_args.arguments += fragment
            return
        function = FunctionDelta(arguments=fragment)
        self._out.append(Delta(tool_calls=[ToolCallDelta(index=self._index, function=function)]))
        self._last_args = function

    def _close_call(self) -> None:
        self._after_call = True
        self._held_ws = ""

    # ---- JSON arguments ----

    def _stream_json_args(self, after) -> None:
        """Commit point passed: stream the arguments object at the buffer's start, then enter `after`."""
        self._after_args = after
        self._mode = self._args_kind_mode

    def _args_kind_mode(self, final: bool) -> bool:
        """The character after the arguments' "{" says how they are written: JSON, streamed as it comes,
        or a Python literal ({'city': 'Paris'}: Apriel's template renders dict arguments so), read whole
        and sent as JSON."""
        buf = self._buf
        if buf[:1] == "{":
            rest = buf[1:].lstrip(_WHITESPACE)
            if not rest and not final and len(buf) <= HEADER_LIMIT:
                return False
            literal = rest[:1] == "'"
        elif not buf and not final:
            return False
        else:
            literal = False
        if literal:
            self._literal_end = LiteralEnd(0, bracketed=True)
            self._mode = self._literal_args_mode
        else:
            self._scanner = JsonScanner()
            self._mode = self._json_args_mode
        return True

    def _literal_args_mode(self, final: bool) -> bool:
        end = self._literal_end.find(self._buf, final)
        if end is None:
            return self._break_call() if final else False  # cut off: nothing was sent, the text is no call
        arguments = literal_json(self._buf[:end])
        if arguments is None or arguments[0] != "{":
            return self._break_call()
        self._args(arguments)
        self._consume(end)
        self._mode = self._after_args
        return True

    def _json_args_mode(self, final: bool) -> bool:
        buf = self._buf
        if not buf:
            return False
        self._buf = ""
        return self._scan_args(buf)

    def _scan_args(self, text: str) -> bool:
        """Stream the arguments text that opens `text` (taken from the buffer's start); what follows the
        object, if it closed or broke, goes back to the buffer. The mode's return value."""
        scanner = self._scanner
        end = scanner.scan(text, 0)
        self._args(text[:end])
        if scanner.done:
            self._buf = text[end:]
            self._mode = self._after_args
            return True
        if scanner.error:
            self._buf = text[end:]
            return self._break_call()
        self._args_open = True  # all of it was arguments: the next text may skip the buffer
        if scanner.in_string:
            self.string_args = self._index
        return False

    def _break_call(self) -> bool:
        """The call's syntax broke after it was committed: it keeps what was sent; the rest is content."""
        self._close_call()
        self._mode = self._resume_mode()
        return True

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


def tool_schemas(tools: list[dict] | None) -> dict[str, dict]:
    """The request's OpenAI tools list -> {function name: parameters schema}."""
    if tools is None:
        return {}
    if not isinstance(tools, list):
        raise ValueError(f"tools must be a list of OpenAI tool objects, not {type(tools).__name__}")
    schemas = {}
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ValueError(f"each tool needs a function with a string name, got {tool!r:.200}")
        parameters = function.get("parameters")
        schemas[function["name"]] = parameters if isinstance(parameters, dict) else {}
    return schemas


def assemble(deltas: list[Delta]) -> dict:
    """Streamed deltas -> one message: {"content", "reasoning_content", "tool_calls"}."""
    content, reasoning, calls = [], [], {}
    for delta in deltas:
        if delta.content is not None:
            content.append(delta.content)
        if delta.reasoning_content is not None:
            reasoning.append(delta.reasoning_content)
        for part in delta.tool_calls or ():
            call = calls.setdefault(part.index, {"id": None, "type": "function",
                                                 "function": {"name": None, "arguments": ""}})
            if part.id is not None:
                call["id"] = part.id
            if part.function is not None:
                if part.function.name is not None:
                    call["function"]["name"] = part.function.name
                call["function"]["arguments"] += part.function.arguments or ""
    return {"content": "".join(content) or None, "reasoning_content": "".join(reasoning) or None,
            "tool_calls": [calls[i] for i in sorted(calls)]}
