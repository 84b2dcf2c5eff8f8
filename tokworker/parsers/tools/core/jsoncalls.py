"""Calls written as JSON objects, {"name": ..., "arguments": {...}}: hermes, llama3_json, the JSON lists.

The fast path reads `{"name": "NAME", "arguments": ` (or "parameters"), commits the call, then streams
the arguments object through the JSON scanner and validates the rest of the call object (extra members
such as mistral's "id"); CallKeys says how a format spells the members. Objects that do not put the
name first, or whose arguments are a JSON string holding JSON (some models write that), are held whole
and decoded once complete.
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

import regex

from .jsonargs import HEADER_LIMIT
from .jsonscan import JsonScanner

# `{"name": "NAME", "arguments": ` up to the arguments' opening brace (not consumed), or `{"name": "NAME"}`;
# Llama 3 sometimes opens with `"type": "function", `. A name is 1 to NAME_LIMIT characters or escapes.
NAME_LIMIT = 256
_CALL_HEADER = (r'\{{\s*(?:{lead})?"{name_key}"\s*:\s*"(?P<name>{name})"\s*'
                r'(?:,\s*"{args_key}"\s*:\s*(?=\{{)|(?P<noargs>\}}))')
_NAME = r'(?:[^"\\\x00-\x1f]|\\.){1,%d}' % NAME_LIMIT
# The same with the name as runs between escapes, of any length: `re` matches that ~2x faster than the
# bounded repeat, and a name past NAME_LIMIT characters is left to the exact pattern.
_NAME_RUNS = r'[^"\\\x00-\x1f]*+(?:\\.[^"\\\x00-\x1f]*+)*+'


class CallKeys(NamedTuple):
    """How a format spells a call object's members: the name's key, the arguments' keys, and members
    that may come before the name (a regex of whole members, each with its comma)."""
    name: tuple[str, ...] = ("name",)
    arguments: tuple[str, ...] = ("arguments", "parameters")
    lead: str = r'"type"\s*:\s*"function"\s*,\s*'
    lead_keys: tuple[str, ...] = ("type",)

    def header(self, name: str) -> str:
        return _CALL_HEADER.format(lead=self.lead, name_key=_either(self.name), args_key=_either(self.arguments),
                                   name=name)

    def object_start(self) -> str:
        """A lookahead for any object whose first key says it is a call: held whole when the fast path
        does not apply."""
        return r'(?=\{\s*"' + _either(self.name + self.arguments + self.lead_keys) + '")'


def _either(keys: tuple[str, ...]) -> str:
    return "(?:" + "|".join(map(re.escape, keys)) + ")"


CALL_KEYS = CallKeys()
CALL_OBJECT = CALL_KEYS.object_start()


def call_head(prefix: str, keys: CallKeys = CALL_KEYS) -> tuple:
    """The pattern `prefix` + the call header twice: `re` (ASCII whitespace) finds a complete header ~4x
    faster than `regex`, which alone can tell whether the text so far may still become one. The prefixes
    and headers allow one way on at each character, so a complete match on the text so far (with a name of
    1 to NAME_LIMIT characters) is the match `regex` gives on it and on any longer text; `regex` decides
    the rest (Unicode whitespace too)."""
    return re.compile(prefix + keys.header(_NAME_RUNS), re.ASCII), regex.compile(prefix + keys.header(_NAME))


_WORD_RUN = re.compile(r"\w+")
# (header pattern, buffer) pairs known to be an unfinished call header. A worker's streams open calls to
# the same few tools the same way, and the partial match this spares costs ~4 us per token. Bounded:
# cleared when full (entries are at most HEADER_LIMIT characters).
_UNDECIDED: set = set()
UNDECIDED_LIMIT = 1024


class JsonCallObjects:
    """Mixin for ToolParser: read one JSON call object at a known position in the buffer."""

    _head_checked = 0  # buffer length when the undecided opening was last matched (0: match now)
    call_keys = CALL_KEYS  # how the format names a call's members (for objects decoded whole)

    def _call_object(self, final: bool, head, fallback, reject_len: int, after) -> bool:
        """head: a call_head() pair; fallback: regex ending in CALL_OBJECT. Commits the call
        (then `after` runs once the object closes), waits, or rejects reject_len characters.

        While the call is undecided, text made only of word characters (a name or key arriving in
        pieces) is not re-matched: the buffer's state is as if that text came with the next piece, so
        the result is the same (parsing is split-invariant) and the header costs one match per piece
        that can change it, not one per token. Anything else, the end, or the length limit re-matches."""
        buf = self._buf
        checked = self._head_checked
        if checked and not final and len(buf) <= HEADER_LIMIT and _WORD_RUN.fullmatch(buf, checked):
            return False
        self._head_checked = 0
        complete, partial = head
        if not final and (partial, buf) in _UNDECIDED:
            self._head_checked = len(buf)
            return False
        m = complete.match(buf)
        if m is None or not 0 < len(m["name"]) <= NAME_LIMIT:
            m = self._match(partial, final)
        if m is None:
            if len(_UNDECIDED) >= UNDECIDED_LIMIT:
                _UNDECIDED.clear()
            _UNDECIDED.add((partial, buf))
            self._head_checked = len(buf)
            return False
        name = decode_json_string(m["name"]) if m else None
        if name:
            self._consume(m.end())
            self._open_call(name)
            if m["noargs"] is not None:
                self._args("{}")
                self._close_call()
                self._mode = after
            else:
                self._after_object = after
                self._stream_json_args(self._object_rest_mode)
            return True
        whole = self._match(fallback, final)
        if whole is None:
            self._head_checked = len(buf)
            return False
        if whole:
            self._whole_start = whole.end()
            self._whole_scanned = whole.end()
            self._whole_scanner = JsonScanner()
            self._whole_reject, self._after_object = reject_len, after
            self._mode = self._whole_object_mode
            return True
        return self._reject_opening(reject_len)

    def _object_rest_mode(self, final: bool) -> bool:
        """The arguments closed: validate the rest of the call object up to its closing brace."""
        if self._buf[:1] == "}":  # the usual end, nothing after the arguments: what the scanner would say
            self._consume(1)
            self._close_call()
            self._mode = self._after_object
            return True
        self._scanner = JsonScanner(inside_object=True)
        self._mode = self._object_tail_mode
        return True

    def _object_tail_mode(self, final: bool) -> bool:
        buf = self._buf
        if not buf:
            return False
        scanner = self._scanner
        end = scanner.scan(buf, 0)
        self._consume(end)
        if scanner.done:
            self._close_call()
            self._mode = self._after_object
            return True
        if scanner.error:
            return self._break_call()
        return False

    def _whole_object_mode(self, final: bool) -> bool:
        buf, scanner = self._buf, self._whole_scanner
        end = scanner.scan(buf, self._whole_scanned)
        self._whole_scanned = end
        if scanner.done:
            call = _decode_call(buf[self._whole_start:end], self.call_keys)
            if call is not None:
                self._consume(end)
                self._open_call(call[0])
                self._args(call[1])
                self._close_call()
                self._mode = self._after_object
                return True
            return self._reject_opening(self._whole_reject)
        if scanner.error or final:
            return self._reject_opening(self._whole_reject)
        return False


def decode_json_string(body: str) -> str | None:
    """The text between a JSON string's quotes -> its value, or None if it is not valid JSON."""
    if "\\" not in body:  # no escapes: the text is the value (the patterns exclude quotes and controls)
        return body
    try:
        return json.loads(f'"{body}"')
    except ValueError:
        return None


def _decode_call(text: str, keys: CallKeys) -> tuple[str, str] | None:
    """A complete call object in any key order -> (name, arguments JSON), or None if it is not a call."""
    try:
        call = json.loads(text)
    except ValueError:
        return None
    if not isinstance(call, dict):
        return None
    name = next((call[k] for k in keys.name if k in call), None)
    if not isinstance(name, str) or not name:
        return None
    arguments = next((call[k] for k in keys.arguments if k in call), None)
    if arguments is None:
        return name, "{}"
    if isinstance(arguments, dict):
        return name, json.dumps(arguments, ensure_ascii=False)
    if isinstance(arguments, str):  # arguments written as a JSON string holding the object
        try:
            return (name, arguments) if isinstance(json.loads(arguments), dict) else None
        except ValueError:
            return None
    return None
