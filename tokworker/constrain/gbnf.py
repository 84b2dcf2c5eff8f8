"""A regex (the subset regex_syntax parses) as a GBNF grammar, for engines that take one (llama.cpp's
`grammar`): a forced tool call's pattern reaches such an engine as the same language the token masks allow.

    >>> print(regex_to_gbnf(r'<tool_call>\\n\\{"n": (?:"a"|[0-9]+)\\}'))
    root ::= "<tool_call>\\n{\\"n\\": " ("\\"a\\"" | [0-9]+) "}"
"""

from __future__ import annotations

from tokworker.constrain.regex_syntax import ALT, CAT, SET, parse

_STRING_ESCAPES = {ord('"'): '\\"', ord("\\"): "\\\\", ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"}
_CLASS_SPECIAL = {ord("]"), ord("["), ord("\\"), ord("^"), ord("-")}


def regex_to_gbnf(pattern: str) -> str:
    """`root ::= ...` matching exactly the strings `pattern` fully matches (RegexError as parse raises it)."""
    return "root ::= " + _node(parse(pattern), top=True)


def _char(code: int, in_class: bool) -> str:
    if not in_class and code in _STRING_ESCAPES:
        return _STRING_ESCAPES[code]
    if in_class and code in _CLASS_SPECIAL:
        return f"\\x{code:02X}"                  # llama.cpp's parser knows no \^ escape: hex for them all
    if code < 0x20 or code == 0x7F or 0xD800 <= code <= 0xDFFF:
        return f"\\x{code:02X}" if code < 0x100 else f"\\u{code:04X}"
    if code > 0xFFFF and in_class:
        return f"\\U{code:08X}"
    return chr(code)


def _set(ranges) -> str:
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return '"' + _char(ranges[0][0], False) + '"'
    parts = [_char(lo, True) if lo == hi else f"{_char(lo, True)}-{_char(hi, True)}" for lo, hi in ranges]
    return "[" + "".join(parts) + "]"


def _node(node, top: bool = False) -> str:
    kind = node[0]
    if kind == SET:
        return _set(node[1]) if node[1] else "[^\\x00-\\U0010FFFF]"     # the empty set: matches nothing
    if kind == CAT:
        items, text = [], []
        for item in node[1]:
            if item[0] == SET and len(item[1]) == 1 and item[1][0][0] == item[1][0][1]:
                text.append(_char(item[1][0][0], False))          # runs of single characters: one literal
                continue
            if text:
                items.append('"' + "".join(text) + '"')
                text = []
            items.append(_node(item))
        if text:
            items.append('"' + "".join(text) + '"')
        joined = " ".join(items) or '""'
        return joined if top or len(items) <= 1 else f"({joined})"
    if kind == ALT:
        joined = " | ".join(_node(option, top=True) for option in node[1])
        return joined if top else f"({joined})"
    _, child, lo, hi = node
    inner = _node(child)
    if " " in inner and not inner.startswith("("):
        inner = f"({inner})"
    if (lo, hi) == (0, -1):
        return inner + "*"
    if (lo, hi) == (1, -1):
        return inner + "+"
    if (lo, hi) == (0, 1):
        return inner + "?"
    return inner + ("{%d,}" % lo if hi == -1 else "{%d}" % lo if lo == hi else "{%d,%d}" % (lo, hi))
