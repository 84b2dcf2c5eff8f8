"""NFC/NFD/NFKC/NFKD exactly as `tokenizers` computes them.

`tokenizers` normalizes with tables older than any supported Python's `unicodedata`. Normalization data is
stable (a decomposition or combining class never changes once assigned), so the two differ only on the
probed "inert" code points: characters `tokenizers` does not know, which it leaves alone (no decomposition,
combining class 0, never composed). Text without them, nearly all text, goes straight to `unicodedata`;
the rest is normalized in Python around each inert character, between ASCII characters (a boundary before
an ASCII character is always safe: ASCII is never decomposed, reordered or composed onto what precedes it).
"""

from __future__ import annotations

import functools
import unicodedata

import regex

from . import boundaries, charset, data

FORMS = ("NFC", "NFD", "NFKC", "NFKD")


@functools.lru_cache(maxsize=1)
def _tables():
    normalization = data()["normalization"]
    inert = tuple(boundaries(normalization["inert"]))
    not_composed = {(chr(a), chr(b)) for a, b in normalization["not_composed"]}
    divergent = inert
    for pair in not_composed:
        for char in pair:
            divergent = charset.union(divergent, charset.of_char(ord(char)))
    divergent_chars = regex.compile("(?V1)" + charset.explicit(divergent))
    # a few hundred characters: a set's isdisjoint over the text is 2-3x faster than the search, and the
    # answer for nearly every text
    divergent_set = frozenset(chr(c) for a, b in charset.ranges(divergent) for c in range(a, b))
    inert_chars = frozenset(chr(c) for a, b in charset.ranges(inert) for c in range(a, b))
    return divergent_chars, divergent_set, inert_chars, not_composed


def normalize(form: str, text: str) -> str:
    """`text` in normalization form `form`, as tokenizers.normalizers.<form>() produces it."""
    if form not in FORMS:
        raise ValueError(f"unknown normalization form {form!r}; expected one of {', '.join(FORMS)}")
    if text.isascii():
        return text
    divergent, divergent_set, inert, not_composed = _tables()
    if divergent_set.isdisjoint(text):
        return unicodedata.normalize(form, text)
    found = divergent.search(text)
    pieces, cursor, length = [], 0, len(text)
    while found is not None:
        start = found.start()
        while start > cursor and text[start - 1] >= "\x80":  # back to an ASCII character (kept in the window)
            start -= 1
        start = max(cursor, start - 1)
        end = found.end()
        while end < length and text[end] >= "\x80":
            end += 1
        pieces.append(unicodedata.normalize(form, text[cursor:start]))
        pieces.append(_normalize_slowly(form, text[start:end], inert, not_composed))
        cursor = end
        found = divergent.search(text, cursor)
    pieces.append(unicodedata.normalize(form, text[cursor:]))
    return "".join(pieces)


def _normalize_slowly(form: str, text: str, inert: frozenset, not_composed: set) -> str:
    decomposition = "NFKD" if form in ("NFKC", "NFKD") else "NFD"
    chars: list[str] = []
    for char in text:
        chars.extend(char if char in inert else unicodedata.normalize(decomposition, char))
    classes = [0 if c in inert else unicodedata.combining(c) for c in chars]
    _reorder(chars, classes)
    if form in ("NFC", "NFKC"):
        chars = _compose(chars, inert, not_composed)
    return "".join(chars)


def _reorder(chars: list[str], classes: list[int]) -> None:
    """Canonical ordering: each run of non-starters stably sorted by combining class, in place."""
    index, length = 0, len(chars)
    while index < length:
        if classes[index] == 0:
            index += 1
            continue
        end = index
        while end < length and classes[end] != 0:
            end += 1
        run = sorted(zip(classes[index:end], range(index, end), chars[index:end]))
        chars[index:end] = [c for _, _, c in run]
        classes[index:end] = [k for k, _, _ in run]
        index = end


def _compose(chars: list[str], inert: frozenset, not_composed: set) -> list[str]:
    """Canonical composition: each character joins the last starter unless something blocks it."""
    out: list[str] = []
    starter = -1
    for char in chars:
        ccc = 0 if char in inert else unicodedata.combining(char)
        if starter >= 0:
            previous = out[-1]
            previous_ccc = 0 if previous in inert else unicodedata.combining(previous)
            blocked = len(out) - 1 != starter and (previous_ccc == 0 or previous_ccc >= ccc)
            if not blocked:
                composite = _composite(out[starter], char, inert, not_composed)
                if composite is not None:
                    out[starter] = composite
                    continue
        if ccc == 0:
            starter = len(out)
        out.append(char)
    return out


def _composite(first: str, second: str, inert: frozenset, not_composed: set) -> str | None:
    if first in inert or second in inert or (first, second) in not_composed:
        return None
    composed = unicodedata.normalize("NFC", first + second)
    return composed if len(composed) == 1 else None
