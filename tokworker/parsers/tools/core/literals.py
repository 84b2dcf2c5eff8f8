"""Python literals read as JSON values, without eval: pythonic calls' arguments, and object or array values
a template wrote with Python's repr (Apriel renders `{'city': 'Paris'}`; qwen3_coder models copy it).

The text is parsed (ast.parse builds a tree and runs nothing) and only literal nodes are read: strings,
numbers, True/False/None and JSON's own spellings true/false/null (models mix them), lists, tuples and
dicts. Anything else (a name, a call, an operator) is not a literal.

    >>> literal_json("{'city': 'Paris', 'days': (1, 2), 'ok': true, 'unit': None}")
    '{"city": "Paris", "days": [1, 2], "ok": true, "unit": null}'
    >>> literal_json("__import__('os')") is None
    True
"""

from __future__ import annotations

import ast
import json
import warnings

_NAMES = {"true": True, "false": False, "null": None}
_NOT_LITERAL = (ValueError, TypeError, SyntaxError, MemoryError, RecursionError)
_OPENERS, _CLOSERS = "([{", ")]}"


def literal_value(text: str, json_first: bool = False):
    """A Python literal or JSON text -> its value; ValueError when it is neither. The two read a few
    strings apart ("\\/" is "/" in JSON, two characters in Python): json_first says which reading wins."""
    readers = (_json, _python) if json_first else (_python, _json)
    for read in readers:
        try:
            return read(text)
        except _NOT_LITERAL:
            pass
    raise ValueError("not a literal")


def _json(text: str):
    return json.loads(text)


def _python(text: str):
    with warnings.catch_warnings():  # "\d" in a string is an invalid escape: a warning, not an error
        warnings.simplefilter("ignore")
        tree = ast.parse(text.strip(), mode="eval")
    return _value(tree.body)


def literal_json(text: str) -> str | None:
    """A Python (or JSON) literal -> JSON text, or None when it is neither or has no JSON form (a set,
    bytes, an infinite float)."""
    try:
        return json.dumps(literal_value(text), ensure_ascii=False, allow_nan=False)
    except _NOT_LITERAL:
        return None


def _value(node):
    if isinstance(node, ast.Constant) and (node.value is None or type(node.value) in (str, int, float, bool)):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(item) for item in node.elts]
    if isinstance(node, ast.Dict) and None not in node.keys:  # a None key is a **spread
        return {_value(key): _value(value) for key, value in zip(node.keys, node.values)}
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd))
            and isinstance(node.operand, ast.Constant) and type(node.operand.value) in (int, float)):
        return -node.operand.value if isinstance(node.op, ast.USub) else node.operand.value
    raise ValueError("not a literal")


class LiteralEnd:
    """Where a Python literal that arrives in pieces ends: at the first "," or closing bracket outside its
    own brackets and strings (triple-quoted ones too), or, for a `bracketed` literal, just after the bracket
    that closes its first one. `find(buf, final)` scans on from where the last call stopped (so text fed a
    character at a time is scanned once) and returns that index, or None while the literal goes on."""

    __slots__ = ("_at", "_depth", "_quote", "_escaped", "_bracketed")

    def __init__(self, start: int, bracketed: bool = False):
        self._at, self._depth, self._quote, self._escaped = start, 0, "", False
        self._bracketed = bracketed

    def find(self, buf: str, final: bool) -> int | None:
        i, depth, quote, escaped = self._at, self._depth, self._quote, self._escaped
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
                if not depth:  # a bracket the literal did not open: whatever holds the literal closes
                    self._at = i
                    return i
                depth -= 1
                if not depth and self._bracketed:
                    self._at = i + 1
                    return i + 1
            elif c == "," and not depth:
                self._at = i
                return i
            i += 1
        self._at, self._depth, self._quote, self._escaped = i, depth, quote, escaped
        return None
