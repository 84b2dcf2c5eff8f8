"""Regex pieces for single JSON values: strings (any, length-bounded, matching a pattern), integers in a
range, numbers, and literals. Every piece is a subset of what it names, chosen so that what the model
writes decodes with `json.loads` to a value of the right kind:

- a string character is any character but `"`, `\\` and controls, or an escape; `\\u` escapes are either
  one non-surrogate code unit or a whole surrogate pair, so each escape is exactly one character (length
  limits count right, and no lone surrogate is produced);
- integers have at most 19 digits and numbers at most 16 digits before the point, 16 after it and a
  2-digit exponent: no value overflows to infinity and no digit run goes on forever.
"""

from __future__ import annotations

import json

from tokworker.constrain.regex_syntax import ALT, CAT, REP, SET, literal, to_regex

_ESCAPE = (r'\\["\\/bfnrt]'
           r"|\\u(?:[0-9a-ce-fA-CE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2})"
           r"|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}")
STRING_CHAR = r'(?:[^"\\\x00-\x1f]|' + _ESCAPE + ")"
MAX_INTEGER = 10**19 - 1
INTEGER = r"-?(?:0|[1-9][0-9]{0,18})"
NUMBER = r"-?(?:0|[1-9][0-9]{0,15})(?:\.[0-9]{1,16})?(?:[eE][+-]?[0-9]{1,2})?"
BOOLEAN = "(?:true|false)"
NULL = "null"

FORMATS = {
    "date": r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])",
    "time": r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])",
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
}
FORMATS["date-time"] = FORMATS["date"] + "T" + FORMATS["time"]


def regex_escape(text: str) -> str:
    """`text` as a regex matching exactly it."""
    return to_regex(literal(text))


def json_literal(value, item_separator=", ", key_separator=": ") -> str:
    """A regex matching `value` serialized the way json.dumps does (no ASCII escaping)."""
    return regex_escape(json.dumps(value, ensure_ascii=False, separators=(item_separator, key_separator)))


def string(min_length: int = 0, max_length: int | None = None) -> str:
    if min_length == 0 and max_length is None:
        return f'"{STRING_CHAR}*"'
    upper = "" if max_length is None else str(max_length)
    return f'"{STRING_CHAR}{{{min_length},{upper}}}"'


def _encode_set(ranges):
    """A code point set as the JSON text that encodes one of its characters (json.dumps' escapes)."""
    plain, escaped = [], []
    for lo, hi in ranges:
        for cp in range(lo, min(hi, 0x22) + 1):
            if cp < 0x20 or cp == 0x22:
                escaped.append(cp)
        for cp in (0x5C,):
            if lo <= cp <= hi:
                escaped.append(cp)
        pieces = [(max(lo, 0x20), min(hi, 0x21)), (max(lo, 0x23), min(hi, 0x5B)), (max(lo, 0x5D), min(hi, 0xD7FF)),
                  (max(lo, 0xE000), hi)]
        plain.extend((a, b) for a, b in pieces if a <= b)
    options = [(SET, tuple(plain))] if plain else []
    options += [literal(json.dumps(chr(cp))[1:-1]) for cp in escaped]
    return options[0] if len(options) == 1 else (ALT, tuple(options))


def json_encode_node(node):
    """A regex syntax tree over characters -> the tree of their JSON string encodings."""
    kind = node[0]
    if kind == SET:
        return _encode_set(node[1]) if node[1] else node
    if kind in (CAT, ALT):
        return (kind, tuple(json_encode_node(item) for item in node[1]))
    assert kind == REP
    return (REP, json_encode_node(node[1]), node[2], node[3])


def _same_length_range(lo: str, hi: str) -> str:
    """Regex for the decimal strings of equal length between lo and hi (digits may lead with 0)."""
    if lo == hi:
        return lo
    if len(lo) == 1:
        return f"[{lo}-{hi}]"
    rest = len(lo) - 1
    if lo[0] == hi[0]:
        inner = _same_length_range(lo[1:], hi[1:])
        return lo[0] + (f"(?:{inner})" if "|" in inner else inner)
    options = []
    first_digit, last_digit = int(lo[0]), int(hi[0])
    if lo[1:] != "0" * rest:
        inner = _same_length_range(lo[1:], "9" * rest)
        options.append(lo[0] + (f"(?:{inner})" if "|" in inner else inner))
        first_digit += 1
    upper = None
    if hi[1:] != "9" * rest:
        inner = _same_length_range("0" * rest, hi[1:])
        upper = hi[0] + (f"(?:{inner})" if "|" in inner else inner)
        last_digit -= 1
    if first_digit <= last_digit:
        digits = str(first_digit) if first_digit == last_digit else f"[{first_digit}-{last_digit}]"
        options.append(digits + f"[0-9]{{{rest}}}" if rest > 1 else digits + "[0-9]")
    if upper:
        options.append(upper)
    return "|".join(options)


def _natural_range(lo: int, hi: int) -> list[str]:
    """Regex alternatives for the integers lo..hi (0 <= lo), written without leading zeros."""
    options = []
    for digits in range(len(str(lo)), len(str(hi)) + 1):
        a, b = max(lo, 10 ** (digits - 1) if digits > 1 else 0), min(hi, 10 ** digits - 1)
        if a <= b:
            options.append(_same_length_range(str(a), str(b)))
    return options


def integer(minimum: int | None = None, maximum: int | None = None) -> str | None:
    """Regex for the integers in [minimum, maximum] (at most 19 digits); None when there are none."""
    if minimum is None and maximum is None:
        return INTEGER
    lo = -MAX_INTEGER if minimum is None else max(minimum, -MAX_INTEGER)
    hi = MAX_INTEGER if maximum is None else min(maximum, MAX_INTEGER)
    if lo > hi:
        return None
    options = []
    if lo < 0:
        options += ["-" + (f"(?:{o})" if "|" in o else o) for o in _natural_range(max(1, -hi), -lo)]
    if hi >= 0:
        options += _natural_range(max(0, lo), hi)
    return "|".join(options)


_BOUNDED_INT_DIGITS, _BOUNDED_FRACTION_DIGITS = 9, 6  # 15 significant digits: floats keep the order


def _magnitudes(low: int, high: int | None, low_open: bool, high_open: bool) -> list[str]:
    """Regex alternatives for decimals `k` or `k.f` (no sign, no exponent) whose value m has
    low <= m <= high (strict where open); high None: no upper bound but the digit limits."""
    fraction = rf"\.[0-9]{{1,{_BOUNDED_FRACTION_DIGITS}}}"
    nonzero_fraction = rf"\.[0-9]{{0,{_BOUNDED_FRACTION_DIGITS - 1}}}[1-9]0*"
    zero_fraction = rf"(?:\.0{{1,{_BOUNDED_FRACTION_DIGITS}}})?"
    top = 10 ** _BOUNDED_INT_DIGITS - 1
    high_int = top if high is None else min(high, top)
    if low > high_int:
        return []
    options = []
    if low == high_int and high is not None and high <= top:
        return [f"{low}{zero_fraction}"] if not (low_open or high_open) else []
    options.append(f"{low}{nonzero_fraction if low_open else f'(?:{fraction})?'}")
    middle_high = high_int - 1 if high is not None and high <= top else high_int
    for part in _natural_range(low + 1, middle_high) if low + 1 <= middle_high else []:
        options.append(f"(?:{part})(?:{fraction})?")
    if high is not None and high <= top and not high_open:
        options.append(f"{high}{zero_fraction}")
    return options


def number(minimum: int | None, maximum: int | None, exclusive_minimum: bool = False,
           exclusive_maximum: bool = False) -> str | None:
    """Regex for decimals (no exponent) between integer bounds; None when there are none. At most 9
    digits before the point and 6 after it, so float conversion cannot carry a value across a bound."""
    options = []
    if minimum is None or minimum < 0:
        # negative values: magnitude in (max(0, -maximum), -minimum]
        low = 0 if maximum is None or maximum >= 0 else -maximum
        low_open = maximum is None or maximum >= 0 or exclusive_maximum
        high = None if minimum is None else -minimum
        options += ["-" + o for o in _magnitudes(low, high, low_open, exclusive_minimum)]
    if maximum is None or maximum >= 0:
        low = 0 if minimum is None or minimum < 0 else minimum
        low_open = minimum is not None and minimum >= 0 and exclusive_minimum
        options += _magnitudes(low, maximum, low_open, exclusive_maximum)
    return "|".join(f"(?:{o})" for o in options) or None
