"""hunyuan_a13b: Tencent Hunyuan-A13B (a JSON list of calls in tool_calls tags).

    <tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</tool_calls>

A call list inside a think block is no call (see thinkblock.py).
"""

from __future__ import annotations

from ..core.thinkblock import THINK, ThinkBlockIsContent
from .apriel import AprielToolParser


class HunyuanA13BToolParser(ThinkBlockIsContent, AprielToolParser):
    name = "hunyuan_a13b"
    starts = ("<tool_calls>", THINK)
