"""apriel: ServiceNow Apriel 1.5 / 1.6.

    <tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "..."}, {...}]</tool_calls>
"""

from __future__ import annotations

from ..core.jsonlists import JsonListToolParser


class AprielToolParser(JsonListToolParser):
    name = "apriel"
    special_tokens = ("<tool_calls>", "</tool_calls>")
    starts = ("<tool_calls>",)
    list_open = r"<tool_calls>\s*\[\s*"
    closing_markers = ("</tool_calls>",)
