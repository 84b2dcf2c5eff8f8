"""mistral: both forms Mistral models write after the [TOOL_CALLS] control token.

    [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, {...}]   (v3: Nemo, 7B v0.3)
    [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]...                  (v11+: Small 3.2, Devstral, Ministral)

The v11 form may carry [CALL_ID]id before [ARGS]; array elements may carry an "id" member.
"""

from __future__ import annotations

import regex

from .base import ToolParser
from .jsoncalls import CALL_OBJECT, JsonCallObjects, call_head

MARKER = "[TOOL_CALLS]"
_NAMED = regex.compile(r"\[TOOL_CALLS\]\s*(?P<fname>[^\s\[\]{}\"<>]{1,256})\s*"
                       r"(?:\[CALL_ID\]\s*[^\s\[]{0,64}\s*)?\[ARGS\]\s*(?=\{)")
_ARRAY_HEAD = call_head(r"\[TOOL_CALLS\]\s*\[\s*")
_ARRAY_WHOLE = regex.compile(r"\[TOOL_CALLS\]\s*\[\s*" + CALL_OBJECT)
_NEXT_HEAD = call_head(r"\s*,\s*")
_NEXT_WHOLE = regex.compile(r"\s*,\s*" + CALL_OBJECT)
_ARRAY_END = regex.compile(r"\s*\]")


class MistralToolParser(JsonCallObjects, ToolParser):
    name = "mistral"
    special_tokens = ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]")
    starts = (MARKER,)

    def _opening(self, final: bool) -> bool:
        named = self._match(_NAMED, final)
        if named is None:
            return False
        if named:
            self._consume(named.end())
            self._open_call(named["fname"])
            self._stream_json_args(self._named_done_mode)
            return True
        return self._call_object(final, _ARRAY_HEAD, _ARRAY_WHOLE, len(MARKER), self._array_next_mode)

    def _named_done_mode(self, final: bool) -> bool:
        self._close_call()
        self._mode = self._content_mode
        return True

    def _array_next_mode(self, final: bool) -> bool:
        end = self._match(_ARRAY_END, final)
        if end is None:
            return False
        if end:
            self._consume(end.end())
            self._mode = self._content_mode
            return True
        return self._call_object(final, _NEXT_HEAD, _NEXT_WHOLE, 0, self._array_next_mode)
