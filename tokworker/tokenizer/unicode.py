"""`tokenizers`' own Unicode, not Python's: regex class translation, normalization, character predicates.

`tokenizers` matches Split regexes with Oniguruma, normalizes with its own older tables and classifies
characters with Rust's tables; Python's `regex`/`unicodedata` use other Unicode versions, which gives wrong
ids on thousands of newer code points. Models were trained with `tokenizers`' behaviour, so that is what
this module reproduces, from data probed out of the libraries themselves (tools/probe_unicode.py ->
unicode_data/tables.zlib). `tiktoken` vocabularies are matched against tiktoken's own regex engine.

Each predicate is also offered as a `regex` bracket body (`WHITESPACE_CLASS`, ...: explicit ranges, valid
in V0 and V1 patterns) so a pre-tokenizer can use one compiled regex instead of a call per character.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
import zlib

import regex

from . import precomputed
from .unicode_data import TABLES, charset, data, predicate
from .unicode_data.charset import Atoms
from .unicode_data.normalization import normalize
from .unicode_data.pattern import Translator, UnsupportedPattern

__all__ = ["translate_pattern", "compile_pattern", "normalize", "UnsupportedPattern", "is_whitespace",
           "is_bert_whitespace", "is_punctuation", "is_control", "is_chinese_char", "is_alphanumeric",
           "is_numeric", "to_lowercase", "strip_accents", "bert_strip_accents", "WHITESPACE_CLASS", "BERT_WHITESPACE_CLASS",
           "PUNCTUATION_CLASS", "CONTROL_CLASS", "CHINESE_CLASS", "WORD_CLASS", "NUMERIC_CLASS", "script",
           "script_table", "script_names"]

FLAVORS = ("tokenizers", "tiktoken")


@functools.lru_cache(maxsize=2)
def _atoms(flavor: str) -> Atoms:
    return Atoms(flavor)


@functools.lru_cache(maxsize=128)
def translate_pattern(pattern: str, flavor: str = "tokenizers") -> str:
    """A `regex`-module pattern (V1, self-contained: compile it with no flags) matching exactly what
    `flavor`'s engine matches with `pattern`: "tokenizers" (Oniguruma) or "tiktoken" (Rust regex)."""
    if flavor not in FLAVORS:
        raise ValueError(f"unknown regex flavor {flavor!r}; expected one of {FLAVORS}")
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be str, not {type(pattern).__name__}")
    # translating classes against the probed tables costs a large pattern (o200k's) most of a warm load
    name = precomputed.digest(pattern.encode("utf-8"), "pattern", flavor, _tables_fingerprint())
    return precomputed.text(name, lambda: Translator(pattern, flavor, _atoms(flavor)).translate())


@functools.lru_cache(maxsize=1)
def _tables_fingerprint() -> str:
    """The translator's inputs besides the pattern: its code and the probed tables."""
    from pathlib import Path
    folder = Path(__file__).resolve().parent / "unicode_data"
    return precomputed.digest(b"".join((folder / name).read_bytes()
                                       for name in ("tables.zlib", "charset.py", "pattern.py")))


@functools.lru_cache(maxsize=128)
def compile_pattern(pattern: str, flavor: str = "tokenizers") -> regex.Pattern:
    """translate_pattern, compiled (cached)."""
    return regex.compile(translate_pattern(pattern, flavor))


def bracket_body(bounds) -> str:
    """Explicit ranges for use inside [...] in any `regex` version mode."""
    return "".join(charset.escape(a) if b == a + 1 else f"{charset.escape(a)}-{charset.escape(b - 1)}"
                   for a, b in charset.ranges(bounds))


class _Members:
    """Fast membership for one probed set: a frozenset when small, bisect over boundaries otherwise."""

    def __init__(self, bounds):
        self.bounds = bounds
        size = sum(b - a for a, b in charset.ranges(bounds))
        self.chars = frozenset(chr(c) for a, b in charset.ranges(bounds) for c in range(a, b)) \
            if size <= 50_000 else None

    def __call__(self, ch: str) -> bool:
        if self.chars is not None:
            return ch in self.chars
        return bisect.bisect_right(self.bounds, ord(ch)) % 2 == 1


_whitespace = _Members(predicate("whitespace"))
_bert_whitespace = _Members(predicate("bert_whitespace"))
_punctuation = _Members(predicate("punctuation"))
_control = _Members(predicate("control"))
_chinese = _Members(predicate("chinese"))
_numeric = _Members(predicate("numeric"))
_word = _Members(predicate("word"))

WHITESPACE_CLASS = bracket_body(predicate("whitespace"))  # char::is_whitespace (WhitespaceSplit, Bert)
BERT_WHITESPACE_CLASS = bracket_body(predicate("bert_whitespace"))  # BertNormalizer clean_text -> " "
PUNCTUATION_CLASS = bracket_body(predicate("punctuation"))  # Punctuation / BertPreTokenizer split points
CONTROL_CLASS = bracket_body(predicate("control"))  # BertNormalizer clean_text removes these
CHINESE_CLASS = bracket_body(predicate("chinese"))  # BertNormalizer handle_chinese_chars
NUMERIC_CLASS = bracket_body(predicate("numeric"))  # Digits pre-tokenizer (char::is_numeric)
WORD_CLASS = bracket_body(predicate("word"))  # Whitespace pre-tokenizer: Rust regex \w+|[^\w\s]+


def is_whitespace(ch: str) -> bool:
    """Rust char::is_whitespace: WhitespaceSplit and BertPreTokenizer split on these."""
    return _whitespace(ch)


def is_bert_whitespace(ch: str) -> bool:
    """BertNormalizer clean_text turns these into a plain space."""
    return _bert_whitespace(ch)


def is_punctuation(ch: str) -> bool:
    """What the Punctuation and BertPreTokenizer pre-tokenizers isolate (ASCII punctuation or P*)."""
    return _punctuation(ch)


def is_control(ch: str) -> bool:
    """What BertNormalizer clean_text removes (NUL and U+FFFD included)."""
    return _control(ch)


def is_chinese_char(ch: str) -> bool:
    """BertNormalizer handle_chinese_chars puts spaces around these."""
    return _chinese(ch)


def is_numeric(ch: str) -> bool:
    """Rust char::is_numeric, as the Digits pre-tokenizer uses it."""
    return _numeric(ch)


def is_alphanumeric(ch: str) -> bool:
    """The Whitespace pre-tokenizer's word characters: Rust regex's \\w (its pattern \\w+|[^\\w\\s]+ is
    compiled with the regex crate, not Oniguruma: translate_pattern(..., flavor="tiktoken") matches it)."""
    return _word(ch)


@functools.lru_cache(maxsize=1)
def _lowercase_table() -> dict[int, str]:
    return {int(cp): lowered for cp, lowered in data()["predicates"]["lowercase"].items()}


@functools.lru_cache(maxsize=1)
def _strip_table() -> dict[int, None]:
    return {c: None for a, b in charset.ranges(predicate("strip_accents")) for c in range(a, b)}


@functools.lru_cache(maxsize=1)
def _bert_strip_table() -> dict[int, None]:
    return {c: None for a, b in charset.ranges(predicate("bert_strip_accents")) for c in range(a, b)}


def bert_strip_accents(text: str) -> str:
    """BertNormalizer's strip_accents: drops the nonspacing marks (Mn) of its own, older table (apply after
    NFD). Not the StripAccents normalizer's set, which drops every combining mark (Mn, Mc, Me)."""
    if text.isascii():
        return text
    return text.translate(_bert_strip_table())


def to_lowercase(text: str) -> str:
    """The Lowercase normalizer: Rust's char::to_lowercase per character (no final-sigma rule)."""
    if text.isascii():
        return text.lower()
    return text.translate(_lowercase_table())


def strip_accents(text: str) -> str:
    """The StripAccents normalizer: drops the combining marks (Mn, Mc, Me) of its table (apply after NFD)."""
    if text.isascii():
        return text
    return text.translate(_strip_table())


# -- UnicodeScripts' scripts: a separate file (unicode_data/scripts.zlib), read only by a tokenizer that uses them
SCRIPTS = TABLES.with_name("scripts.zlib")


@functools.lru_cache(maxsize=1)
def _scripts() -> tuple[tuple[str, ...], memoryview]:
    stored = json.loads(zlib.decompress(SCRIPTS.read_bytes()))
    starts = list(itertools.accumulate(stored["starts"])) + [0x110000]
    table = bytearray(0x110000)
    for script, start, end in zip(stored["scripts"], starts, starts[1:]):
        if script:
            table[start:end] = bytes((script,)) * (end - start)
    return tuple(stored["names"]), memoryview(table).toreadonly()  # read-only, without a second copy


def script_table() -> memoryview:
    """UnicodeScripts' script of every code point, as a `str.translate` table: byte c is the index into
    script_names() of chr(c)'s script. Index 0 is "ANY" (space, surrogates and everything tokenizers' table
    leaves out): such characters never start a piece. Built on first use (1.1 MB)."""
    return _scripts()[1]


def script_names() -> tuple[str, ...]:
    """Script names by index (named after the `regex` module's script most of their characters have)."""
    return _scripts()[0]


def script(ch: str) -> str:
    """The script UnicodeScripts gives `ch`, with its fixups: Hiragana, Katakana and U+30FC count as HAN,
    a space as ANY."""
    return script_names()[script_table()[ord(ch)]]
