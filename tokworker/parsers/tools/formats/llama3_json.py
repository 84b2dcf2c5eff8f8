"""llama3_json: Llama 3.1, 3.2, 3.3 with JSON tool calls.

    {"name": "get_weather", "parameters": {"city": "Paris"}}

at the start of the output, possibly after <|python_tag|>, several separated by ";". Output that does not
open with a call is content, all of it (as in vLLM: a JSON object later in an answer is not a call); the
output opens after a think block written first (thinkblock.py).
"""

from __future__ import annotations

import regex

from ..core.base import ToolParser
from ..core.jsoncalls import CALL_OBJECT, JsonCallObjects, call_head
from ..core.thinkblock import CallsOpenTheOutput

_PREFIX = r"\s*(?:<\|python_tag\|>\s*)?"
_HEAD = call_head(_PREFIX)
_WHOLE = regex.compile(_PREFIX + CALL_OBJECT)
_NEXT_HEAD = call_head(r"\s*;\s*")
_NEXT_WHOLE = regex.compile(r"\s*;\s*" + CALL_OBJECT)


class Llama3JsonToolParser(CallsOpenTheOutput, JsonCallObjects, ToolParser):
    name = "llama3_json"
    special_tokens = ("<|python_tag|>",)

    def _output_start(self):
        return self._opening

    def _resume_mode(self):
        return self._passthrough_mode

    def _opening(self, final: bool) -> bool:
        if not self._buf and not final:
            return False
        return self._call_object(final, _HEAD, _WHOLE, 0, self._next_call_mode)

    def _next_call_mode(self, final: bool) -> bool:
        if not self._buf and not final:
            return False
        return self._call_object(final, _NEXT_HEAD, _NEXT_WHOLE, 0, self._next_call_mode)
