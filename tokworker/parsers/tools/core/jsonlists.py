"""Calls as a JSON list after a marker: MARKER [ {call}, {call}, ... ] CLOSING.

    <TOOLCALL>[{"name": "f", "arguments": {...}}, ...]</TOOLCALL>      nemotron_json
    <|tool_call|>[{"name": "f", "arguments": {...}}]                    granite (no closing)
    [TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "..."}]        mistral's array form

A format declares the list's opening (a marker from `starts` through the "["), what may close it after
the "]", and CallKeys for the call objects; the objects stream as jsoncalls.py reads them. A closing
missing at the end of the stream is no error (the list is what counts), anything else after the list is
content.
"""

from __future__ import annotations

import regex

from .base import ToolParser
from .jsoncalls import CALL_KEYS, JsonCallObjects, call_head



class JsonListToolParser(JsonCallObjects, ToolParser):
    list_open = ""  # regex source: a marker through the list's "[" and the whitespace after it
    list_close = ""  # regex source: what follows the list's "]" (a closing tag), or "" for nothing
    list_separator = r"\s*,\s*"  # regex source: between two call objects
    list_end = r"\s*\]"  # regex source: what ends the list
    call_keys = CALL_KEYS
    stray_markers: tuple[str, ...] = ()  # closing markers (also in `starts`) dropped when met outside a list

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.list_open:
            cls._first = cls._call_patterns(cls.list_open)
            cls._next = cls._call_patterns(cls.list_separator)
            cls._list_end = regex.compile(cls.list_end)
            cls._closing = regex.compile(cls.list_close) if cls.list_close else None

    @classmethod
    def _call_patterns(cls, prefix: str) -> tuple:
        """(header, whole-object fallback) patterns for a call object after `prefix`."""
        return call_head(prefix, cls.call_keys), regex.compile(prefix + cls.call_keys.object_start())

    def _opening(self, final: bool) -> bool:
        marker = self._start_re.match(self._buf)[0]
        if marker in self.stray_markers:
            self._consume(len(marker))
            self._mode = self._content_mode
            return True
        return self._list_call(final, self._first, len(marker), self._next_call_mode)

    def _next_call_mode(self, final: bool) -> bool:
        end = self._match(self._list_end, final)
        if end is None:
            return False
        if end:
            self._consume(end.end())
            self._mode = self._list_closing_mode if self._closing else self._resume_mode()
            return True
        return self._list_call(final, self._next, 0, self._next_call_mode)

    def _list_call(self, final: bool, patterns: tuple, reject_len: int, after) -> bool:
        """Read one call object with `patterns` (from _call_patterns): commit, wait, or reject."""
        return self._call_object(final, *patterns, reject_len, after)

    def _list_closing_mode(self, final: bool) -> bool:
        m = self._match(self._closing, final)
        if m is None:
            return False
        if m:
            self._consume(m.end())
        self._mode = self._resume_mode()
        return True
