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

from ..core.invokes import InvokeSectionToolParser
from ..core.textargs import marker_prefixes

OPEN, CLOSE = "<minimax:tool_call>", "</minimax:tool_call>"


class MinimaxM2ToolParser(InvokeSectionToolParser):
    name = "minimax_m2"
    special_tokens = (OPEN, CLOSE)
    starts = (OPEN,)
    section_open = regex.escape(OPEN)
    invoke_open = r'<invoke name="(?P<fname>[^"\n<>]{1,256})">'
    section_close = regex.escape(CLOSE)
    untyped_as_json = True
    strip_value_newlines = True
    param_open = regex.compile(r'\s*<parameter name="(?P<key>[^"\n<>]{1,256})">')
    value_end = regex.compile(r"(?P<own></parameter>)|<parameter name=|</invoke>")
    value_end_prefixes, value_end_hold = marker_prefixes("</parameter>", "<parameter name=", "</invoke>")
    call_end = regex.compile(r"\s*</invoke>")
