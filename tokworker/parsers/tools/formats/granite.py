"""granite: IBM Granite 3.x (the system prompt asks for "<|tool_call|> followed by a JSON list").

    <|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}, {...}]

Granite 3.1 wrote <tool_call> for the marker; both are read. There is no closing marker.
"""

from __future__ import annotations

from ..core.jsonlists import JsonListToolParser


class GraniteToolParser(JsonListToolParser):
    name = "granite"
    special_tokens = ("<|tool_call|>",)
    starts = ("<|tool_call|>", "<tool_call>")
    drop_rejected_markers = True  # control tokens in Granite's vocabulary
    list_open = r"(?:<\|tool_call\|>|<tool_call>)\s*\[\s*"
