"""xlam: Salesforce xLAM (a JSON list of calls, bare or in a code block or tag).

    [{"name": "get_weather", "arguments": {"city": "Paris"}}, {...}]          at the start of the output
    ```json\n[{...}]\n```   <tool_call>[{...}]</tool_call>   [TOOL_CALLS][{...}]   anywhere

as vLLM's xlam reads them. A bare list only counts where the output opens (at its start, or after a think
block written first, as vLLM reads it too): a list later in prose is content.
"""

from __future__ import annotations

from ..core.jsonlists import JsonListToolParser
from ..core.thinkblock import CallsOpenTheOutput


class XlamToolParser(CallsOpenTheOutput, JsonListToolParser):
    name = "xlam"
    starts = ("```json", "```\n[", "<tool_call>", "[TOOL_CALLS]")
    list_open = r"(?:```(?:json)?|<tool_call>|\[TOOL_CALLS\])\s*\[\s*"
    closing_markers = ("```", "</tool_call>")

    def _output_start(self):
        return self._bare_list_mode

    def _bare_list_mode(self, final: bool) -> bool:
        if not self._buf and not final:
            return False
        return self._list_call(final, _BARE, 0, self._next_call_mode)


_BARE = XlamToolParser._call_patterns(r"\s*\[\s*")
