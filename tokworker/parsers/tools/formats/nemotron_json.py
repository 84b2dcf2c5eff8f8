"""nemotron_json: NVIDIA Nemotron Nano v2.

    <TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}, {...}]</TOOLCALL>
"""

from __future__ import annotations

from ..core.jsonlists import JsonListToolParser


class NemotronJsonToolParser(JsonListToolParser):
    name = "nemotron_json"
    special_tokens = ("<TOOLCALL>", "</TOOLCALL>")
    starts = ("<TOOLCALL>",)
    list_open = r"<TOOLCALL>\s*\[\s*"
    closing_markers = ("</TOOLCALL>",)
