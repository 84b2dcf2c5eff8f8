"""gemma4: Google Gemma 4 (FunctionGemma's call:NAME{key:value,...} between its own markers).

    <|tool_call>call:get_weather{location:<|"|>Paris<|"|>,days:3,opts:{unit:<|"|>c<|"|>},tags:[<|"|>a<|"|>]}<tool_call|>

Strings are written between <|"|> tokens: they stream as JSON strings (typed by the tool's schema when it
says otherwise). Other values are bare: numbers, true/false/null, and objects and arrays in the same
syntax (bare or <|"|>-quoted keys); they are read whole, typed by the schema, and written as JSON. Calls
follow one another with no separator.
"""

from __future__ import annotations

import json
import re

import regex

from ..core.textargs import convert, marker_prefixes
from .functiongemma import FunctionGemmaToolParser

START, END, QUOTE = "<|tool_call>", "<tool_call|>", '<|"|>'
_BARE_KEY = regex.compile(r"\s*([^\s:{}\[\],<>'\"()]{1,256})\s*:")
_SCALAR = regex.compile(r"[^,}\]]*")
_NOT_GEMMA = regex.compile(r"['\"()]")  # quotes or parentheses: a Python or JSON literal, not Gemma's syntax
_SCALARS = {"true": True, "false": False, "null": None, "none": None, "nil": None}
_NUMBER = regex.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_DEPTH_LIMIT = 64  # a request's output is untrusted: bound the recursion
_SPACE = re.compile(r"\s*")  # the standard library's \s is str.isspace's set, as lstrip() strips


class Gemma4ToolParser(FunctionGemmaToolParser):
    name = "gemma4"
    special_tokens = (START, END, QUOTE)
    starts = (START,)
    untyped_as_json = False  # a quoted value is text
    _open = regex.compile(regex.escape(START) + r"\s*call:(?P<fname>[\w.\-]{1,256})\{")
    _close = regex.compile(r"\s*" + regex.escape(END))
    # the value's first character says quoted or bare (so a split after "key:" reads it as a whole text does)
    param_open = regex.compile(r"\s*,?\s*(?P<key>[^\s:{}<>,]{1,256}):\s*(?:(?P<quote>" + regex.escape(QUOTE)
                               + r")|(?=[^\s<]))")
    value_end = regex.compile(f"(?P<own>{regex.escape(QUOTE)})")
    value_end_prefixes, value_end_hold = marker_prefixes(QUOTE)

    def _begin_value(self, key: str, param=None) -> None:
        if param is None or param["quote"]:
            return super()._begin_value(key, param)
        self._write_key(key)
        self._value_types = self._param_types(key, param)
        self._bare = [0, 0]  # scanned up to, brackets open
        self._mode = self._bare_value_mode

    def _bare_value_mode(self, final: bool) -> bool:
        """A bare value runs to the "," or "}" that closes no bracket of its own (quoted text skipped); the
        end of the stream ends one cut off."""
        buf, (i, depth) = self._buf, self._bare
        n, found = len(buf), False
        while i < n:
            c = buf[i]
            if c == "<" and buf.startswith(QUOTE[:n - i], i):
                close = buf.find(QUOTE, i + len(QUOTE)) if n - i >= len(QUOTE) else -1
                if close < 0:
                    break  # a quoted string (or its marker) not all here yet
                i = close + len(QUOTE)
                continue
            if c in "{[":
                depth += 1
            elif c in "}]" or c == ",":
                if not depth:
                    found = True
                    break
                depth -= c != ","
            i += 1
        if not found:
            if not final:
                self._bare = [i, depth]
                return False
            i = n
        self._args(_bare_json(buf[:i], self._value_types))
        self._consume(i)
        self._mode = self._params_mode
        return True


def _bare_json(text: str, types: tuple[str, ...]) -> str:
    """A bare value -> JSON: an object or array in Gemma's syntax, else (a scalar, or JSON or a Python
    literal the model wrote instead) typed by the schema."""
    text = text.strip()
    if text[:1] in ("{", "["):
        try:
            value, end = _read(text, 0, 0)
            if not text[end:].strip():
                return json.dumps(value, ensure_ascii=False, allow_nan=False)
        except (ValueError, RecursionError):
            pass
    return convert(text, types, True)


def _read(text: str, i: int, depth: int):
    """The Gemma value at text[i:] (leading whitespace allowed) -> (value, the index after it)."""
    if depth > _DEPTH_LIMIT:
        raise ValueError("nested too deep")
    i = _SPACE.match(text, i).end()
    if text.startswith(QUOTE, i):
        close = text.find(QUOTE, i + len(QUOTE))
        if close < 0:
            raise ValueError("an unterminated string")
        return text[i + len(QUOTE):close], close + len(QUOTE)
    if text.startswith("{", i) or text.startswith("[", i):
        is_object, closer, items = text[i] == "{", "}" if text[i] == "{" else "]", []
        i += 1
        while True:
            i = _SPACE.match(text, i).end()
            if text.startswith(closer, i):
                return (dict(items) if is_object else items), i + 1
            if items:
                if not text.startswith(",", i):
                    raise ValueError("expected a comma")
                i += 1
            if is_object:
                if text.startswith(QUOTE, _SPACE.match(text, i).end()):
                    key, i = _read(text, i, depth + 1)
                    i = _SPACE.match(text, i).end()
                    if not text.startswith(":", i):
                        raise ValueError("expected a colon")
                    i += 1
                else:
                    m = _BARE_KEY.match(text, i)
                    if m is None:
                        raise ValueError("expected a key")
                    key, i = m[1], m.end()
                value, i = _read(text, i, depth + 1)
                items.append((key, value))
            else:
                value, i = _read(text, i, depth + 1)
                items.append(value)
    m = _SCALAR.match(text, i)
    word = m[0].strip()
    if not word or _NOT_GEMMA.search(word):
        raise ValueError("expected a value")
    if word.lower() in _SCALARS:
        return _SCALARS[word.lower()], m.end()
    if _NUMBER.fullmatch(word):
        return json.loads(word), m.end()
    return word, m.end()
