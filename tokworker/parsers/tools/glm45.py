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

from .base import ToolParser
from .textargs import TextValuedArgs, marker_prefixes

_OPEN = regex.compile(r"<tool_call>\s*(?P<fname>[^\s<]{1,256})\s*(?=<)")
_PARAM = regex.compile(r"\s*<arg_key>(?P<key>[^<]{0,256})</arg_key>\s*<arg_value>")
_CLOSE = regex.compile(r"\s*</tool_call>")
_VALUE_END = regex.compile(r"(?P<own></arg_value>)")
_VALUE_END_PREFIXES, _VALUE_END_HOLD = marker_prefixes("</arg_value>")


class Glm45ToolParser(TextValuedArgs, ToolParser):
    name = "glm45"
    special_tokens = ("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")
    starts = ("<tool_call>",)
    untyped_as_json = True

    def _opening(self, final: bool) -> bool:
        m = self._match(_OPEN, final)
        if m is None:
            return False
        if m:
            self._consume(m.end())
            self._open_call(m["fname"])
            self._begin_args(self._params)
            return True
        return self._reject_opening(len("<tool_call>"))

    def _params(self, final: bool) -> bool:
        param = self._match(_PARAM, final)
        if param:
            self._consume(param.end())
            self._begin_value(param["key"].strip(), _VALUE_END, _VALUE_END_PREFIXES, _VALUE_END_HOLD)
            return True
        close = self._match(_CLOSE, final)
        if close:
            self._consume(close.end())
            self._end_args()
            self._mode = self._content_mode
            return True
        if param is None or close is None:
            return False
        self._end_args()
        self._mode = self._content_mode
        return True
