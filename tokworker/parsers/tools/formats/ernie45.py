"""ernie45: Baidu ERNIE 4.5 (hermes's calls; an answer without calls is wrapped in response tags).

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>
    or  <response>It is sunny.</response>

The response tags are control tokens: they never reach content.
"""

from __future__ import annotations

from ..core.tagged import TaggedJsonToolParser

RESPONSE_TAGS = ("<response>", "</response>")


class Ernie45ToolParser(TaggedJsonToolParser):
    name = "ernie45"
    special_tokens = ("<tool_call>", "</tool_call>", *RESPONSE_TAGS)
    starts = ("<tool_call>", *RESPONSE_TAGS)
    call_openings = ("<tool_call>",)  # the response tags wrap an answer: no call
    open_tag = "<tool_call>"
    close_tag = "</tool_call>"

    def _opening(self, final: bool) -> bool:
        tag = next((t for t in RESPONSE_TAGS if self._buf.startswith(t)), None)
        if tag is None:
            return super()._opening(final)
        self._consume(len(tag))
        self._mode = self._content_mode
        return True
