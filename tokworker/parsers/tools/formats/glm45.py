"""glm45: GLM-4.5, GLM-4.6 (XML calls with text values).

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    </tool_call>

The template writes string values as they are and other values as JSON, so a value is a string when
the tool's schema says so, else JSON when it parses (as vLLM's glm45 parser does), else a string.
"""

from __future__ import annotations

import regex

from ..core.base import ToolParser
from ..core.textargs import TextValuedArgs, marker_prefixes

_OPEN = regex.compile(r"<tool_call>\s*(?P<fname>[^\s<]{1,256})\s*(?=<)")


class Glm45ToolParser(TextValuedArgs, ToolParser):
    name = "glm45"
    special_tokens = ("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")
    starts = ("<tool_call>",)
    untyped_as_json = True
    param_open = regex.compile(r"\s*<arg_key>(?P<key>[^<]{0,256})</arg_key>\s*<arg_value>")
    value_end = regex.compile(r"(?P<own></arg_value>)")
    value_end_prefixes, value_end_hold = marker_prefixes("</arg_value>")
    call_end = regex.compile(r"\s*</tool_call>")

    def _opening(self, final: bool) -> bool:
        m = self._match(_OPEN, final)
        if m is None:
            return False
        if m:
            self._consume(m.end())
            self._open_call(m["fname"])
            self._begin_args()
            return True
        return self._reject_opening(len("<tool_call>"))
