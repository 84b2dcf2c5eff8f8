"""Regex text -> a small syntax tree over Unicode code point sets, and back to regex text.

The subset is what `json_schema_to_regex` emits plus what users write: literals, escapes (\\n \\t \\xHH
\\uHHHH \\UHHHHHHHH, escaped punctuation), classes with ranges and negation, \\d \\w \\s and their negations,
`.`, groups (capturing, `(?:`, named), alternation, `* + ? {m} {m,} {m,n} {,n}` (a lazy `?` suffix is
accepted: it changes which match Python picks, not which strings match), `(?!)` as the empty language, and
`^`/`$` at the start/end of the pattern or of a top-level alternative. Everything else (lookarounds, flags,
backreferences, word boundaries, possessive quantifiers) is a RegexError naming it.

Semantics are those of Python's `re.fullmatch` on str patterns: \\d \\w \\s are Unicode classes, `.` is any
character but newline. Their tables come from `re` itself (one C-speed scan, cached), so they agree with
the Python that runs the tests.

Nodes are tuples: (SET, ranges), (CAT, items), (ALT, options), (REP, node, lo, hi) with hi = -1 for
"unbounded"; ranges are sorted, merged (lo, hi) code point pairs.
"""

from __future__ import annotations

import re
from functools import lru_cache

SET, CAT, ALT, REP = "set", "cat", "alt", "rep"
MAX_CODEPOINT = 0x10FFFF
MAX_REPEAT = 10_000
EMPTY = (CAT, ())
NOTHING = (SET, ())


class RegexError(ValueError):
    """The pattern is malformed or uses syntax this engine does not support."""


def normalize_ranges(ranges) -> tuple:
    merged = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            if hi > merged[-1][1]:
                merged[-1][1] = hi
        else:
            merged.append([lo, hi])
    return tuple((lo, hi) for lo, hi in merged)


def complement(ranges) -> tuple:
    out, start = [], 0
    for lo, hi in ranges:
        if lo > start:
            out.append((start, lo - 1))
        start = hi + 1
    if start <= MAX_CODEPOINT:
        out.append((start, MAX_CODEPOINT))
    return tuple(out)


def literal(text: str):
    """The node matching exactly `text`."""
    return (CAT, tuple((SET, ((ord(c), ord(c)),)) for c in text))


@lru_cache(maxsize=8)
def _class_table(escape: str) -> tuple:
    """Code point ranges of \\d, \\w or \\s as Python's `re` defines them (Unicode str semantics)."""
    everything = "".join(map(chr, range(MAX_CODEPOINT + 1)))
    return tuple((m.start(), m.end() - 1) for m in re.finditer(escape + "+", everything))


def _class_escape(letter: str):
    table = _class_table("\\" + letter.lower())
    return complement(table) if letter.isupper() else table


_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "a": "\a", "0": "\0"}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
_META = "()[]{}?*+|.^$\\"


class _Parser:
    def __init__(self, pattern: str):
        self.text, self.pos = pattern, 0
        self.anchors: list[list[bool]] = []  # per top-level alternative: [starts with ^, ends with $]

    def error(self, message: str):
        raise RegexError(f"{message} at position {self.pos} in regex {self.text!r}")

    def peek(self, offset=0):
        i = self.pos + offset
        return self.text[i] if i < len(self.text) else ""

    def parse(self):
        node = self.alternation(top=True)
        if self.pos < len(self.text):
            self.error("unbalanced ')'")
        return node

    def alternation(self, top=False):
        options = [self.sequence(top)]
        while self.peek() == "|":
            self.pos += 1
            options.append(self.sequence(top))
        return options[0] if len(options) == 1 else (ALT, tuple(options))

    def sequence(self, top):
        items = []
        if top:
            self.anchors.append([self.peek() == "^", False])
            if self.peek() == "^":
                self.pos += 1
        while self.pos < len(self.text) and self.peek() not in "|)":
            if self.peek() == "$":
                self.pos += 1
                if top and self.peek() in ("", "|"):
                    self.anchors[-1][1] = True
                    break
                self.error("'$' is only supported at the end of the pattern or of a top-level alternative")
            atom = self.atom()
            items.append(self.quantified(atom))
        return items[0] if len(items) == 1 else (CAT, tuple(items))

    def quantified(self, atom):
        while True:
            c = self.peek()
            if c in ("*", "+", "?"):
                self.pos += 1
                lo, hi = {"*": (0, -1), "+": (1, -1), "?": (0, 1)}[c]
            elif c == "{":
                bounds = self.brace_bounds()
                if bounds is None:
                    return atom
                lo, hi = bounds
            else:
                return atom
            if self.peek() == "?":
                self.pos += 1
            elif self.peek() == "+":
                self.error("possessive quantifiers are not supported")
            atom = (REP, atom, lo, hi)

    def brace_bounds(self):
        """`{m}`, `{m,}`, `{m,n}`, `{,n}` -> (lo, hi); None when the brace is a literal (as in Python)."""
        match = re.compile(r"\{(\d*)(,?)(\d*)\}").match(self.text, self.pos)
        if not match or (not match.group(1) and not match.group(2)):
            return None
        lo = int(match.group(1) or 0)
        hi = (int(match.group(3)) if match.group(3) else -1) if match.group(2) else lo
        if max(lo, hi) > MAX_REPEAT:
            self.error(f"repeat count above {MAX_REPEAT}")
        if hi != -1 and hi < lo:
            self.error("min repeat greater than max repeat")
        self.pos = match.end()
        return lo, hi

    def atom(self):
        c = self.peek()
        if c == "(":
            return self.group()
        if c == "[":
            return (SET, self.char_class())
        if c == ".":
            self.pos += 1
            return (SET, complement(((10, 10),)))
        if c == "\\":
            return (SET, self.escape(in_class=False))
        if c in "*+?":
            self.error("nothing to repeat")
        if c == "^":
            self.error("'^' is only supported at the start of the pattern or of a top-level alternative")
        self.pos += 1
        return (SET, ((ord(c), ord(c)),))

    def group(self):
        self.pos += 1
        if self.text.startswith("?!)", self.pos):
            self.pos += 3
            return NOTHING
        if self.peek() == "?":
            named = re.compile(r"\?P?<([A-Za-z_]\w*)>").match(self.text, self.pos)
            if self.text.startswith("?:", self.pos):
                self.pos += 2
            elif named:
                self.pos = named.end()
            else:
                self.error("unsupported group syntax (lookarounds, flags and conditionals are not supported)")
        node = self.alternation()
        if self.peek() != ")":
            self.error("missing ')'")
        self.pos += 1
        return node

    def char_class(self):
        self.pos += 1
        negate = self.peek() == "^"
        if negate:
            self.pos += 1
        ranges, first = [], True
        while True:
            c = self.peek()
            if c == "":
                self.error("unterminated character class")
            if c == "]" and not first:
                self.pos += 1
                break
            first = False
            lo = self.class_item()
            if isinstance(lo, tuple):
                ranges.extend(lo)
                continue
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.pos += 1
                hi = self.class_item()
                if isinstance(hi, tuple):
                    self.error("bad character range")
                if hi < lo:
                    self.error("bad character range")
                ranges.append((lo, hi))
            else:
                ranges.append((lo, lo))
        ranges = normalize_ranges(ranges)
        return complement(ranges) if negate else ranges

    def class_item(self):
        """One code point (int) or, for \\d-style escapes, a tuple of ranges."""
        if self.peek() == "\\":
            ranges = self.escape(in_class=True)
            return ranges[0][0] if len(ranges) == 1 and ranges[0][0] == ranges[0][1] else ranges
        c = self.peek()
        self.pos += 1
        return ord(c)

    def escape(self, in_class: bool) -> tuple:
        self.pos += 1
        c = self.peek()
        if c == "":
            self.error("bad escape (end of pattern)")
        self.pos += 1
        if c in "dwsDWS":
            return _class_escape(c)
        if c in _SIMPLE_ESCAPES and not (c == "0" and self.peek().isdigit()):
            return ((ord(_SIMPLE_ESCAPES[c]),) * 2,)
        if c == "b" and in_class:
            return ((8, 8),)
        if c in _HEX_ESCAPES:
            digits = self.text[self.pos:self.pos + _HEX_ESCAPES[c]]
            if len(digits) != _HEX_ESCAPES[c] or not all(d in "0123456789abcdefABCDEF" for d in digits):
                self.error(f"bad \\{c} escape")
            self.pos += len(digits)
            value = int(digits, 16)
            if value > MAX_CODEPOINT:
                self.error("code point out of range")
            return ((value, value),)
        if c.isascii() and c.isalnum():
            self.pos -= 2
            self.error(f"unsupported escape \\{c}")
        return ((ord(c), ord(c)),)


def parse(pattern: str):
    """Parse `pattern` into a node; RegexError when it is malformed or unsupported."""
    if not isinstance(pattern, str):
        raise RegexError(f"regex must be a str, not {type(pattern).__name__}")
    try:
        return _Parser(pattern).parse()
    except RecursionError:
        raise RegexError("regex nests too deeply") from None


def parse_search(pattern: str):
    """The node for the strings in which `pattern` is found (Python's `re.search`, as JSON Schema's
    `pattern` keyword is applied): each top-level alternative gets any text before it unless it starts
    with ^, and after it unless it ends with $. (`$` before a final newline is not taken: a subset.)"""
    parser = _Parser(pattern)
    try:
        node = parser.parse()
    except RecursionError:
        raise RegexError("regex nests too deeply") from None
    options = node[1] if node[0] == ALT and len(parser.anchors) > 1 else (node,)
    anything = (REP, (SET, ((0, MAX_CODEPOINT),)), 0, -1)
    wrapped = []
    for option, (start, end) in zip(options, parser.anchors):
        wrapped.append((CAT, (() if start else (anything,)) + (option,) + (() if end else (anything,))))
    return wrapped[0] if len(wrapped) == 1 else (ALT, tuple(wrapped))


def _class_text(ranges) -> str:
    def char(cp):
        if chr(cp) in "\\]^-[":
            return "\\" + chr(cp)
        if 0x20 <= cp < 0x7F:
            return chr(cp)
        return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}" if cp < 0x10000 else f"\\U{cp:08x}"
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        cp = ranges[0][0]
        return "\\" + chr(cp) if chr(cp) in _META else char(cp)
    negated = ranges[0][0] == 0 and ranges[-1][1] == MAX_CODEPOINT and len(ranges) > 1
    shown = complement(ranges) if negated else ranges
    body = "".join(char(lo) if lo == hi else f"{char(lo)}-{char(hi)}" for lo, hi in shown)
    return f"[^{body}]" if negated else f"[{body}]"


def to_regex(node) -> str:
    """Regex text for `node` that Python's `re` and this module's parser both read the same way."""
    kind = node[0]
    if kind == SET:
        return _class_text(node[1]) if node[1] else "(?!)"
    if kind == CAT:
        return "".join(f"(?:{to_regex(item)})" if item[0] == ALT else to_regex(item) for item in node[1])
    if kind == ALT:
        return "|".join(to_regex(option) for option in node[1])
    inner, lo, hi = node[1], node[2], node[3]
    text = to_regex(inner)
    if not (inner[0] == SET and inner[1]):
        text = f"(?:{text})"
    bounds = {(0, -1): "*", (1, -1): "+", (0, 1): "?"}.get((lo, hi))
    if bounds is None:
        bounds = f"{{{lo}}}" if lo == hi else f"{{{lo},}}" if hi == -1 else f"{{{lo},{hi}}}"
    return text + bounds
