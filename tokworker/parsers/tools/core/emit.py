"""What a tool parser sends: OpenAI deltas for content (whitespace next to a call is formatting), reasoning,
a call's header and its argument fragments, merged into the delta before them where they can be.

The loop that decides what to send is base.py's; this is the output side only.
"""

from __future__ import annotations

from tokworker.protocol.deltas import Delta, FunctionDelta, ToolCallDelta

from .callids import call_id

WHITESPACE = " \t\n\r"


class Emitter:
    """The deltas of one stream, gathered per feed (`_take`), and the calls opened so far."""

    id_style = "openai"  # the shape of the call ids this format issues (see callids.py)

    def __init__(self):
        self._out: list[Delta] = []
        self._last_args: FunctionDelta | None = None  # open args fragment to append to, this feed
        self._held_ws = ""  # whitespace ending the content so far: dropped if a call follows
        self._after_call = False  # whitespace right after a call is formatting, not content
        self._content_seen = False  # whitespace after a call separates content only if some came before
        self._index = -1
        self._call_name = ""
        self.called = False

    def _take(self) -> list[Delta]:
        out = self._out
        if not out:
            return []
        self._out = []
        self._last_args = None
        return out

    def _content(self, text: str) -> None:
        """Content text. Whitespace next to a call is formatting: dropped before a call, after the last
        one and at the start of the content; kept where it separates content on both sides of a call."""
        body = text.rstrip(WHITESPACE)
        if not body:
            self._held_ws += text
            return
        lead, trail = self._held_ws, text[len(body):]
        if self._after_call:
            self._after_call = False
            if not self._content_seen:
                lead, body = "", body.lstrip(WHITESPACE)
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
