"""firefunction_v2: Fireworks' firefunction-v2 (Llama 3 based).

    Some text functools[{"name": "get_weather", "arguments": {"city": "Paris"}}, {...}]

"functools" is plain text, not a control token: text that only looks like it stays content.
"""

from __future__ import annotations

from ..core.jsonlists import JsonListToolParser


class FirefunctionV2ToolParser(JsonListToolParser):
    name = "firefunction_v2"
    starts = ("functools[",)
    list_open = r"functools\[\s*"
