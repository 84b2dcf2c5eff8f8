"""hunyuan_a13b: Tencent Hunyuan-A13B (a JSON list of calls in tool_calls tags).

    <tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</tool_calls>

A think block the reasoning parser has not taken is content, calls and all: vLLM skips a call list
inside <think>...</think> too.
"""

from __future__ import annotations

from .apriel import AprielToolParser

THINK, THINK_END = "<think>", "</think>"


class HunyuanA13BToolParser(AprielToolParser):
    name = "hunyuan_a13b"
    special_tokens = ("<tool_calls>", "</tool_calls>")
    starts = ("<tool_calls>", THINK)

    def _opening(self, final: bool) -> bool:
        if self._buf.startswith(THINK):
            self._mode = self._think_mode
            return True
        return super()._opening(final)

    def _think_mode(self, final: bool) -> bool:
        return self._pass_until(THINK_END, final, as_reasoning=False, keep_end=True)
