"""minimax: MiniMax-Text-01 / MiniMax-M1 (JSON call objects, one per line, in tool_calls tags).

    <tool_calls>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    {"name": "get_time", "arguments": {"tz": "CET"}}
    </tool_calls>

Calls written inside a think block are no calls (see thinkblock.py). MiniMax-M2 has its own format
(minimax_m2).
"""

from __future__ import annotations

from ..core.jsonlists import JsonListToolParser
from ..core.thinkblock import THINK, ThinkBlockIsContent


class MinimaxToolParser(ThinkBlockIsContent, JsonListToolParser):
    name = "minimax"
    special_tokens = ("<tool_calls>", "</tool_calls>")
    starts = ("<tool_calls>", THINK)
    list_open = r"<tool_calls>\s*"
    list_separator = r"\s*,?\s*"
    list_end = r"\s*</tool_calls>"
    closing_markers = ("</tool_calls>",)
