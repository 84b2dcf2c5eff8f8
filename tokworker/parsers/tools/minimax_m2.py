"""minimax_m2: MiniMax-M2 (XML calls with text values, several per section).

    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    <parameter name="days">3</parameter>
    </invoke>
    </minimax:tool_call>

The template writes strings as they are and other values as JSON, so a value is typed by the tool's
schema, else JSON when it parses, else a string (as glm45). One "\n" after a value's tag and one before
its closing tag are formatting, as vLLM reads them.
"""

from __future__ import annotations

import regex

from .base import ToolParser
from .textargs import TextValuedArgs, marker_prefixes

OPEN, CLOSE = "<minimax:tool_call>", "</minimax:tool_call>"
_INVOKE = r'\s*<invoke name="(?P<fname>[^"\n<>]{1,256})">'
_FIRST = regex.compile(regex.escape(OPEN) + _INVOKE)
_NEXT = regex.compile(_INVOKE)
_SECTION_END = regex.compile(r"\s*" + regex.escape(CLOSE))


class MinimaxM2ToolParser(TextValuedArgs, ToolParser):
    name = "minimax_m2"
    special_tokens = (OPEN, CLOSE)
    starts = (OPEN,)
    untyped_as_json = True
    strip_value_newlines = True
    param_open = regex.compile(r'\s*<parameter name="(?P<key>[^"\n<>]{1,256})">')
    value_end = regex.compile(r"(?P<own></parameter>)|<parameter name=|</invoke>")
    value_end_prefixes, value_end_hold = marker_prefixes("</parameter>", "<parameter name=", "</invoke>")
    call_end = regex.compile(r"\s*</invoke>")

    def _opening(self, final: bool) -> bool:
        return self._invoke(_FIRST, final, len(OPEN))

    def _mode_after_call(self, end):
        return self._section_mode

    def _section_mode(self, final: bool) -> bool:
        """After an </invoke>: another invoke, or the section's end; anything else is content."""
        end = self._match(_SECTION_END, final)
        if end is None:
            return False
        if end:
            self._consume(end.end())
            self._mode = self._content_mode
            return True
        return self._invoke(_NEXT, final, 0)
