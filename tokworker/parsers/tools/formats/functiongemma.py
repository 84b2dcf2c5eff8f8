"""functiongemma: Google FunctionGemma (calls as NAME{key:<escape>value<escape>,...} between markers).

    <start_function_call>call:get_weather{city:<escape>Paris<escape>,days:<escape>3<escape>}<end_function_call>

Values are text between <escape> tokens, typed by the tool's schema, else JSON when they parse, else
strings (vLLM reads every value as JSON when it parses, so a string-typed "42" becomes a number there;
the schema wins here).
"""

from __future__ import annotations

import regex

from ..core.base import ToolParser
from ..core.textargs import TextValuedArgs, marker_prefixes

START, END, ESCAPE = "<start_function_call>", "<end_function_call>", "<escape>"


class FunctionGemmaToolParser(TextValuedArgs, ToolParser):
    name = "functiongemma"
    special_tokens = (START, END, ESCAPE)
    starts = (START,)
    untyped_as_json = True
    _open = regex.compile(regex.escape(START) + r"\s*call:(?P<fname>[\w.\-]{1,256})\{")
    _close = regex.compile(r"\s*" + regex.escape(END))
    param_open = regex.compile(r"\s*,?\s*(?P<key>[^\s:{}<>,]{1,256}):" + regex.escape(ESCAPE))
    value_end = regex.compile(f"(?P<own>{regex.escape(ESCAPE)})")
    value_end_prefixes, value_end_hold = marker_prefixes(ESCAPE)
    call_end = regex.compile(r"\s*\}")

    def _opening(self, final: bool) -> bool:
        return self._invoke(self._open, final, len(self.starts[0]))

    def _mode_after_call(self, end):
        return self._closing

    def _closing(self, final: bool) -> bool:
        return self._expect_closing(self._close, final)
