"""JSON numbers read the way `tokenizers` reads them: serde_json's default float parsing.

serde_json (without its float_roundtrip feature, which `tokenizers` does not enable) gathers a number's
digits into a u64 and applies one multiplication or division by a power of ten. Past 2^53 the digits are
rounded to a float first, then the division rounds again, so the result can sit one unit in the last place
away from the correctly rounded value Python (and msgspec) produce: "-10.637309763495383" is read as
-10.637309763495384. Unigram scores feed a Viterbi search where such a difference flips near-ties, so a
tokenizer.json's floats are read here exactly as `tokenizers` holds them.
"""

from __future__ import annotations

from itertools import compress, repeat
from operator import contains, eq, gt, sub, truediv

_POW10 = [float(f"1e{power}") for power in range(309)]      # Rust's literals 1e0 ..= 1e308
_U64_MAX = (1 << 64) - 1
_SAFE_DIGITS = 19                                              # any 19 digits fit in a u64
_PLAIN_LENGTH = _SAFE_DIGITS + 1            # a number text with a point and at most this many characters
_BY_POINT = [0.0] + _POW10                   # by characters from the point to the end: 10 ** fraction digits


def serde_f64(text: str) -> float:
    """The f64 serde_json reads from the JSON number `text` (already validated as JSON)."""
    mantissa, _, exponent_text = text.lower().partition("e")
    negative = mantissa.startswith("-")
    whole, _, fraction = mantissa.lstrip("-").partition(".")
    exponent = int(exponent_text) if exponent_text else 0
    digits = whole + fraction
    if len(digits) <= _SAFE_DIGITS:
        significand, exponent = int(digits), exponent - len(fraction)
    else:
        significand, exponent = _long_significand(whole, fraction, exponent)
    value = _from_parts(significand, exponent, text)
    return -value if negative else value


def serde_f64_all(texts: list[str]) -> list[float]:
    """serde_f64 of every text, with C-level maps for the plain shape ("-12.345", at most 19 digits, no
    exponent: its digits as one integer over a power of ten, as serde_f64 computes it) and serde_f64 itself
    for the rest. A Unigram vocabulary is 250k scores: one Python call each costs most of a cold load."""
    plain, count = list(texts), len(texts)
    lengths, points = list(map(len, plain)), list(map(str.find, plain, repeat(".")))
    others = set()
    if max(lengths, default=0) > _PLAIN_LENGTH:
        others.update(compress(range(count), map(gt, lengths, repeat(_PLAIN_LENGTH))))
    if -1 in points:
        others.update(compress(range(count), map(eq, points, repeat(-1))))
    joined = "".join(plain)
    for letter in "eE":
        if letter in joined:
            others.update(compress(range(count), map(contains, plain, repeat(letter))))
    for index in others:
        plain[index], lengths[index], points[index] = "0.0", 3, 1
    # the digits as one integer, rounded to a float (float() of an integer text rounds as float(int) does)
    significands = map(float, map(str.replace, plain, repeat("."), repeat("")))
    values = list(map(truediv, significands, map(_BY_POINT.__getitem__, map(sub, lengths, points))))
    for index in others:
        values[index] = serde_f64(texts[index])
    return values


def _long_significand(whole: str, fraction: str, exponent: int) -> tuple[int, int]:
    """Digits past u64 range are dropped: in the integer part each raises the exponent by one; in the
    fraction part the remaining digits are ignored."""
    significand = 0
    for index, digit in enumerate(whole):
        grown = significand * 10 + int(digit)
        if grown > _U64_MAX:
            exponent += len(whole) - index
            break
        significand = grown
    for digit in fraction:
        grown = significand * 10 + int(digit)
        if grown > _U64_MAX:
            break
        significand = grown
        exponent -= 1
    return significand, exponent


def _from_parts(significand: int, exponent: int, text: str) -> float:
    value = float(significand)
    while True:
        if abs(exponent) < len(_POW10):
            if exponent >= 0:
                value *= _POW10[exponent]
                if value == float("inf"):
                    raise ValueError(f"number {text} is out of range")
            else:
                value /= _POW10[-exponent]
            return value
        if value == 0.0:
            return value
        if exponent >= 0:
            raise ValueError(f"number {text} is out of range")
        value /= 1e308
        exponent += 308
