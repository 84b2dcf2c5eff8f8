"""Calls as a JSON list after a marker: MARKER [ {call}, {call}, ... ] CLOSING.

    <TOOLCALL>[{"name": "f", "arguments": {...}}, ...]</TOOLCALL>      nemotron_json
    <|tool_call|>[{"name": "f", "arguments": {...}}]                    granite (no closing)
    [TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "..."}]        mistral's array form

A format declares the list's opening (a marker from `starts` through the "["), what may close it after
the "]", and CallKeys for the call objects; the objects stream as jsoncalls.py reads them. A closing
missing at the end of the stream is no error (the list is what counts), anything else after the list is
content.

One bad entry costs only itself, as in vLLM: an object in the list that is no call ({invalid json here},
a call without a name) is skipped up to its closing brace, and a call whose arguments break keeps what was
streamed while the rest of its object is skipped; the entries after it are read on, and no JSON or closing
tag of the list reaches the content. A list counts as one once its opening marker is a control token
followed by an object, or once it has held a call (a bare "[" or a plain-text opener like "functools["
may be prose). The skip stops at the format's closing marker, so an entry whose braces never balance
cannot swallow the answer after the list.
"""

from __future__ import annotations

import re

import regex

from .base import ToolParser
from .jsoncalls import CALL_KEYS, JsonCallObjects, call_head


class JsonListToolParser(JsonCallObjects, ToolParser):
    list_open = ""  # regex source: a marker through the list's "[" and the whitespace after it
    list_close = ""  # regex source: what follows the list's "]", when closing_markers do not say it
    list_separator = r"\s*,\s*"  # regex source: between two call objects
    list_end = r"\s*\]"  # regex source: what ends the list
    closing_markers: tuple[str, ...] = ()  # the literal tags after the "]" (or that end the list): a skipped entry ends there too
    call_keys = CALL_KEYS
    stray_markers: tuple[str, ...] = ()  # closing markers (also in `starts`) dropped when met outside a list
    _listing = False  # reading a list's entries
    _entry = None  # a confirmed list's entry opening (the list's opening or a separator, up to a "{")

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.list_open:
            cls._first = cls._call_patterns(cls.list_open)
            cls._next = cls._call_patterns(cls.list_separator)
            cls._first_entry = regex.compile(cls.list_open + r"(?=\{)")
            cls._next_entry = regex.compile(cls.list_separator + r"(?=\{)")
            cls._list_end = regex.compile(cls.list_end)
            close = cls.list_close or (cls.closing_markers and cls.list_end == r"\s*\]"
                                       and r"\s*(?:" + "|".join(map(regex.escape, cls.closing_markers)) + ")")
            cls._closing = regex.compile(close) if close else None

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
        self._listing = True
        self._entry = self._first_entry if marker in self.special_tokens else None  # a control token opens a list
        return self._list_call(final, self._first, len(marker), self._next_call_mode)

    def _next_call_mode(self, final: bool) -> bool:
        self._entry = self._next_entry  # the list has held an entry: it is a list
        end = self._match(self._list_end, final)
        if end is None:
            return False
        if end:
            self._consume(end.end())
            self._end_list()
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

    def _end_list(self) -> None:
        self._listing, self._entry = False, None

    # ---- a bad entry costs only itself ----

    def _reject_opening(self, n: int) -> bool:
        """An entry that is no call: an object in a confirmed list is skipped; anything else ends the list
        (its opening is content, or dropped, as the format says)."""
        entry = self._entry.match(self._buf) if self._entry is not None else None
        if not entry:
            self._end_list()
            return super()._reject_opening(n)
        self._consume(entry.end())
        self._skip_entry("", False)
        return True

    def _break_call(self) -> bool:
        """A listed call's syntax broke: it keeps what was sent, and the rest of its object is skipped."""
        if not self._listing:
            return super()._break_call()
        self._close_call()
        if self._mode == self._literal_args_mode:  # nothing consumed: the literal is still in the buffer
            self._skip_entry("{", False)
        else:  # the scanner holds the arguments' open brackets (and the call object's, in the object's tail)
            scanner = self._scanner
            call = "" if self._mode == self._object_tail_mode else "{"
            self._skip_entry(call + scanner.brackets, scanner.stopped_in_string)
        return True

    def _skip_entry(self, brackets: str, in_string: bool) -> None:
        self._skip = (brackets, in_string)  # the brackets the entry has open, and whether inside a string
        self._mode = self._skip_mode

    def _skip_mode(self, final: bool) -> bool:
        """Drop the rest of a bad entry: through the bracket that closes it (outside strings), up to a
        bracket it did not open (the list's "]"), or up to the list's closing marker, which ends the list.
        Text scanned is dropped as it comes."""
        buf, (brackets, in_string) = self._buf, self._skip
        markers = self.closing_markers
        i, n = 0, len(buf)
        while i < n:
            if in_string:  # on to the closing quote; a piece ending inside an escape waits for the rest
                i = _STRING_REST.match(buf, i).end()
                if i == n or buf[i] == "\\":
                    break
                in_string, i = False, i + 1
                continue
            c = buf[i]
            if c == '"':
                in_string = True
            elif c in "{[":
                brackets += c
            elif c in "}]":
                opened = brackets.rfind("{" if c == "}" else "[")  # it closes that one and any left open inside
                if opened < 0:  # a bracket the entry did not open (the list's "]"): the list goes on from it
                    return self._end_skip(i, self._next_call_mode)
                brackets = brackets[:opened]
                if not brackets:  # the entry's own closing bracket
                    return self._end_skip(i + 1, self._next_call_mode)
            elif markers and any(m.startswith(buf[i:i + len(m)]) for m in markers):
                if any(buf.startswith(m, i) for m in markers):
                    self._end_list()
                    return self._end_skip(i, self._list_closing_mode if self._closing else self._next_call_mode)
                if i + max(map(len, markers)) > n and not final:
                    break  # maybe the closing marker, not all here yet
            i += 1
        self._consume(n if final else i)
        self._skip = (brackets, in_string)
        return False

    def _end_skip(self, at: int, mode) -> bool:
        self._consume(at)
        self._mode = mode
        return True


_STRING_REST = re.compile(r'(?:[^"\\]|\\.)*', re.S)  # a JSON string's characters and whole escapes
