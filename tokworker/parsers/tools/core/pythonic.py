"""Calls written as Python function calls with literal keyword arguments: pythonic, lfm2, olmo3.

    [get_weather(city="Paris", days=3), now()]

A format declares the markup around the calls (its opening through the first call's "(", what separates
two calls, what ends them, a closing marker). Each keyword argument is converted to JSON once its value
is complete (Python literals via ast.literal_eval, which evaluates no code; JSON spellings such as true
and null are accepted too), so arguments stream one argument at a time.
"""

from __future__ import annotations

import ast
import json

import regex

from .base import ToolParser

_NEXT_CALL = regex.compile(r"\s*,\s*(?P<fname>[A-Za-z_][\w.]{0,255})\s*\(")
_KEY = regex.compile(r"\s*(?P<key>[A-Za-z_]\w{0,255})\s*=")
_ARGS_END = regex.compile(r"\s*\)")
_NEXT_ARG = regex.compile(r"\s*,")
_LIST_END = regex.compile(r"\s*\]")
_OPENERS, _CLOSERS = "([{", ")]}"


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
            self._key, self._value_at = key["key"], key.end()
            self._scan_at, self._depth, self._quote, self._escaped = key.end(), 0, "", False
            self._mode = self._value_mode
            return True
        if end is None or key is None:
            return False
        return self._end_cleanly()

    def _value_mode(self, final: bool) -> bool:
        end = self._scan_value(final)
        if end is None:  # at the end of the stream: a value cut off is content, like one that is no literal
            return self._end_cleanly() if final else False
        value = _to_json(self._buf[self._value_at:end])
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

    def _scan_value(self, final: bool) -> int | None:
        """Index where the current value ends (a "," or ")" outside brackets and strings), or None."""
        buf, i = self._buf, self._scan_at
        depth, quote, escaped = self._depth, self._quote, self._escaped
        n = len(buf)
        while i < n:
            c = buf[i]
            if quote:
                if escaped:
                    escaped = False
                elif c == "\\":
                    escaped = True
                elif buf.startswith(quote, i):
                    i += len(quote)
                    quote = ""
                    continue
                elif c == quote[0] and len(quote) == 3 and n - i < 3 and not final:
                    break  # maybe the closing triple quote, not all here yet
                i += 1
                continue
            if c in "\"'":
                if n - i < 3 and not final:
                    break  # an opening triple quote needs three characters to tell
                quote = c * 3 if buf.startswith(c * 3, i) else c
                i += len(quote)
                continue
            if c in _OPENERS:
                depth += 1
            elif c in _CLOSERS:
                if not depth:  # ")" ends the arguments; a stray "]" or "}" is left for the caller to reject
                    self._scan_at = i
                    return i
                depth -= 1
            elif c == "," and not depth:
                self._scan_at = i
                return i
            i += 1
        self._scan_at, self._depth, self._quote, self._escaped = i, depth, quote, escaped
        return None


def _to_json(text: str) -> str | None:
    """A Python (or JSON) literal -> JSON text, or None if it is neither."""
    text = text.strip()
    if not text:
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        try:
            value = json.loads(text)
        except ValueError:
            return None
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return None
