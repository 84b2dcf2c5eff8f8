"""Mixin for formats whose models write calls while thinking: a think block the reasoning parser left to
the tool parser is content, calls and all (vLLM's hunyuan_a13b and minimax skip call markup inside
<think>...</think> too). A format puts its think tag in its `starts` (and names other tags in `think`,
`think_end`).
"""

from __future__ import annotations

THINK, THINK_END = "<think>", "</think>"


class ThinkBlockIsContent:
    think, think_end = THINK, THINK_END

    def _opening(self, final: bool) -> bool:
        if self._buf.startswith(self.think):
            self._mode = self._think_mode
            return True
        return super()._opening(final)

    def _think_mode(self, final: bool) -> bool:
        return self._pass_until(self.think_end, final, as_reasoning=False, keep_end=True)
