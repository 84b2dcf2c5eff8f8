"""Think blocks the reasoning parser left to the tool parser (no reasoning parser runs, or the model
thinks where none is expected): they are content, and calls inside them are no calls.

ThinkBlockIsContent: for formats whose models write calls while thinking (vLLM's hunyuan_a13b and minimax
skip call markup inside <think>...</think> too). A format puts its think tag in its `starts` (and names
other tags in `think`, `think_end`).

CallsOpenTheOutput: for formats whose calls may only open the output (llama3_json, pythonic, xlam,
functionary_v32): the output opens after a think block written first (xLAM, asked to think, writes
<think>...</think> and then its call list). A format names its first mode in `_output_start`.
"""

from __future__ import annotations

from .jsonargs import HEADER_LIMIT

THINK, THINK_END = "<think>", "</think>"
_WHITESPACE = " \t\n\r"


class ThinkBlockIsContent:
    think, think_end = THINK, THINK_END

    def _opening(self, final: bool) -> bool:
        if self._buf.startswith(self.think):
            self._mode = self._think_mode
            return True
        return super()._opening(final)

    def _think_mode(self, final: bool) -> bool:
        return self._pass_until(self.think_end, final, as_reasoning=False, keep_end=True)


class CallsOpenTheOutput:
    def _initial_mode(self):
        return self._leading_think_mode

    def _output_start(self):  # pragma: no cover - every format with this mixin defines it
        raise NotImplementedError

    def _leading_think_mode(self, final: bool) -> bool:
        """At the output's start: a think block (after any whitespace), or the format's own opening."""
        buf = self._buf
        body = buf.lstrip(_WHITESPACE)
        if body.startswith(THINK):
            self._mode = self._leading_think_body_mode
            return True
        if not final and THINK.startswith(body) and len(buf) <= HEADER_LIMIT:
            return False  # only whitespace, or the start of "<think>", so far
        self._mode = self._output_start()
        return True

    def _leading_think_body_mode(self, final: bool) -> bool:
        return self._pass_until(THINK_END, final, as_reasoning=False, keep_end=True, then=self._after_think_mode)

    def _after_think_mode(self, final: bool) -> bool:
        """Whitespace after the block is formatting (held as content: dropped if a call follows)."""
        buf = self._buf
        body = buf.lstrip(_WHITESPACE)
        if not body and not final and len(buf) <= HEADER_LIMIT:
            return False
        if len(body) < len(buf):
            self._content(buf[:len(buf) - len(body)])
            self._consume(len(buf) - len(body))
        self._mode = self._output_start()
        return True
