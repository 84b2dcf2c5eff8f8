"""mistral: both forms Mistral models write after the [TOOL_CALLS] control token.

    [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, {...}]   (v3: Nemo, 7B v0.3)
    [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]...                  (v11+: Small 3.2, Devstral, Ministral)

The v11 form may carry [CALL_ID]id before [ARGS]; array elements may carry an "id" member. Call ids are
9 letters and digits: the templates raise on any other ("Tool call IDs should be alphanumeric strings
with length 9!") when the client sends the calls back. A [CALL_ID] of that shape is the model's own and
is kept; an array element's "id" comes after the call is announced, so those calls get ours.
"""

from __future__ import annotations

import regex

from ..core.jsonlists import JsonListToolParser

MARKER = "[TOOL_CALLS]"
_NAMED = regex.compile(r"\[TOOL_CALLS\]\s*(?P<fname>[^\s\[\]{}\"<>]{1,256})\s*"
                       r"(?:\[CALL_ID\]\s*(?P<callid>[^\s\[]{0,64})\s*)?\[ARGS\]\s*(?=\{)")
_OWN_ID = regex.compile(r"[A-Za-z0-9]{9}")


class MistralToolParser(JsonListToolParser):
    name = "mistral"
    special_tokens = ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]")
    starts = (MARKER,)
    list_open = r"\[TOOL_CALLS\]\s*\[\s*"
    id_style = "alnum9"

    def _opening(self, final: bool) -> bool:
        named = self._match(_NAMED, final)
        if named is None:
            return False
        if named:
            self._consume(named.end())
            own = named["callid"]  # the model's own id, kept when the templates would take it back
            self._open_call(named["fname"], own if own and _OWN_ID.fullmatch(own) else None)
            self._stream_json_args(self._named_done_mode)
            return True
        return super()._opening(final)

    def _named_done_mode(self, final: bool) -> bool:
        self._close_call()
        self._mode = self._content_mode
        return True
