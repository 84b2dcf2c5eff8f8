"""longcat: Meituan LongCat-Flash (hermes's calls in the model's own tags).

    <longcat_tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</longcat_tool_call>
"""

from __future__ import annotations

from ..core.tagged import TaggedJsonToolParser


class LongcatToolParser(TaggedJsonToolParser):
    name = "longcat"
    special_tokens = ("<longcat_tool_call>", "</longcat_tool_call>")
    open_tag = "<longcat_tool_call>"
    close_tag = "</longcat_tool_call>"
