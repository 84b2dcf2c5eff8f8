"""Calls between special marker tokens, grouped in an optional section: deepseek_v3, deepseek_v31, kimi_k2,
functionary_v31.

    SECTION_BEGIN CALL_BEGIN <header naming the function> {arguments JSON} CALL_END ... SECTION_END

A subclass gives the opening regex (from the section or call marker through the header, up to the
arguments' brace; `_model_id` may read the id the model wrote from it), the closing regex, and
the markers. A call marker is accepted without its section (models drop it); `stray_markers` (the
section end, and for some formats the call's own end) are swallowed wherever they turn up.
"""

from __future__ import annotations

from .base import ToolParser


class SectionedToolParser(ToolParser):
    stray_markers: tuple[str, ...] = ()  # markers dropped when met outside a call; each is also in `starts`
    _open = None  # regex: marker(s) + header with a "fname" group, ending before the arguments' "{"
    _close = None  # regex: what follows the arguments, through the call's end marker

    def _opening(self, final: bool) -> bool:
        buf = self._buf
        stray = next((m for m in self.stray_markers if buf.startswith(m)), None)
        if stray:
            self._consume(len(stray))
            self._mode = self._content_mode
            return True
        m = self._match(self._open, final)
        if m is None:
            return False
        if m and m["fname"].strip():
            self._consume(m.end())
            self._open_call(m["fname"].strip(), self._model_id(m))
            self._stream_json_args(self._closing_mode)
            return True
        return self._reject_opening(len(next(s for s in self.starts if buf.startswith(s))))

    def _model_id(self, m) -> str | None:
        """The call's id as the model wrote it in the opening `m`, when the format's ids are the model's."""
        return None

    def _closing_mode(self, final: bool) -> bool:
        return self._expect_closing(self._close, final)
