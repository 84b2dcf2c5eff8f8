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

from ..core.base import ToolParser
from ..core.textargs import TextValuedArgs, marker_prefixes


class Qwen3CoderToolParser(TextValuedArgs, ToolParser):
    name = "qwen3_coder"
    special_tokens = ("<tool_call>", "</tool_call>")
    starts = ("<tool_call>", "<function=")
    wrapper = "<tool_call>"  # the call's wrapper tag; the subclass for another wrapper sets these four
    _open = regex.compile(r"(?:<tool_call>\s*)?<function=(?P<fname>[^>\n<]{1,256})>")
    _close = regex.compile(r"\s*</tool_call>")
    call_end = regex.compile(r"\s*(?:(?P<function></function>)|</tool_call>)")
    strip_value_newlines = True
    param_open = regex.compile(r"\s*<parameter=(?P<key>[^>\n<]{1,256})>")
    value_end = regex.compile(r"(?P<own></parameter>)|<parameter=|</function>")
    value_end_prefixes, value_end_hold = marker_prefixes("</parameter>", "<parameter=", "</function>")

    def _opening(self, final: bool) -> bool:
        m = self._match(self._open, final)
        if m is None:
            return False
        if m and m["fname"].strip():
            self._consume(m.end())
            self._open_call(m["fname"].strip())
            self._begin_args()
            return True
        return self._reject_opening(len(self.wrapper if self._buf.startswith(self.wrapper) else "<function="))

    def _mode_after_call(self, end):
        """</function> leaves the wrapper's closing tag to read; the closing tag alone ends the call."""
        return self._closing if end["function"] else self._content_mode

    def _closing(self, final: bool) -> bool:
        return self._expect_closing(self._close, final)
