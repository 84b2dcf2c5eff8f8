"""Pre-tokenizers: split normalized text into the words the model merges, as tokenizer.json describes them.

Each stage has `split(pieces, at_start) -> pieces`, where `at_start` says the first piece begins the
original input (Metaspace's prepend_scheme "first" needs it). Empty pieces are dropped, as `tokenizers` does.

ByteLevel maps every byte to a printable character. When it is the last stage, that mapping is left to the
model (`byte_level` is True and the pieces stay raw text), so the hot path can go straight from a piece's
UTF-8 bytes to symbol ids and cache by the raw piece.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from functools import cached_property
from itertools import accumulate

import regex

from . import unicode
from .ascii_regex import StandIns, ascii_twin
from .errors import UnsupportedComponent

GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
BEHAVIORS = ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")


def bytes_to_unicode() -> list[str]:
    """GPT-2's reversible byte -> printable character map ("Ġ" is a space, byte 0x20), indexed by byte."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    symbols, extra = [], 0
    for byte in range(256):
        if byte in keep:
            symbols.append(chr(byte))
        else:
            symbols.append(chr(256 + extra))
            extra += 1
    return symbols


BYTE_SYMBOLS = bytes_to_unicode()
_LATIN1_TO_SYMBOLS = {byte: symbol for byte, symbol in enumerate(BYTE_SYMBOLS)}


def to_byte_symbols(text: str) -> str:
    return text.encode("utf-8").decode("latin-1").translate(_LATIN1_TO_SYMBOLS)


def split_with_behavior(text: str, spans, behavior: str, invert: bool = False) -> list[str]:
    """tokenizers' NormalizedString.split: `spans` are the (start, end) of the pattern's matches in `text`."""
    marked, previous = [], 0
    for start, end in spans:
        if start != previous:
            marked.append((previous, start, invert))
        marked.append((start, end, not invert))
        previous = end
    if previous != len(text):
        marked.append((previous, len(text), invert))
    if behavior == "Isolated":
        pieces = [(start, end) for start, end, _ in marked]
    elif behavior == "Removed":
        pieces = [(start, end) for start, end, is_match in marked if not is_match]
    elif behavior == "Contiguous":
        pieces, last_match = [], False
        for start, end, is_match in marked:
            if pieces and is_match == last_match:
                pieces[-1] = (pieces[-1][0], end)
            else:
                pieces.append((start, end))
            last_match = is_match
    elif behavior == "MergedWithPrevious":
        pieces, last_match = [], False
        for start, end, is_match in marked:
            if pieces and is_match and not last_match:
                pieces[-1] = (pieces[-1][0], end)
            else:
                pieces.append((start, end))
            last_match = is_match
    elif behavior == "MergedWithNext":
        pieces, last_match = [], False
        for start, end, is_match in reversed(marked):
            if pieces and is_match and not last_match:
                pieces[-1] = (start, pieces[-1][1])
            else:
                pieces.append((start, end))
            last_match = is_match
        pieces.reverse()
    else:
        raise UnsupportedComponent("Split behavior", behavior)
    return [text[start:end] for start, end in pieces if end > start]


class Split:
    """A regex or literal split with one of tokenizers' five behaviours, optionally inverted. `pattern` is
    a compiled regex, or its source: then only the form the split runs is compiled (a translated pattern
    is large, and compiling it costs a big part of a warm load)."""

    byte_level = False

    def __init__(self, pattern: regex.Pattern | str, behavior: str = "Isolated", invert: bool = False):
        if behavior not in BEHAVIORS:
            raise UnsupportedComponent("Split behavior", behavior)
        self.behavior, self.invert = behavior, invert
        if isinstance(pattern, str):
            self._source, plain, groups = pattern, pattern, None
        else:
            self.pattern = pattern
            plain = pattern.pattern if regex.compile(pattern.pattern).flags == pattern.flags else None
            groups = pattern.groups
        # One C call per piece for the common behaviours: regex.split with the whole pattern captured
        # returns gaps and matches alternately (Isolated); uncaptured, gaps only (Removed); findall gives
        # matches only (Removed + invert). Patterns with their own groups take the general path. An all-ASCII
        # piece goes through the pattern's `re` twin, about twice as fast.
        self._fast = self._fast_ascii = self._stand_ins = self._words_ascii = None
        if plain is None or behavior not in ("Isolated", "Removed"):
            return
        if behavior == "Isolated":
            source, method = f"({plain})", "split"
        else:
            source, method = plain, "findall" if invert else "split"
        compiled = regex.compile(source)
        own_groups = compiled.groups - (behavior == "Isolated") if groups is None else groups
        if own_groups:
            return
        self._fast = getattr(compiled, method)
        twin = ascii_twin(source)
        self._fast_ascii = getattr(twin, method) if twin is not None else None
        words = ascii_twin(plain) if twin is not None and behavior == "Isolated" and not invert else None
        if words is not None:
            # the uncaptured twin's findall is the Isolated split wherever its matches leave no gap (nearly
            # always, for a tokenizer's pattern): 10-15% faster than split, with no empty gaps to drop; other
            # text through it too, each non-ASCII character replaced by an ASCII one the pattern cannot tell
            # from it, which gives the lengths of the original's matches
            self._stand_ins, self._words_ascii = StandIns(source), words.findall

    @cached_property
    def pattern(self) -> regex.Pattern:
        """The pattern itself, for the behaviours without a fast path (compiled when first needed)."""
        return regex.compile(self._source)

    @classmethod
    def from_spec(cls, spec: dict) -> "Split":
        pattern = spec["pattern"]
        source = unicode.translate_pattern(pattern["Regex"]) if "Regex" in pattern else regex.escape(pattern["String"])
        return cls(source, spec.get("behavior", "Isolated"), bool(spec.get("invert", False)))

    def split(self, pieces: list[str], at_start: bool = True) -> list[str]:
        out: list[str] = []
        fast, fast_ascii, stand_ins, words_ascii = self._fast, self._fast_ascii, self._stand_ins, self._words_ascii
        for piece in pieces:
            if fast_ascii is not None and piece.isascii():
                if words_ascii is not None:
                    words = words_ascii(piece)
                    if sum(map(len, words)) == len(piece):         # no gap between the matches
                        out.extend(filter(None, words) if "" in words else words)
                        continue
                out.extend(filter(None, fast_ascii(piece)))
            elif fast is not None:
                # a few non-ASCII characters: faster through the twin with stand-ins; past about one byte in
                # six beyond ASCII, replacing them costs more than the twin saves (measured on Cyrillic)
                found = None
                if stand_ins is not None and (len(piece.encode("utf-8")) - len(piece)) * 6 <= len(piece):
                    found = self._by_stand_ins(piece)
                out.extend(found if found is not None else filter(None, fast(piece)))
            else:
                spans = [match.span() for match in self.pattern.finditer(piece)]
                out.extend(split_with_behavior(piece, spans, self.behavior, self.invert))
        return out

    def _by_stand_ins(self, piece: str) -> list[str] | None:
        """The Isolated split of `piece` through the ASCII twin, each non-ASCII character replaced by its
        stand-in, or None when one has none or the matches leave gaps (then `regex` splits it). The twin's
        words are the piece's own where they hold no stand-in; only the words a replaced run touches are
        cut from the piece again (a chat's few accented words, not its thousands of others)."""
        found = self._stand_ins.ascii_text(piece)
        if found is None:
            return None
        standing, runs = found
        words = self._words_ascii(standing)
        ends = list(accumulate(map(len, words)))
        if not ends or ends[-1] != len(piece):
            return None
        for start, stop in runs:
            i = bisect_right(ends, start)           # the first word ending past the run's start
            begin = ends[i - 1] if i else 0
            while begin < stop:
                end = ends[i]
                words[i] = piece[begin:end]
                begin, i = end, i + 1
        return list(filter(None, words)) if "" in words else words


class ByteLevel:
    """GPT-2's pre-tokenizer: optional prefix space, optional GPT-2 regex, then bytes -> printable symbols.
    The byte mapping itself happens in `map_bytes` (called by Sequence, or by the model when last)."""

    byte_level = True

    def __init__(self, add_prefix_space: bool = True, use_regex: bool = True):
        self.add_prefix_space = add_prefix_space
        self.splitter = Split(unicode.translate_pattern(GPT2_PATTERN)) if use_regex else None

    @classmethod
    def from_spec(cls, spec: dict) -> "ByteLevel":
        return cls(bool(spec.get("add_prefix_space", True)), bool(spec.get("use_regex", True)))

    def split(self, pieces: list[str], at_start: bool = True) -> list[str]:
        if self.add_prefix_space:
            pieces = [piece if piece.startswith(" ") else " " + piece for piece in pieces]
        if self.splitter is not None:
            pieces = self.splitter.split(pieces)
        return pieces

    @staticmethod
    def map_bytes(pieces: list[str]) -> list[str]:
        return [to_byte_symbols(piece) for piece in pieces]


class Metaspace:
    """SentencePiece's space handling: spaces become `replacement`, one is prepended, words start at it."""

    byte_level = False

    def __init__(self, replacement: str = "▁", prepend_scheme: str = "always", split: bool = True):
        if prepend_scheme not in ("always", "first", "never"):
            raise UnsupportedComponent("Metaspace prepend_scheme", prepend_scheme)
        self.replacement, self.prepend_scheme, self.split_words = replacement, prepend_scheme, split
        self.pattern = regex.compile(regex.escape(replacement))
        # Splitting before each replacement character (MergedWithNext) is one findall: a replacement and
        # what follows it up to the next one, or a run before the first.
        mark = re.escape(replacement)
        self._words = re.compile(f"{mark}[^{mark}]*|[^{mark}]+").findall if len(replacement) == 1 else None

    @classmethod
    def from_spec(cls, spec: dict) -> "Metaspace":
        scheme = spec.get("prepend_scheme")
        if scheme is None:
            scheme = "always" if spec.get("add_prefix_space", True) else "never"
        return cls(spec.get("replacement", "▁"), scheme, bool(spec.get("split", True)))

    def split(self, pieces: list[str], at_start: bool = True) -> list[str]:
        out: list[str] = []
        replacement = self.replacement
        for index, piece in enumerate(pieces):
            if not piece:                     # nothing to prepend to: tokenizers yields no word either
                continue
            piece = piece.replace(" ", replacement)
            if not piece.startswith(replacement) and (
                    self.prepend_scheme == "always" or (self.prepend_scheme == "first" and at_start and index == 0)):
                piece = replacement + piece
            if self._words is not None and self.split_words:
                out += self._words(piece)
            elif self.split_words:
                spans = [match.span() for match in self.pattern.finditer(piece)]
                out.extend(split_with_behavior(piece, spans, "MergedWithNext"))
            elif piece:
                out.append(piece)
        return out


class CharClassSplit(Split):
    """Split on single characters of a class (whitespace, punctuation, digits) with a behaviour."""

    def __init__(self, char_class: str, behavior: str, one_per_char: bool = True):
        super().__init__(regex.compile(f"[{char_class}]" if one_per_char else f"[{char_class}]+"), behavior)


# tokenizers' character classes (probed from the library, see unicode.py); Bert/Punctuation add ASCII punctuation
_WHITESPACE = unicode.WHITESPACE_CLASS
_PUNCTUATION = unicode.PUNCTUATION_CLASS + r"!-/:-@\[-`{-~"
_DIGITS = unicode.NUMERIC_CLASS


class BertPreTokenizer:
    """Whitespace removed, then every punctuation character isolated, in one pass per piece rather than a
    whitespace split and then a split per word. ASCII text goes through a `re` findall; other text through
    str.translate (punctuation -> itself between spaces, whitespace -> a space) and a split on spaces, ten
    times faster than `regex` testing each character against the big Unicode punctuation class."""

    byte_level = False

    def __init__(self):
        twin = ascii_twin(f"[{_PUNCTUATION}]|[^{_PUNCTUATION}{_WHITESPACE}]+")
        if twin is None:
            raise UnsupportedComponent("BertPreTokenizer", "no ASCII pattern for its classes")
        self._findall_ascii = twin.findall
        self._spaced = dict.fromkeys(_code_points("whitespace"), " ")
        self._spaced.update({code: f" {chr(code)} " for code in _code_points("punctuation")})

    def split(self, pieces: list[str], at_start: bool = True) -> list[str]:
        out: list[str] = []
        findall_ascii, spaced = self._findall_ascii, self._spaced
        for piece in pieces:
            if piece.isascii():
                out += findall_ascii(piece)
            else:
                out += filter(None, piece.translate(spaced).split(" "))
        return out


def _code_points(name: str) -> list[int]:
    """Every code point of one of tokenizers' probed character sets (see unicode.py)."""
    return [code for start, stop in unicode.charset.ranges(unicode.predicate(name)) for code in range(start, stop)]


class FixedLength:
    """Chunks of `length` characters."""

    byte_level = False

    def __init__(self, length: int):
        if length <= 0:
            raise ValueError("FixedLength needs a positive length")
        self.length = length

    def split(self, pieces: list[str], at_start: bool = True) -> list[str]:
        size = self.length
        return [piece[i:i + size] for piece in pieces for i in range(0, len(piece), size)]


class UnicodeScripts:
    """A piece per run of one script (tokenizers' own table, see unicode.script_table). "ANY" characters
    (space, unassigned) never split: they join the run before them, and those leading a piece are dropped,
    as tokenizers does. A piece is translated to its script indices (one character each, ANY is NUL) and
    one findall finds the runs: a script's character, then that one or NUL, per script (an alternation
    of literal-led branches, which `re` tries by first character: faster than a backreference). Only
    leading NULs go unmatched, so the runs' lengths place them in the piece. An ASCII piece skips the
    translation: one findall with the ASCII scripts spelled out as classes."""

    byte_level = False

    def __init__(self):
        self._table = table = unicode.script_table()
        self._findall_runs = re.compile("|".join(
            f"{re.escape(chr(index))}[{re.escape(chr(index))}\\x00]*"
            for index in range(1, len(unicode.script_names())))).findall
        ascii_scripts: dict[int, str] = {}
        for code in range(128):
            ascii_scripts[table[code]] = ascii_scripts.get(table[code], "") + re.escape(chr(code))
        joining = ascii_scripts.pop(0, "")
        self._findall_ascii = re.compile("|".join(f"[{chars}][{chars}{joining}]*"
                                                  for chars in ascii_scripts.values())).findall

    def split(self, pieces: list[str], at_start: bool = True) -> list[str]:
        out: list[str] = []
        table, findall_runs, findall_ascii = self._table, self._findall_runs, self._findall_ascii
        for piece in pieces:
            if piece.isascii():
                out += findall_ascii(piece)
                continue
            runs = findall_runs(piece.translate(table))
            if len(runs) == 1:
                out.append(piece[len(piece) - len(runs[0]):])
                continue
            start = len(piece) - sum(map(len, runs))
            for run in runs:
                out.append(piece[start:start + len(run)])
                start += len(run)
        return out


class Sequence:
    """Stages in order. A ByteLevel stage that is not last maps bytes eagerly, so later stages see symbols."""

    def __init__(self, stages: list):
        self.stages = stages
        self.byte_level = bool(stages) and stages[-1].byte_level

    def split(self, pieces: list[str], at_start: bool = True) -> list[str]:
        last = len(self.stages) - 1
        for index, stage in enumerate(self.stages):
            pieces = stage.split(pieces, at_start)
            if stage.byte_level and index != last:
                pieces = ByteLevel.map_bytes(pieces)
        return pieces


def from_spec(spec: dict | None):
    """The pre-tokenizer a tokenizer.json "pre_tokenizer" object describes (None when absent)."""
    if not spec:
        return None
    kind = spec.get("type")
    if kind == "Sequence":
        stages = [stage for stage in map(from_spec, spec.get("pretokenizers", [])) if stage is not None]
        return Sequence(stages)
    if kind == "Split":
        return Split.from_spec(spec)
    if kind == "ByteLevel":
        return ByteLevel.from_spec(spec)
    if kind == "Metaspace":
        return Metaspace.from_spec(spec)
    if kind == "Whitespace":
        # \w+|[^\w\s]+ kept, the rest removed, with tokenizers' own \w and whitespace (probed: the same
        # \w as its Oniguruma patterns, older than the regex module's)
        word, space = unicode.WORD_CLASS, _WHITESPACE
        return Split(regex.compile(f"[{word}]+|[^{word}{space}]+"), "Removed", invert=True)
    if kind == "CharDelimiterSplit":
        return Split(regex.compile(regex.escape(spec["delimiter"])), "Removed")
    if kind == "FixedLength":
        return FixedLength(int(spec.get("length", 5)))
    if kind == "WhitespaceSplit":
        return CharClassSplit(_WHITESPACE, "Removed", one_per_char=False)
    if kind == "BertPreTokenizer":
        return BertPreTokenizer()
    if kind == "Punctuation":
        return CharClassSplit(_PUNCTUATION, spec.get("behavior", "Isolated"))
    if kind == "UnicodeScripts":
        return UnicodeScripts()
    if kind == "Digits":
        if spec.get("individual_digits", False):
            return CharClassSplit(_DIGITS, "Isolated")
        return CharClassSplit(_DIGITS, "Contiguous")
    raise UnsupportedComponent("pre_tokenizer", kind)
