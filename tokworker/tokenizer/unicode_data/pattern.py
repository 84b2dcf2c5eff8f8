"""Translate a tokenizer regex (Oniguruma as `tokenizers` uses it, or Rust regex as `tiktoken` uses it)
into a `regex`-module pattern (V1) that matches exactly the same text.

Every character class, property, Perl class and case-insensitive literal becomes an explicit set built from
the probed tables, so the result does not depend on the Unicode version of the `regex` module. Syntax
whose meaning differs between the engines is rewritten: Ruby-syntax `^`/`$` are line anchors and `(?m)` is
dot-all, `{n,m}+` is not possessive in Oniguruma, Rust's `$` is the end of the text. Constructs that cannot
be reproduced exactly raise UnsupportedPattern, naming them.
"""

from __future__ import annotations

import re

from . import charset
from .charset import Atoms, CharSet as _Set, set_intersection as _intersection, set_union as _union

_SIMPLE_ESCAPES = {"t": 0x09, "n": 0x0A, "r": 0x0D, "f": 0x0C, "v": 0x0B, "a": 0x07, "e": 0x1B}
_ASCII_PUNCT = r"""!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~ """
_CASE_INSENSITIVE = re.compile(r"\(\?[a-z]*i[a-z-]*[:)]")
_LINE_BREAK = r"(?>\x0d\x0a|[\x0a-\x0d\x85\u2028\u2029])"


class UnsupportedPattern(ValueError):
    """A regex construct that cannot be reproduced exactly with the `regex` module."""

    def __init__(self, pattern: str, position: int, what: str):
        super().__init__(f"unsupported regex construct {what} at position {position} in {pattern!r}")


class Translator:
    """One pattern's translation: a recursive-descent parser that emits as it reads."""

    def __init__(self, pattern: str, flavor: str, atoms: Atoms):
        self.pattern, self.flavor, self.atoms = pattern, flavor, atoms
        self.oniguruma = flavor == "tokenizers"
        self.pos = 0

    def translate(self) -> str:
        if self.oniguruma and _CASE_INSENSITIVE.search(self.pattern):
            folded = self.pattern.casefold()
            for cp, target in self.atoms.multi_folds.items():
                if target in folded:  # Oniguruma would also match chr(cp) here
                    self._fail(f"case-insensitive {target!r} (matches {chr(cp)!r} by a multi-character fold)")
        body = self._alternation({"i": False, "s": False, "m": False})
        if self.pos < len(self.pattern):
            self._fail("unbalanced ')'")
        return "(?V1)" + body

    # -- reading -------------------------------------------------------------------------------------
    def _peek(self, ahead: int = 0) -> str:
        index = self.pos + ahead
        return self.pattern[index] if index < len(self.pattern) else ""

    def _take(self) -> str:
        if self.pos >= len(self.pattern):
            self._fail("unexpected end of pattern")
        char = self.pattern[self.pos]
        self.pos += 1
        return char

    def _startswith(self, text: str) -> bool:
        return self.pattern.startswith(text, self.pos)

    def _fail(self, what: str):
        raise UnsupportedPattern(self.pattern, self.pos, what)

    # -- structure -----------------------------------------------------------------------------------
    def _alternation(self, flags: dict) -> str:
        """Alternatives up to ')' or the end; inline flags like (?i) last to the end of this group."""
        parts = [self._sequence(flags)]
        while self._peek() == "|":
            self.pos += 1
            parts.append(self._sequence(flags))
        return "|".join(parts)

    def _sequence(self, flags: dict) -> str:
        out: list[str] = []
        while self._peek() not in ("", "|", ")"):
            atom = self._atom(flags)
            if atom is None:
                continue
            text, quantifiable = atom
            quantified = False
            while quantifiable and self._peek() in ("*", "+", "?", "{"):
                quantifier = self._quantifier()
                if quantifier is None:
                    break
                if quantified and not self.oniguruma:
                    self._fail("repeated quantifier")
                text = f"(?:{text}){quantifier}" if quantified else text + quantifier  # Ruby: a{2}+ = (?:a{2})+
                quantified = True
            out.append(text)
        return "".join(out)

    def _quantifier(self) -> str | None:
        start = self.pos
        char = self._take()
        text = self._braces() if char == "{" else char
        if text is None:
            self.pos = start
            return None
        if self._peek() == "?":
            text += self._take()
        elif self._peek() == "+" and (char != "{" or not self.oniguruma):
            text += self._take()  # possessive
        return text

    def _braces(self) -> str | None:
        """{n} {n,} {n,m} {,m}; None when the braces are literal text."""
        end = self.pattern.find("}", self.pos)
        if end < 0:
            return None
        body = self.pattern[self.pos:end]
        low, comma, high = body.partition(",")
        if not (low.isdigit() or (comma and high.isdigit() and not low)) or (high and not high.isdigit()):
            return None
        if not low and not self.oniguruma:
            return None
        self.pos = end + 1
        return "{" + (low or "0") + comma + high + "}"

    # -- atoms ---------------------------------------------------------------------------------------
    def _atom(self, flags: dict):
        char = self._take()
        if char == "(":
            return self._group(flags)
        if char == "[":
            return self._bracket(flags).spell(), True
        if char == ".":
            return ("(?s:.)" if flags["s"] else "."), True
        if char == "^":
            return self._line_anchor(start=True, flags=flags), False
        if char == "$":
            return self._line_anchor(start=False, flags=flags), False
        if char == "\\":
            return self._escape(flags)
        if char in "*+?":
            self._fail(f"quantifier {char!r} with nothing to repeat")
        if char == "{" and self._braces_ahead():
            self._fail("quantifier '{' with nothing to repeat")
        return self._literal(ord(char), flags), True

    def _braces_ahead(self) -> bool:
        saved = self.pos
        found = self._braces() is not None
        self.pos = saved
        return found

    def _line_anchor(self, start: bool, flags: dict) -> str:
        if self.oniguruma:  # Ruby syntax: always line anchors; ^ never matches after a final newline
            return r"(?:\A|(?<=\n)(?=[\s\S]))" if start else r"(?=\n|\Z)"
        if flags["m"]:
            return "(?m:^)" if start else "(?m:$)"
        return r"\A" if start else r"\Z"

    def _group(self, flags: dict):
        inner_flags = dict(flags)
        if not self._startswith("?"):
            return "(" + self._close(inner_flags) + ")", True
        self.pos += 1
        for opener, emitted in (("=", "(?="), ("!", "(?!"), ("<=", "(?<="), ("<!", "(?<!"), (">", "(?>"),
                                (":", "(?:")):
            if self._startswith(opener):
                self.pos += len(opener)
                return emitted + self._close(inner_flags) + ")", opener in (":", ">")
        if self._startswith("#"):
            end = self.pattern.find(")", self.pos)
            if end < 0:
                self._fail("unterminated comment")
            self.pos = end + 1
            return None
        if self._peek() in ("<", "'") or self._startswith("P<"):
            self.pos += 2 if self._peek() == "P" else 1
            closer = "'" if self.pattern[self.pos - 1] == "'" else ">"
            end = self.pattern.find(closer, self.pos)
            name = self.pattern[self.pos:end]
            if end < 0 or not name.isidentifier():
                self._fail("group name")
            self.pos = end + 1
            return f"(?P<{name}>" + self._close(inner_flags) + ")", True
        return self._flag_group(flags)

    def _flag_group(self, flags: dict):
        on = True
        changes = {}
        while self._peek() not in (")", ":"):
            char = self._take()
            if char == "-":
                on = False
            elif char == "i":
                changes["i"] = on
            elif char == "m":  # Ruby's (?m) is dot-all; Rust's is multi-line
                changes["s" if self.oniguruma else "m"] = on
            elif char == "s" and not self.oniguruma:
                changes["s"] = on
            elif char == "x":
                self._fail("extended mode (?x)")
            else:
                self._fail(f"inline flag {char!r}")
        if self._take() == ")":
            flags.update(changes)  # to the end of the enclosing group
            return None
        inner = dict(flags, **changes)
        return "(?:" + self._close(inner) + ")", True

    def _close(self, flags: dict) -> str:
        body = self._alternation(flags)
        if self._peek() != ")":
            self._fail("missing ')'")
        self.pos += 1
        return body

    # -- escapes -------------------------------------------------------------------------------------
    def _escape(self, flags: dict):
        char = self._take()
        found = self._class_escape(char, flags, in_bracket=False)
        if found is not None:
            return found.spell(), True
        if char in "AzZbBG":
            return self._assertion(char), False
        if self.oniguruma and char == "R":
            return _LINE_BREAK, True
        if self.oniguruma and char == "N":
            return r"[^\n]", True
        if self.oniguruma and char == "O":
            return r"(?s:.)", True
        if char in "123456789":
            if flags["i"]:
                self._fail("back-reference under (?i)")
            return "\\" + char, True
        return self._literal(self._char_escape(char), flags), True

    def _assertion(self, char: str) -> str:
        if char == "A":
            return r"\A"
        if char == "z":
            return r"\Z"
        if char == "Z" and self.oniguruma:
            return r"(?=\n?\Z)"
        if char in "bB":
            word = self._perl("w", False).spell()
            boundary = f"(?:(?<={word})(?!{word})|(?<!{word})(?={word}))"
            return boundary if char == "b" else f"(?:(?<={word})(?={word})|(?<!{word})(?!{word}))"
        self._fail(f"assertion \\{char}")

    def _char_escape(self, char: str) -> int:
        """The code point of a character escape (\\t, \\x41, \\x{263a}, \\u263a, \\101, \\cA, \\. ...)."""
        if char in _SIMPLE_ESCAPES and (self.oniguruma or char not in "e"):
            return _SIMPLE_ESCAPES[char]
        if char == "x":
            if self._peek() == "{":
                end = self.pattern.find("}", self.pos)
                digits = self.pattern[self.pos + 1:end] if end > 0 else ""
                self.pos = end + 1
            else:
                digits = "".join(self._take() for _ in range(2) if self._peek() in "0123456789abcdefABCDEF")
            return self._hex(digits)
        if char == "u" and self.oniguruma:
            return self._hex("".join(self._take() for _ in range(4)))
        if char == "0":
            digits = char
            while len(digits) < 3 and self._peek() and self._peek() in "01234567":
                digits += self._take()
            return int(digits, 8)
        if char == "c" and self.oniguruma and self._peek():
            return ord(self._take()) & 0x1F
        if char in _ASCII_PUNCT or not char.isascii():
            return ord(char)
        self._fail(f"escape \\{char}")

    def _hex(self, digits: str) -> int:
        try:
            value = int(digits, 16)
        except ValueError:
            self._fail(f"hex escape {digits!r}")
        if value >= charset.MAX_CODE or 0xD800 <= value < 0xE000:
            self._fail(f"code point {digits!r}")
        return value

    def _class_escape(self, char: str, flags: dict, in_bracket: bool) -> _Set | None:
        """\\p{..}, \\P{..}, \\d \\w \\s \\h and their negations; None for any other escape."""
        if char in "pP":
            found = self._property(negate=char == "P")
        elif char.lower() in "dws" or (char.lower() == "h" and self.oniguruma):
            found = self._perl(char.lower(), negate=char.isupper(), in_bracket=in_bracket)
        else:
            return None
        if flags["i"] and not in_bracket and not self.oniguruma:  # Rust case-folds every class
            found = self._closed(found, negate=False)
        return found

    def _property(self, negate: bool) -> _Set:
        if self._peek() == "{":
            end = self.pattern.find("}", self.pos)
            if end < 0:
                self._fail("unterminated \\p{")
            name = self.pattern[self.pos + 1:end]
            self.pos = end + 1
        elif not self.oniguruma and self._peek():
            name = self._take()
        else:
            self._fail("\\p without {name}")
        if name.startswith("^") and self.oniguruma:
            name, negate = name[1:], not negate
        atom = self.atoms.lookup(name)
        if atom is None:
            self._fail(f"property \\p{{{name}}} (not in the probed tables)")
        found = self._atom_set(atom)
        return found.negated() if negate else found

    def _perl(self, letter: str, negate: bool, in_bracket: bool = False) -> _Set:
        atom = f"perl:{letter}"
        if in_bracket and self.atoms.has(atom + ":bracket"):  # Oniguruma: [\w] is narrower than \w
            atom += ":bracket"
        found = self._atom_set(atom)
        return found.negated() if negate else found

    def _atom_set(self, atom: str) -> _Set:
        expression = self.atoms.regex_expression(atom)
        return _Set(self.atoms.members(atom), self.atoms.regex_members(atom), expression)

    # -- sets and literals ---------------------------------------------------------------------------
    def _literal(self, cp: int, flags: dict) -> str:
        if not flags["i"]:
            return charset.escape(cp)
        if cp in self.atoms.multi_folds:
            self._fail(f"case-insensitive {chr(cp)!r} (a multi-character case fold)")
        orbit = self.atoms.orbits.get(cp)
        if not orbit:
            return charset.escape(cp)
        return "[" + "".join(charset.escape(c) for c in orbit) + "]"

    def _closed(self, found: _Set, negate: bool) -> _Set:
        closed = _Set(self.atoms.fold_closure(found.wanted))
        return closed.negated() if negate else closed

    def _bracket(self, flags: dict) -> _Set:
        """A bracket expression after its '[': ranges, escapes, POSIX classes, nesting, '&&'."""
        negate = self._peek() == "^"
        if negate:
            self.pos += 1
        items: list[_Set] = []
        first = True
        while True:
            char = self._peek()
            if not char:
                self._fail("unterminated '['")
            if char == "]" and not first:
                self.pos += 1
                break
            first = False
            if self._startswith("&&"):
                self.pos += 2
                left = _union(items) if items else _Set(charset.EVERYTHING, charset.EVERYTHING, r"[\x00-\U0010ffff]")
                right = self._bracket(dict(flags, i=False))  # the rest, read as a bracket of its own
                items = [_intersection(left, right)]
                break
            if self._startswith("[:") and self.pattern.find(":]", self.pos + 2) > 0:
                items.append(self._posix())
                continue
            if char == "[":
                self.pos += 1
                items.append(self._bracket(flags))
                continue
            if not self.oniguruma and (self._startswith("--") or self._startswith("~~")):
                self._fail("set operation -- or ~~")
            items.append(self._bracket_item(flags))
        found = _union(items)
        if flags["i"]:
            closed = self._closed(found, negate)
            if self.oniguruma and not negate:
                self._no_multi_fold(closed)
            return closed
        return found.negated() if negate else found

    def _no_multi_fold(self, found: _Set) -> None:
        r"""Oniguruma lets a case-insensitive class match a member's multi-character fold where the fold's
        first character is not a member itself ([\p{Ll}&&[^a-f]] holds U+FB00, so "ff" is one match; [\p{Ll}]
        matches "f" alone): no single-character class can say that."""
        wanted = found.wanted
        for cp, target in self.atoms.multi_folds.items():
            if charset.contains(wanted, cp) and not charset.contains(wanted, ord(target[0])):
                self._fail(f"case-insensitive class holding {chr(cp)!r} (matches {target!r} by a multi-character fold)")

    def _posix(self) -> _Set:
        end = self.pattern.find(":]", self.pos + 2)
        name = self.pattern[self.pos + 2:end]
        self.pos = end + 2
        negate = name.startswith("^")
        name = name.lstrip("^")
        if not self.oniguruma:
            self._fail(f"POSIX class [:{name}:]")
        atom = f"posix:{name}"
        if not self.atoms.has(atom):
            self._fail(f"POSIX class [:{name}:]")
        found = self._atom_set(atom)
        return found.negated() if negate else found

    def _bracket_item(self, flags: dict) -> _Set:
        low = self._bracket_char(flags)
        if isinstance(low, _Set):
            return low
        if self._peek() == "-" and self._peek(1) not in ("]", ""):
            saved = self.pos
            self.pos += 1
            high = self._bracket_char(flags)
            if isinstance(high, _Set):
                self.pos = saved  # "a-\d": the dash is literal
            else:
                if high < low:
                    self._fail("reversed range")
                return _Set.literal((low, high + 1))
        return _Set.literal(charset.of_char(low))

    def _bracket_char(self, flags: dict):
        char = self._take()
        if char != "\\":
            return ord(char)
        char = self._take()
        found = self._class_escape(char, flags, in_bracket=True)
        if found is not None:
            return found
        if char == "b":
            return 0x08
        return self._char_escape(char)
