"""Calls between special marker tokens, grouped in an optional section: deepseek_v3, deepseek_v31, kimi_k2.

    SECTION_BEGIN CALL_BEGIN <header naming the function> {arguments JSON} CALL_END ... SECTION_END

A subclass gives the opening regex (from the section or call marker through the header, up to the
arguments' brace), the closing regex, and the markers. A call marker is accepted without its section
(models drop it), and a section-end marker is swallowed wherever it turns up.
"""

from __future__ import annotations

from .base import ToolParser


class SectionedToolParser(ToolParser):
    section_end = ""
    _open = None  # regex: marker(s) + header with a "fname" group, ending before the arguments' "{"
    _close = None  # regex: what follows the arguments, through the call's end marker

    def _opening(self, final: bool) -> bool:
        buf = self._buf
        if buf.startswith(self.section_end):
            self._consume(len(self.section_end))
            self._mode = self._content_mode
            return True
        m = self._match(self._open, final)
        if m is None:
            return False
        if m and m["fname"].strip():
            self._consume(m.end())
            self._open_call(m["fname"].strip())
            self._stream_json_args(self._closing_mode)
            return True
        return self._reject_opening(len(next(s for s in self.starts if buf.startswith(s))))

    def _closing_mode(self, final: bool) -> bool:
        return self._expect_closing(self._close, final)
