"""Calls as named invokes with named text parameters inside a section: deepseek_v32, step3, minimax_m2.

    SECTION_OPEN INVOKE_OPEN(name) PARAM_OPEN(key) value PARAM_CLOSE ... INVOKE_CLOSE INVOKE_OPEN ... SECTION_CLOSE

A format declares the section's markers, an invoke's opening (group "fname"; it may carry per-call
markers such as step3's <｜tool_call_begin｜>function<｜tool_sep｜>) and the TextValuedArgs patterns
for its parameters; values are typed as textargs.py types them. After an invoke closes, another may
follow; the section's end, or anything else, returns to content.
"""

from __future__ import annotations

import regex

from .base import ToolParser
from .textargs import TextValuedArgs


class InvokeSectionToolParser(TextValuedArgs, ToolParser):
    section_open = ""  # regex source: the section's opening marker (the first of `starts`)
    invoke_open = ""  # regex source: one call's opening, with the function's name as group "fname"
    section_close = ""  # regex source: the section's closing marker
    invoke_close = ""  # regex source: a per-call closing marker after call_end, consumed when it is there

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.section_open:
            cls._first_invoke = regex.compile(cls.section_open + r"\s*" + cls.invoke_open)
            cls._next_invoke = regex.compile(r"\s*" + cls.invoke_open)
            cls._section_end = regex.compile(r"\s*" + cls.section_close)
            cls._invoke_end = regex.compile(r"\s*" + cls.invoke_close) if cls.invoke_close else None

    def _opening(self, final: bool) -> bool:
        if self._dropped_stray_marker():
            return True
        return self._invoke(self._first_invoke, final, len(self._start_re.match(self._buf)[0]))

    def _mode_after_call(self, end):
        return self._invoke_end_mode if self._invoke_end else self._section_mode

    def _invoke_end_mode(self, final: bool) -> bool:
        m = self._match(self._invoke_end, final)
        if m is None:
            return False
        if m:
            self._consume(m.end())
        self._mode = self._section_mode
        return True

    def _section_mode(self, final: bool) -> bool:
        """After an invoke: another one, or the section's end; anything else is content."""
        end = self._match(self._section_end, final)
        if end is None:
            return False
        if end:
            self._consume(end.end())
            self._mode = self._content_mode
            return True
        return self._invoke(self._next_invoke, final, 0)
