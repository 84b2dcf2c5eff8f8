"""apertus: Swiss AI Apertus. A call is an object whose one key is the function's name.

    <|tools_prefix|>[{"get_weather": {"city": "Paris"}}, {"now": {}}]<|tools_suffix|>
"""

from __future__ import annotations

import regex

from ..core.jsoncalls import NAME_LIMIT, decode_json_string
from ..core.jsonlists import JsonListToolParser

PREFIX, SUFFIX = "<|tools_prefix|>", "<|tools_suffix|>"
_NAMED_OBJECT = r'\{\s*"(?P<name>(?:[^"\\\x00-\x1f]|\\.){1,%d})"\s*:\s*(?=\{)' % NAME_LIMIT


class ApertusToolParser(JsonListToolParser):
    name = "apertus"
    special_tokens = (PREFIX, SUFFIX)
    starts = (PREFIX, SUFFIX)
    stray_markers = (SUFFIX,)
    call_openings = (PREFIX,)
    drop_rejected_markers = True
    list_open = regex.escape(PREFIX) + r"\s*\[\s*"
    closing_markers = (SUFFIX,)

    @classmethod
    def _call_patterns(cls, prefix: str) -> tuple:
        return (regex.compile(prefix + _NAMED_OBJECT),)

    def _list_call(self, final: bool, patterns: tuple, reject_len: int, after) -> bool:
        """{"NAME": arguments}: the arguments stream, then the object's closing brace (or more members,
        validated) ends the call."""
        m = self._match(patterns[0], final)
        if m is None:
            return False
        name = decode_json_string(m["name"]) if m else None
        if not name:
            return self._reject_opening(reject_len)
        self._consume(m.end())
        self._open_call(name)
        self._after_object = after
        self._stream_json_args(self._object_rest_mode)
        return True
