"""Calls written as Python function calls with literal keyword arguments: pythonic, lfm2, olmo3.

    [get_weather(city="Paris", days=3), now()]

A format declares the markup around the calls (its opening through the first call's "(", what separates
two calls, what ends them, a closing marker). Each keyword argument is converted to JSON once its value
is complete (literals.py reads Python literals and JSON spellings such as true and null, evaluating no
code), so arguments stream one argument at a time.
"""

from __future__ import annotations

import json

import regex

from .base import ToolParser
from .literals import LiteralEnd, literal_json

_NEXT_CALL = regex.compile(r"\s*,\s*(?P<fname>[A-Za-z_][\w.]{0,255})\s*\(")
_KEY = regex.compile(r"\s*(?P<key>[A-Za-z_]\w{0,255})\s*=")
_ARGS_END = regex.compile(r"\s*\)")
_NEXT_ARG = regex.compile(r"\s*,")
_LIST_END = regex.compile(r"\s*\]")


class PythonicCalls(ToolParser):
    # the markup around the calls: every format sets first_call and closing
    first_call: regex.Pattern  # the opening through the first call's "(", name in group "fname"
    next_call = _NEXT_CALL  # a separator and the next call's name through its "("
    calls_end = _LIST_END  # what ends the calls
    closing: regex.Pattern | None  # a marker after calls_end, consumed when it is there; None for none

    def _call_start(self, pattern, final: bool, reject_len: int = 0) -> bool:
        m = self._match(pattern, final)
        if m is None:
            return False
        if not m:
            return self._reject_opening(reject_len)
        self._consume(m.end())
        self._open_call(m["fname"])
        self._arg_count = 0
        self._mode = self._key_mode
        return True

    def _key_mode(self, final: bool) -> bool:
        end = self._match(_ARGS_END, final)
        if end:
            self._consume(end.end())
            self._args("}" if self._arg_count else "{}")
            self._close_call()
            self._mode = self._after_call_mode
            return True
        key = self._match(_KEY, final)
        if key:  # consumed with its value, so a value that is no literal leaves "key=" in the content
            self._key, self._value_at, self._value_end = key["key"], key.end(), LiteralEnd(key.end())
            self._mode = self._value_mode
            return True
        if end is None or key is None:
            return False
        return self._end_cleanly()

    def _value_mode(self, final: bool) -> bool:
        end = self._value_end.find(self._buf, final)  # ")" ends the arguments; a stray "]" or "}" is no literal
        if end is None:  # at the end of the stream: a value cut off is content, like one that is no literal
            return self._end_cleanly() if final else False
        value = literal_json(self._buf[self._value_at:end])
        if value is None:
            return self._end_cleanly()
        self._args(("{" if not self._arg_count else ", ") + json.dumps(self._key, ensure_ascii=False) + ": " + value)
        self._arg_count += 1
        self._consume(end)
        self._mode = self._after_value_mode
        return True

    def _after_value_mode(self, final: bool) -> bool:
        more = self._match(_NEXT_ARG, final)
        if more:
            self._consume(more.end())
            self._mode = self._key_mode
            return True
        end = self._match(_ARGS_END, final)
        if end:
            self._mode = self._key_mode  # consumes the ")" and closes the object
            return True
        if more is None or end is None:
            return False
        return self._end_cleanly()

    def _after_call_mode(self, final: bool) -> bool:
        done = self._match(self.calls_end, final)
        if done:
            self._consume(done.end())
            self._mode = self._python_end_mode if self.closing is not None else self._resume_mode()
            return True
        if done is None:
            return False
        return self._call_start(self.next_call, final)

    def _python_end_mode(self, final: bool) -> bool:
        return self._expect_closing(self.closing, final)

    def _end_cleanly(self) -> bool:
        """Text that is no keyword argument, or a value that is no literal: the call ends with the
        arguments read so far (our own JSON, closed at an argument boundary); the rest is content."""
        self._args("}" if self._arg_count else "{}")
        return self._break_call()
