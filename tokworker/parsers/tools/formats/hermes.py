"""hermes: Qwen2.5, Qwen3, QwQ, Hermes, Granite 4.

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

possibly several, with content before, between or after them. Qwen3 may write its call inside a <think>
block it never closes: the <tool_call> token ends the reasoning there (reasoning/formats.py, qwen3).
"""

from __future__ import annotations

import regex

from ..core.base import ToolParser
from ..core.jsoncalls import CALL_OBJECT, JsonCallObjects, call_head

OPEN_TAG = "<tool_call>"
_HEAD = call_head(r"<tool_call>\s*")
_WHOLE = regex.compile(r"<tool_call>\s*" + CALL_OBJECT)
_CLOSE = regex.compile(r"\s*</tool_call>")


class HermesToolParser(JsonCallObjects, ToolParser):
    name = "hermes"
    special_tokens = ("<tool_call>", "</tool_call>")
    starts = (OPEN_TAG,)

    def _opening(self, final: bool) -> bool:
        return self._call_object(final, _HEAD, _WHOLE, len(OPEN_TAG), self._closing_mode)

    def _closing_mode(self, final: bool) -> bool:
        return self._expect_closing(_CLOSE, final)


class Granite4ToolParser(HermesToolParser):
    """granite4: IBM Granite 4 writes hermes's calls (vLLM's granite4 parser reads the same tags)."""

    name = "granite4"
