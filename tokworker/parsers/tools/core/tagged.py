"""One JSON call object between an opening and a closing tag: internlm, longcat, ernie45 (hermes's shape).

    OPEN {"name": "get_weather", "arguments": {"city": "Paris"}} CLOSE

A format declares the two tags (literal text), or regexes for them when they vary; the object streams as jsoncalls.py reads it, several
blocks may follow one another with content around them, and a closing tag missing at the end of the
stream is no error (a format may have none).
"""

from __future__ import annotations

import regex

from .base import ToolParser
from .jsoncalls import CALL_OBJECT, JsonCallObjects, call_head


class TaggedJsonToolParser(JsonCallObjects, ToolParser):
    open_tag = ""
    close_tag = ""
    open_pattern = ""  # regex source for the opening (from one of `starts`), when it is not one literal tag
    close_pattern = ""

    def __init_subclass__(cls, **kwargs):
        if cls.open_tag and not cls.starts:
            cls.starts = (cls.open_tag,)
        super().__init_subclass__(**kwargs)
        opening = cls.open_pattern or regex.escape(cls.open_tag)
        if opening:
            prefix = opening + r"\s*"
            cls._head = call_head(prefix)
            cls._whole = regex.compile(prefix + CALL_OBJECT)
            closing = cls.close_pattern or regex.escape(cls.close_tag)
            cls._close = regex.compile(r"\s*" + closing) if closing else None

    def _opening(self, final: bool) -> bool:
        if self._dropped_stray_marker():
            return True
        marker = self._start_re.match(self._buf)[0]
        return self._call_object(final, self._head, self._whole, len(marker), self._closing_mode)

    def _closing_mode(self, final: bool) -> bool:
        if self._close is None:  # no closing tag: what follows the object is content as it is
            self._close_call()
            self._mode = self._resume_mode()
            return True
        return self._expect_closing(self._close, final)
