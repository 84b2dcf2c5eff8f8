"""Arguments written as tagged text values (qwen3_coder, glm45): the parser builds the JSON itself.

The values carry no JSON types, so the tool's schema decides: a parameter typed "string" (or not
described at all) streams as a JSON string while the model writes it, which is what makes long code
arguments arrive incrementally; other types are converted when the value is complete: "null" (or "None")
is null for any type that allows null, and an object or array may be written as JSON or as a Python
literal (templates that render values with Python's repr teach models that). The object is written as
json.dumps(..., ensure_ascii=False) would write it, so whole and streamed results are equal.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring

import regex

from .literals import literal_value

_NUMBER = regex.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_INTEGER = regex.compile(r"-?(?:0|[1-9]\d*)")


def dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def string_fragment(text: str) -> str:
    """text as it appears inside a JSON string (escapes are per character, so pieces concatenate);
    encode_basestring is what json.dumps(text, ensure_ascii=False) runs."""
    return encode_basestring(text)[1:-1]


def value_types(schema: dict, key: str) -> tuple[str, ...]:
    """The JSON types the tool's schema allows for parameter `key`; () when it does not say."""
    properties = schema.get("properties")
    prop = properties.get(key) if isinstance(properties, dict) else None
    return _types_of(prop) if isinstance(prop, dict) else ()


def _types_of(prop: dict, depth: int = 0) -> tuple[str, ...]:
    found = prop.get("type")
    types = [found] if isinstance(found, str) else [t for t in found if isinstance(t, str)] if isinstance(found, list) else []
    for key in ("anyOf", "oneOf"):
        options = prop.get(key)
        if isinstance(options, list) and depth < 8:  # a request's schema is untrusted: bound the recursion
            for option in options:
                if isinstance(option, dict):
                    types += [t for t in _types_of(option, depth + 1) if t not in types]
    enum = prop.get("enum")
    if not types and isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
        types = ["string"]
    return tuple(types)


def convert(text: str, types: tuple[str, ...], untyped_as_json: bool) -> str:
    """A complete text value -> its JSON text, trying the schema's types in order (null first: a value
    typed ["string", "null"] written as null is null, not the text "null"); text that fits none stays a
    string. Untyped values are strings (qwen3_coder) or JSON when they parse (glm45).

    >>> convert("null", ("string", "null"), False), convert("{'a': [1, None]}", ("object",), False)
    ('null', '{"a": [1, null]}')
    """
    stripped = text.strip()
    if not types:
        types = ("json",) if untyped_as_json else ("string",)
    if "null" in types and stripped.lower() in ("null", "none"):
        return "null"
    for kind in types:
        if kind == "string":
            return dumps(text)
        if kind == "integer" and _INTEGER.fullmatch(stripped):
            return str(int(stripped))
        if kind in ("number", "float") and _NUMBER.fullmatch(stripped):  # "float": real tool schemas use it
            return stripped
        if kind == "boolean" and stripped.lower() in ("true", "false"):
            return stripped.lower()
        if kind in ("object", "array", "json"):
            value = _structured(stripped, kind)
            if value is not None:
                return value
    if stripped.lower() in ("null", "none"):
        return "null"  # an optional parameter the model left empty
    return dumps(text)


def _structured(text: str, kind: str) -> str | None:
    """JSON text for an "object" or "array" value (JSON, else a Python literal) or an untyped one (JSON
    only), or None when the text is none of that."""
    try:
        value = literal_value(text, json_first=True) if kind != "json" else json.loads(text)
        if kind == "json" or isinstance(value, dict if kind == "object" else list):
            return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (ValueError, RecursionError):
        pass
    return None


def streams_as_string(types: tuple[str, ...], untyped_as_json: bool) -> bool:
    return types == ("string",) or (not types and not untyped_as_json)


class TextValuedArgs:
    """Mixin for ToolParser: write {"key": value, ...} as keys and values are read.

    A format calls _begin_args after committing a call; _params_mode then reads one parameter after
    another and _value_mode streams each value. The format says what its markup looks like:
    param_open (group "key") opens a parameter; value_end ends a value (group "own" set when the match
    is the value's own closing tag, consumed, else the value just stops there and the parameters read
    on), with value_end_prefixes and value_end_hold from marker_prefixes; call_end ends the call's
    parameters, and _mode_after_call picks the mode that follows it.

    A format may name wrapper_keys: DeepSeek V3.2 and V4 sometimes put all the arguments in one first
    parameter called "arguments" or "input" that the tool's schema does not have. Such a value is read
    whole; when it is an object whose keys the schema has, its members are the arguments themselves
    (a call that validates against its tool), else it stays the parameter it says it is.
    """

    untyped_as_json = False
    strip_value_newlines = False  # drop one "\n" after the opening tag and one before the closing tag
    wrapper_keys: tuple[str, ...] = ()  # first parameters that may wrap all the arguments (see above)
    # every format sets these (class attributes: patterns and data, never bound methods)
    param_open: regex.Pattern
    value_end: regex.Pattern
    value_end_prefixes: frozenset
    value_end_hold: int
    call_end: regex.Pattern

    def _invoke(self, pattern, final: bool, reject_len: int) -> bool:
        """Open the call a header match names (its "fname" group) and read its parameters; a header with
        no name is rejected as `reject_len` characters of content."""
        m = self._match(pattern, final)
        if m is None:
            return False
        if not m or not m["fname"].strip():
            return self._reject_opening(reject_len)
        self._consume(m.end())
        self._open_call(m["fname"].strip())
        self._begin_args()
        return True

    def _begin_args(self) -> None:
        self._arg_count = 0
        self._mode = self._params_mode

    def _params_mode(self, final: bool) -> bool:
        param = self._match(self.param_open, final)
        if param:
            self._consume(param.end())
            self._begin_value(param["key"].strip(), param)
            return True
        end = self._match(self.call_end, final)
        if end:
            self._consume(end.end())
            self._end_args()
            self._mode = self._mode_after_call(end)
            return True
        if param is None or end is None:
            return False
        # the end of the stream, or text that is no parameter: the call ends at this clean boundary
        self._end_args()
        self._mode = self._content_mode
        return True

    def _mode_after_call(self, end):
        """The mode once call_end's match `end` is consumed: content, unless the format has more to read."""
        return self._content_mode

    def _end_args(self) -> None:
        self._args("}" if self._arg_count else "{}")
        self._close_call()

    def _begin_value(self, key: str, param=None) -> None:
        types = self._param_types(key, param)
        self._wrapper = key if not self._arg_count and key in self.wrapper_keys and self._lacks(key) else None
        if self._wrapper is None:
            self._write_key(key)
        self._value_types = types
        self._value_streams = self._wrapper is None and streams_as_string(types, self.untyped_as_json)
        self._value_raw = []
        self._value_begun = not self.strip_value_newlines
        if self._value_streams:
            self._args('"')
        self._mode = self._value_mode

    def _write_key(self, key: str) -> None:
        self._args(("{" if not self._arg_count else ", ") + dumps(key) + ": ")
        self._arg_count += 1

    def _properties(self) -> dict:
        properties = (self._schemas.get(self._call_name) or {}).get("properties")
        return properties if isinstance(properties, dict) else {}

    def _lacks(self, key: str) -> bool:
        """The tool's schema describes parameters, and not this one."""
        properties = self._properties()
        return bool(properties) and key not in properties

    def _write_value(self) -> None:
        """A value read whole, converted by its types; a wrapper's object becomes the arguments' members."""
        raw = "".join(self._value_raw)
        if self._wrapper is not None:
            members = _members(raw, self._properties())
            if members is not None:
                if members[1]:
                    self._args("{" + members[0])
                self._arg_count = members[1]
                return
            self._write_key(self._wrapper)
        self._args(convert(raw, self._value_types, self.untyped_as_json))

    def _param_types(self, key: str, param) -> tuple[str, ...]:
        """The types a value may take: the tool's schema's; a format whose markup types its values
        (param: the param_open match) says so here."""
        return value_types(self._schemas.get(self._call_name) or {}, key)

    def _value_mode(self, final: bool) -> bool:
        buf = self._buf
        if not self._value_begun:
            if not buf:
                return False
            self._value_begun = True
            if buf[0] == "\n":
                self._consume(1)
                return True
        if not final and buf and "<" not in buf and buf[-1] != "\n":  # the usual token: more of the value
            self._value_piece(buf)  # (every value end begins with "<"; a final "\n" may be formatting)
            self._buf = ""
            return False
        m = self.value_end.search(buf)
        if m is None:
            if final:  # cut off inside a value: the call keeps what was written, left open
                self._value_piece(buf)
                self._buf = ""
                if not self._value_streams:
                    self._write_value()
                return False
            keep = self._held_end_prefix(buf)
            if self.strip_value_newlines and len(buf) > keep and buf[len(buf) - keep - 1] == "\n":
                keep += 1
            if len(buf) > keep:
                self._value_piece(buf[: len(buf) - keep])
                self._consume(len(buf) - keep)
            return False
        piece = buf[: m.start()]
        if self.strip_value_newlines and piece.endswith("\n"):
            piece = piece[:-1]
        self._value_piece(piece)
        if self._value_streams:
            self._args('"')
        else:
            self._write_value()
        self._consume(m.end() if m["own"] is not None else m.start())
        self._mode = self._params_mode
        return True

    def _value_piece(self, text: str) -> None:
        if self._value_streams:
            self._args(string_fragment(text))
        else:
            self._value_raw.append(text)

    def _held_end_prefix(self, buf: str) -> int:
        return held_marker_prefix(buf, self.value_end_prefixes, self.value_end_hold)


def _members(text: str, properties: dict) -> tuple[str, int] | None:
    """A wrapper's value -> (the JSON text of its object's members, how many), when it is an object whose
    keys the tool's schema describes; else None."""
    try:
        inner = literal_value(text.strip(), json_first=True)
        if isinstance(inner, dict) and inner.keys() <= properties.keys():
            return json.dumps(inner, ensure_ascii=False, allow_nan=False)[1:-1], len(inner)
    except (ValueError, RecursionError):
        pass
    return None


def held_marker_prefix(buf: str, prefixes: frozenset, hold: int) -> int:
    """The length of buf's tail that may still become one of the markers (from marker_prefixes)."""
    pos = buf.find("<", max(0, len(buf) - hold))
    while pos >= 0:
        if buf[pos:] in prefixes:
            return len(buf) - pos
        pos = buf.find("<", pos + 1)
    return 0


def marker_prefixes(*markers: str) -> tuple[frozenset, int]:
    """The proper prefixes of markers (all starting with "<") and the longest of them."""
    return frozenset(m[:k] for m in markers for k in range(1, len(m))), max(map(len, markers)) - 1
