"""Call ids: what a client sends back with each tool result, in the shape the model's template takes back.

Every id is drawn whole from os.urandom: unique across streams, workers, daemons and restarts with no
shared state (a forked child draws its own), and nothing in one id tells the next. A call costs one
getrandom system call, about a microsecond.

    >>> import re
    >>> bool(re.fullmatch(r"call_[0-9a-f]{24}", call_id("openai", "f", 0)))
    True
    >>> bool(re.fullmatch(r"[0-9A-Za-z]{9}", call_id("alnum9", "f", 0)))
    True
    >>> call_id("functions", "get_weather", 2)
    'functions.get_weather:2'
"""

from __future__ import annotations

import os

_ALNUM = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_ALNUM_BYTES = 256 - 256 % 62  # bytes below this map onto the 62 characters evenly (b % 62)


def call_id(style: str, name: str, index: int) -> str:
    """A new call id. "openai": call_ + 24 hex digits (96 random bits). "alnum9": 9 letters and digits
    (53 random bits; Mistral's templates raise on anything else). "functions": functions.NAME:INDEX, as
    Kimi K2 writes its calls (index: the call's place in the answer, as the template numbers calls: the
    model's own id, not a random one)."""
    if style == "functions":
        return f"functions.{name}:{index}"
    if style == "alnum9":
        chars = ""
        while len(chars) < 9:
            chars += "".join(_ALNUM[b % 62] for b in os.urandom(12) if b < _ALNUM_BYTES)
        return chars[:9]
    return "call_" + os.urandom(12).hex()
