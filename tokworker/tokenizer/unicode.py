"""tokenizers' own Unicode: regex class translation, normalization and character predicates.

FIRST VERSION: falls back to Python's `regex`/`unicodedata` behaviour; probed data replaces it next.
"""

from __future__ import annotations

import functools
import unicodedata

import regex

_FORMS = ("NFC", "NFD", "NFKC", "NFKD")


@functools.lru_cache(maxsize=64)
def translate_pattern(pattern: str, flavor: str = "tokenizers") -> str:
    """A `regex`-module pattern matching exactly what `flavor`'s engine matches with `pattern`."""
    if flavor not in ("tokenizers", "tiktoken"):
        raise ValueError(f"unknown regex flavor {flavor!r}")
    return pattern


@functools.lru_cache(maxsize=64)
def compile_pattern(pattern: str, flavor: str = "tokenizers") -> regex.Pattern:
    return regex.compile(translate_pattern(pattern, flavor))


def normalize(form: str, text: str) -> str:
    if form not in _FORMS:
        raise ValueError(f"unknown normalization form {form!r}")
    if text.isascii():
        return text
    return unicodedata.normalize(form, text)


WHITESPACE_CLASS = r"\s"
PUNCTUATION_CLASS = r"\p{P}"
CONTROL_CLASS = r"\p{Cc}\p{Cf}"
CHINESE_CLASS = r"\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}"
WORD_CLASS = r"\w"


def is_whitespace(ch: str) -> bool:
    return ch.isspace()


def is_punctuation(ch: str) -> bool:
    return unicodedata.category(ch).startswith("P") or (ch.isascii() and not ch.isalnum() and not ch.isspace() and ch.isprintable())


def is_control(ch: str) -> bool:
    return ch not in "\t\n\r" and unicodedata.category(ch) in ("Cc", "Cf")


def is_chinese_char(ch: str) -> bool:
    return regex.match(f"[{CHINESE_CLASS}]", ch) is not None


def is_alphanumeric(ch: str) -> bool:
    return regex.match(r"\w", ch) is not None


def to_lowercase(text: str) -> str:
    return text.lower()


def strip_accents(text: str) -> str:
    """Remove nonspacing marks (Mn); apply after NFD as tokenizers' StripAccents expects."""
    return "".join(c for c in text if unicodedata.category(c) != "Mn")
