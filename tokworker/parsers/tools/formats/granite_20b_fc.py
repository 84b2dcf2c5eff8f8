"""granite-20b-fc: IBM Granite 20B function calling (each call after a <function_call> marker, no closing).

    Let me check.
    <function_call> {"name": "get_weather", "arguments": {"city": "Tokyo"}}
    <function_call> {"name": "get_time", "arguments": {"timezone": "Asia/Tokyo"}}

vLLM's streaming parser reads calls only when the output opens with the marker (its tests mark text
before the call xfail); here a call may follow text, streamed or whole alike.
"""

from __future__ import annotations

from ..core.tagged import TaggedJsonToolParser


class Granite20bFcToolParser(TaggedJsonToolParser):
    name = "granite-20b-fc"
    special_tokens = ("<function_call>",)
    open_tag = "<function_call>"
