"""phi4_mini_json: Microsoft Phi-4-mini (firefunction's "functools[...]" list).

    functools[{"name": "get_weather", "arguments": {"city": "Paris"}}]

vLLM's parser drops any text around the list and does not stream; here the text is content and the calls
stream as firefunction_v2's do.
"""

from __future__ import annotations

from .firefunction import FirefunctionV2ToolParser


class Phi4MiniJsonToolParser(FirefunctionV2ToolParser):
    name = "phi4_mini_json"
