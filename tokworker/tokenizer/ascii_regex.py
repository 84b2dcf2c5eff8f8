"""An ASCII twin of a `regex`-module pattern, compiled with the standard `re` module.

Pre-tokenization is mostly regex time, and `re` splits ASCII text about twice as fast as `regex`. On text
that is all ASCII (`str.isascii()` is O(1)), only each character class's ASCII members matter, so every
class or property escape is replaced by the explicit set of ASCII characters it matches (asked of `regex`
itself, so the translated Unicode semantics carry over), and the rest of the syntax is kept. Anything this
does not understand gives None: the caller keeps using the `regex` pattern. A twin that disagrees with its
original on a sample of ASCII text is rejected too.
"""

from __future__ import annotations

import random
import re
from functools import cached_property

import regex

_ASCII = [chr(c) for c in range(128)]
_CLASS_ESCAPES = set("sSdDwWhH")
_KEPT_ESCAPES = set("AbBZ") | set("nrtfv0aex") | set("\\.^$|?*+()[]{}-/'\"#&~!%,:;<=>@`_ ")
_VERSION_PREFIX = re.compile(r"\(\?V[01]\)")


def ascii_twin(pattern: str) -> re.Pattern | None:
    """A `re` pattern that matches exactly like `regex.compile(pattern)` on ASCII-only text, or None."""
    try:
        source = _translate(pattern)
        twin = re.compile(source)
    except (ValueError, re.error, regex.error, IndexError):
        return None
    original = regex.compile(pattern)
    if twin.groups != original.groups:
        return None
    for sample in _SAMPLES:
        if twin.findall(sample) != original.findall(sample) or twin.split(sample) != original.split(sample):
            return None
    return twin


def _translate(pattern: str) -> str:
    version = "(?V1)" if "(?V1)" in pattern else ""
    body = _VERSION_PREFIX.sub("", pattern)
    if "(?" in body.replace("(?:", "").replace("(?=", "").replace("(?!", "").replace("(?<=", "") \
            .replace("(?<!", "").replace("(?>", ""):
        raise ValueError("inline flags or named groups")
    out, i = [], 0
    while i < len(body):
        char = body[i]
        if char == "[":
            end = _class_end(body, i)
            out.append(_ascii_class(version + body[i:end]))
            i = end
        elif char == "\\":
            end = _escape_end(body, i)
            escape = body[i:end]
            letter = escape[1]
            if letter in "pP" or letter in _CLASS_ESCAPES:
                out.append(_ascii_class(version + escape))
            elif letter in "xuU" or (len(escape) == 2 and letter in _KEPT_ESCAPES):
                out.append(escape)
            else:
                raise ValueError(f"escape {escape!r}")
            i = end
        else:
            out.append(char)
            i += 1
    return "".join(out)


class StandIns(dict):
    """Code point -> an ASCII character that no part of `pattern` tells from it (the same answer from every
    character class, property, escape and literal of the pattern, and from `\\w`, `.` and `\\n`, which
    boundaries and anchors read). A text with every character replaced by its stand-in matches the
    pattern at the same places, so the pattern's ASCII twin, run on it, gives the original's spans: how a
    piece holding a few accented letters or an emoji avoids the slower `regex` module. Filled as
    characters are met (bounded); a character without a stand-in (a CJK text's, for a pattern with a
    class of its own for them) raises NoStandIn, and the caller falls back to `regex`."""

    def __init__(self, pattern: str):
        super().__init__()
        self._atoms = _atoms(pattern) + ["\\w", ".", "\\n"]
        self._lost: set[int] = set()

    @cached_property
    def _tests(self):
        return [regex.compile(atom).fullmatch for atom in self._atoms]

    @cached_property
    def _by_signature(self) -> dict:
        found = {}
        for char in reversed(_ASCII):
            found[self._signature(char)] = char
        return found

    def _signature(self, char: str) -> tuple:
        return tuple(test(char) is not None for test in self._tests)

    def __missing__(self, code: int) -> str:
        if code in self._lost:
            raise NoStandIn
        stand_in = self._by_signature.get(self._signature(chr(code)))
        if len(self) + len(self._lost) >= _STAND_IN_LIMIT:
            self.clear()
            self._lost.clear()
        if stand_in is None:
            self._lost.add(code)
            raise NoStandIn
        self[code] = stand_in
        return stand_in

    def ascii_text(self, text: str) -> tuple[str, list[tuple[int, int]]] | None:
        """`text` with its non-ASCII characters replaced by their stand-ins, and the (start, end) spans of
        the runs replaced; None when a character has no stand-in.

        >>> StandIns("[a-z]+|[^a-z]+").ascii_text("naïve café")
        ('na0ve caf0', [(2, 3), (9, 10)])
        """
        runs = []
        append = runs.append

        def replace(run: re.Match) -> str:
            append(run.span())
            return run.group().translate(self)
        try:
            return _NON_ASCII_RUN(replace, text), runs
        except NoStandIn:
            return None


class NoStandIn(Exception):
    """A character that every ASCII character differs from somewhere in the pattern."""


_NON_ASCII_RUN = re.compile("[^\\x00-\\x7f]+").sub
_STAND_IN_LIMIT = 1 << 16


def _atoms(pattern: str) -> list[str]:
    """Every class, property escape, character escape and literal character of `pattern`, each a pattern
    of one character. Syntax characters come out as literals too: an extra atom only makes stand-ins
    rarer, never wrong."""
    version = "(?V1)" if "(?V1)" in pattern else ""
    body = _VERSION_PREFIX.sub("", pattern)
    atoms, i = [], 0
    while i < len(body):
        if body[i] == "[":
            end = _class_end(body, i)
        elif body[i] == "\\":
            end = _escape_end(body, i)
        else:
            end = i + 1
        atom = body[i:end]
        atoms.append(version + (atom if atom[0] in "[\\" else regex.escape(atom)))
        i = end
    return list(dict.fromkeys(atoms))


def _escape_end(body: str, i: int) -> int:
    letter = body[i + 1]
    if letter in "pP":
        return body.index("}", i) + 1 if body[i + 2] == "{" else i + 3
    if letter == "x":
        return body.index("}", i) + 1 if body[i + 2] == "{" else i + 4
    if letter == "u":
        return i + 6
    if letter == "U":
        return i + 10
    return i + 2


def _class_end(body: str, i: int) -> int:
    """Index after the `]` closing the (possibly nested, V1) class opened at body[i]."""
    depth, j = 0, i
    while j < len(body):
        char = body[j]
        if char == "\\":
            j = _escape_end(body, j)
            continue
        if char == "[":
            if body.startswith("[:", j):
                j = body.index(":]", j) + 2
                continue
            depth += 1
            j += 1
            if body.startswith("^", j):
                j += 1
            if body.startswith("]", j):       # a leading "]" is literal
                j += 1
            continue
        if char == "]":
            depth -= 1
            j += 1
            if depth == 0:
                return j
            continue
        j += 1
    raise ValueError("unclosed class")


def _ascii_class(atom: str) -> str:
    compiled = regex.compile(atom)
    members = [c for c in _ASCII if compiled.fullmatch(c)]
    if not members:
        return "[^\\x00-\\U0010ffff]"
    ranges, start = [], ord(members[0])
    previous = start
    for code in map(ord, members[1:]):
        if code != previous + 1:
            ranges.append((start, previous))
            start = code
        previous = code
    ranges.append((start, previous))
    return "[" + "".join(f"\\x{a:02x}" if a == b else f"\\x{a:02x}-\\x{b:02x}" for a, b in ranges) + "]"


def _samples() -> list[str]:
    rng = random.Random(1234)
    pieces = ["Hello", " world", "'s", "'T", "'ll", " 123", "4567", "\n", "\r\n", "\t", "  ", "    ", "...",
              "!?", " -- ", "_x_", "a1b2", "__init__", "x=1;", "\x00", "\x0b\x0c", "\x1c\x1f", "\x7f", "$", "\\"]
    out = ["".join(_ASCII), " " * 40 + "x", "\n" * 5, "abc   \n\n  def  ", ""]
    for _ in range(60):
        out.append("".join(rng.choice(pieces) if rng.random() < 0.6 else rng.choice(_ASCII)
                           for _ in range(rng.randint(1, 40))))
    return out


_SAMPLES = _samples()
