"""Mixin for formats whose models write calls while thinking: a think block the reasoning parser left to
the tool parser is content, calls and all (vLLM's hunyuan_a13b and minimax skip call markup inside
<think>...</think> too). A format puts THINK in its `starts`.
"""

from __future__ import annotations

THINK, THINK_END = "<think>", "</think>"


class ThinkBlockIsContent:
    def _opening(self, final: bool) -> bool:
        if self._buf.startswith(THINK):
            self._mode = self._think_mode
            return True
        return super()._opening(final)

    def _think_mode(self, final: bool) -> bool:
        return self._pass_until(THINK_END, final, as_reasoning=False, keep_end=True)
