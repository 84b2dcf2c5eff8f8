"""qwen3_coder: Qwen3-Coder, Nemotron 3 Nano (XML calls with text values).

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

One "\\n" after <parameter=K> and one before </parameter> are formatting. Values are typed by the tool's
schema (see textargs.py); an untyped value is a string. Like vLLM, a <function=...> block is accepted
without its <tool_call> wrapper, and a value may end at the next <parameter= or </function>.
"""

from __future__ import annotations

import regex

from .base import ToolParser
from .textargs import TextValuedArgs, marker_prefixes

_OPEN = regex.compile(r"(?:<tool_call>\s*)?<function=(?P<fname>[^>\n<]{1,256})>")
_PARAM = regex.compile(r"\s*<parameter=(?P<key>[^>\n<]{1,256})>")
_FUNCTION_END = regex.compile(r"\s*(?:(?P<function></function>)|</tool_call>)")
_CLOSE = regex.compile(r"\s*</tool_call>")
_VALUE_END = regex.compile(r"(?P<own></parameter>)|<parameter=|</function>")
_VALUE_END_PREFIXES, _VALUE_END_HOLD = marker_prefixes("</parameter>", "<parameter=", "</function>")


class Qwen3CoderToolParser(TextValuedArgs, ToolParser):
    name = "qwen3_coder"
    special_tokens = ("<tool_call>", "</tool_call>")
    starts = ("<tool_call>", "<function=")
    strip_value_newlines = True

    def _opening(self, final: bool) -> bool:
        m = self._match(_OPEN, final)
        if m is None:
            return False
        if m and m["fname"].strip():
            self._consume(m.end())
            self._open_call(m["fname"].strip())
            self._begin_args(self._params)
            return True
        return self._reject_opening(len("<tool_call>" if self._buf.startswith("<tool_call>") else "<function="))

    def _params(self, final: bool) -> bool:
        param = self._match(_PARAM, final)
        if param:
            self._consume(param.end())
            self._begin_value(param["key"].strip(), _VALUE_END, _VALUE_END_PREFIXES, _VALUE_END_HOLD)
            return True
        end = self._match(_FUNCTION_END, final)
        if end:
            self._consume(end.end())
            self._end_args()
            self._mode = self._closing if end["function"] else self._content_mode
            return True
        if param is None or end is None:
            return False
        # the end of the stream, or text that is no parameter: the call ends at this clean boundary
        self._end_args()
        self._mode = self._content_mode
        return True

    def _closing(self, final: bool) -> bool:
        return self._expect_closing(_CLOSE, final)
