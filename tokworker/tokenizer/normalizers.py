"""tokenizer.json normalizers: text in, normalized text out, one class per `tokenizers` type.

Each class reproduces what `tokenizers` does to the text (not to offsets: nothing here tracks alignments).
Character data (Unicode forms, lowercase, control/whitespace/CJK classes) comes from `unicode.py`, which
carries the tables `tokenizers` really uses rather than the Python runtime's.
"""

from __future__ import annotations

import base64
import binascii
import struct
from array import array

import regex

from . import unicode as _unicode
from .errors import UnsupportedComponent


class Normalizer:
    def normalize(self, text: str) -> str:
        raise NotImplementedError


class UnicodeForm(Normalizer):
    """NFC / NFD / NFKC / NFKD with `tokenizers`' Unicode data."""

    def __init__(self, form: str):
        self.form = form

    def normalize(self, text: str) -> str:
        return _unicode.normalize(self.form, text)


class Lowercase(Normalizer):
    """Per-character lowercase (Rust's `char::to_lowercase`: no final-sigma rule)."""

    def normalize(self, text: str) -> str:
        return _unicode.to_lowercase(text)


# Rust's char::is_whitespace is the White_Space property (Python's isspace adds U+001C..U+001F).
_WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"


class Strip(Normalizer):
    def __init__(self, left: bool = True, right: bool = True):
        self.left, self.right = left, right

    def normalize(self, text: str) -> str:
        if self.left and self.right:
            return text.strip(_WHITE_SPACE)
        if self.left:
            return text.lstrip(_WHITE_SPACE)
        return text.rstrip(_WHITE_SPACE) if self.right else text


class StripAccents(Normalizer):
    """Drops every combining mark (Mn, Mc, Me) of tokenizers' table, unlike BertNormalizer (Mn only)."""

    def normalize(self, text: str) -> str:
        return _unicode.strip_accents(text)


class Replace(Normalizer):
    """Replace(String | Regex pattern, content): every non-overlapping match, leftmost first."""

    def __init__(self, pattern: dict | str, content: str):
        if isinstance(pattern, str):
            pattern = {"String": pattern}
        if not isinstance(pattern, dict) or len(pattern) != 1 or not isinstance(content, str):
            raise ValueError(f"bad Replace pattern {pattern!r}")
        (kind, value), = pattern.items()
        self.content = content
        if kind == "String":
            self._literal, self._regex = value, None
        elif kind == "Regex":
            self._literal, self._regex = None, _unicode.compile_pattern(value)
        else:
            raise ValueError(f"bad Replace pattern kind {kind!r}")

    def normalize(self, text: str) -> str:
        if self._regex is None:
            return text.replace(self._literal, self.content)
        content = self.content
        return self._regex.sub(lambda _match: content, text)


class Prepend(Normalizer):
    def __init__(self, prepend: str):
        self.prepend = prepend

    def normalize(self, text: str) -> str:
        return self.prepend + text if text else text


def is_dummy_prefix(normalizer) -> bool:
    """Prepend("▁") then Replace(" ", "▁"): how converters write SentencePiece's dummy prefix (Llama, Mistral)."""
    if not isinstance(normalizer, Sequence) or len(normalizer.normalizers) < 2:
        return False
    prepend, replace = normalizer.normalizers[:2]
    return (isinstance(prepend, Prepend) and prepend.prepend == "\u2581" and isinstance(replace, Replace)
            and replace._literal == " " and replace.content == "\u2581")


class _PerCharacter(dict):
    """A str.translate table filled on first sight of each code point by `rule(char) -> str` (bounded).

    BertNormalizer's steps are per-character rules, so they run at str.translate speed without a table
    precomputed over all of Unicode.
    """

    def __init__(self, rule):
        super().__init__()
        self.rule = rule

    def __missing__(self, code: int) -> str:
        if len(self) >= _TABLE_LIMIT:
            self.clear()
        value = self[code] = self.rule(chr(code))
        return value


_TABLE_LIMIT = 100_000


class BertNormalizer(Normalizer):
    """clean_text, CJK spacing, accent stripping (Mn after NFD; None follows lowercase), lowercase.

    clean_text drops NUL, U+FFFD and control characters (tab, newline and carriage return count as
    whitespace), then turns whitespace into a plain space; CJK ideographs get a space on each side.
    Dropping Mn and lowercasing after NFD are per-character too, so each side of the NFD is one table.
    """

    def __init__(self, clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True):
        self.clean_text = clean_text
        self.handle_chinese_chars = handle_chinese_chars
        self.strip_accents = lowercase if strip_accents is None else strip_accents
        self.lowercase = lowercase
        self._before_nfd = _PerCharacter(self._clean_and_space)
        self._after_nfd = _PerCharacter(self._strip_and_lower)

    def _clean_and_space(self, char: str) -> str:
        if self.clean_text:
            if _unicode.is_control(char):
                return ""
            if _unicode.is_bert_whitespace(char):
                return " "
        if self.handle_chinese_chars and _unicode.is_chinese_char(char):
            return f" {char} "
        return char

    def _strip_and_lower(self, char: str) -> str:
        if self.strip_accents and not _unicode.bert_strip_accents(char):
            return ""
        return _unicode.to_lowercase(char) if self.lowercase and char else char

    def normalize(self, text: str) -> str:
        if self.clean_text or self.handle_chinese_chars:
            text = text.translate(self._before_nfd)
        if self.strip_accents:
            text = _unicode.normalize("NFD", text)
        if self.strip_accents or self.lowercase:
            text = text.translate(self._after_nfd)
        return text


class Nmt(Normalizer):
    """SentencePiece's NMT cleanup: drop some controls, turn other separators into spaces."""

    _table = {
        **{c: None for c in [*range(0x01, 0x09), 0x0B, *range(0x0E, 0x20), 0x7F, 0x8F, 0x9F]},
        **{c: " " for c in [0x09, 0x0A, 0x0C, 0x0D, 0x1680, *range(0x200B, 0x2010), 0x2028, 0x2029,
                            0x2581, 0xFEFF, 0xFFFD]},
    }

    def normalize(self, text: str) -> str:
        return text.translate(self._table)


def _byte_level_table() -> str:
    """GPT-2's bytes_to_unicode as a 256-character string indexed by byte value."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[byte] = chr(byte)
        else:
            chars[byte] = chr(256 + extra)
            extra += 1
    return "".join(chars[b] for b in range(256))


class ByteLevel(Normalizer):
    """Every UTF-8 byte of the text becomes its GPT-2 byte-level character."""

    _table = {byte: char for byte, char in enumerate(_byte_level_table())}

    def normalize(self, text: str) -> str:
        return text.encode("utf-8", "surrogatepass").decode("latin-1").translate(self._table)


class Sequence(Normalizer):
    def __init__(self, normalizers: list[Normalizer]):
        self.normalizers = normalizers

    def normalize(self, text: str) -> str:
        for normalizer in self.normalizers:
            text = normalizer.normalize(text)
        return text


# Characters that can join a neighbour into one grapheme cluster: two other characters side by side are
# always separate graphemes, so only runs around these need real segmentation.
_JOINING = "".join(
    rf"\p{{Grapheme_Cluster_Break={name}}}"
    for name in ("Extend", "ZWJ", "SpacingMark", "Prepend", "L", "V", "T", "LV", "LVT", "Regional_Indicator")
)
_JOINING_RUN = regex.compile(r"[\r" + _JOINING + r"]+")
_GRAPHEME = regex.compile(r"\X", regex.DOTALL)


class Precompiled(Normalizer):
    """SentencePiece's precompiled_charsmap, applied the way `tokenizers` applies it.

    The blob is a little-endian u32 trie size, a Darts double-array trie over UTF-8 bytes, then the
    NUL-terminated replacement strings the trie's leaves point into. `tokenizers` walks grapheme clusters:
    a cluster shorter than 6 bytes is replaced whole by the replacement of its SHORTEST matching prefix
    (dropping the rest of the cluster); otherwise, or without a match, each character is looked up alone.
    """

    def __init__(self, charsmap: bytes):
        if len(charsmap) < 4:
            raise ValueError("Precompiled charsmap is too short")
        (trie_bytes,) = struct.unpack_from("<I", charsmap, 0)
        if trie_bytes % 4 or 4 + trie_bytes > len(charsmap) or trie_bytes == 0:
            raise ValueError("Precompiled charsmap: bad trie size")
        units = array("I", charsmap[4:4 + trie_bytes])
        if array("I").itemsize != 4:
            raise ValueError("Precompiled needs 4-byte unsigned ints")
        if struct.pack("=I", 1) != struct.pack("<I", 1):
            units.byteswap()
        self._units = units
        self._replacements = charsmap[4 + trie_bytes:]
        try:
            self._replacements.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"Precompiled charsmap: replacements are not UTF-8 ({error})") from None
        self._chars, self._key_starts = self._single_characters()

    @staticmethod
    def _offset(unit: int) -> int:
        return (unit >> 10) << ((unit & (1 << 9)) >> 6)

    def _replacement(self, index: int) -> str:
        blob = self._replacements
        end = blob.find(b"\0", index)
        return blob[index:end if end >= 0 else len(blob)].decode("utf-8", "replace")

    def _single_characters(self) -> tuple[dict[int, str], set[str]]:
        """Every one-character key (for str.translate), and the characters that begin longer keys."""
        units, offset = self._units, self._offset
        size = len(units)
        chars: dict[int, str] = {}
        key_starts: set[str] = set()
        # Depth-first over trie nodes until one whole UTF-8 character has been read.
        stack = [(offset(units[0]), b"")]
        while stack:
            base, prefix = stack.pop()
            for byte in range(1, 256):
                position = base ^ byte
                if position >= size:
                    continue
                unit = units[position]
                if unit & ((1 << 31) | 0xFF) != byte:
                    continue
                key, child = prefix + bytes((byte,)), position ^ offset(unit)
                try:
                    char = key.decode("utf-8")
                except UnicodeDecodeError:
                    if len(key) < 4:
                        stack.append((child, key))
                    continue
                if (unit >> 8) & 1 and child < size:
                    chars[ord(char)] = self._replacement(units[child] & 0x7FFFFFFF)
                key_starts.add(char)  # conservative: a node may have children beyond its leaf
        return chars, key_starts

    def _shortest_prefix(self, key: bytes) -> str | None:
        units, offset = self._units, self._offset
        size = len(units)
        node = offset(units[0])
        for byte in key:
            if byte == 0:
                return None
            node ^= byte
            if node >= size:
                return None
            unit = units[node]
            if unit & ((1 << 31) | 0xFF) != byte:
                return None
            node ^= offset(unit)
            if (unit >> 8) & 1:
                return self._replacement(units[node] & 0x7FFFFFFF) if node < size else None
        return None

    def _cluster(self, grapheme: str) -> str:
        if len(grapheme) > 1:
            encoded = grapheme.encode("utf-8", "surrogatepass")
            if len(encoded) < 6 and grapheme[0] in self._key_starts:
                found = self._shortest_prefix(encoded)
                if found is not None:
                    return found
        return grapheme.translate(self._chars)

    def normalize(self, text: str) -> str:
        """Characters outside clusters go through str.translate; each multi-character cluster region (a run
        of joining characters plus one neighbour each side, overlapping regions merged) is segmented."""
        chars, size = self._chars, len(text)
        pieces, done = [], 0
        region_start = region_end = -1
        for run in _JOINING_RUN.finditer(text):
            start, end = max(run.start() - 1, 0), min(run.end() + 1, size)
            if start < region_end:
                region_end = end
                continue
            if region_end >= 0:
                done = self._region(text, done, region_start, region_end, pieces)
            region_start, region_end = start, end
        if region_end < 0:
            return text.translate(chars)
        done = self._region(text, done, region_start, region_end, pieces)
        pieces.append(text[done:].translate(chars))
        return "".join(pieces)

    def _region(self, text: str, done: int, start: int, end: int, pieces: list[str]) -> int:
        pieces.append(text[done:start].translate(self._chars))
        pieces.extend(self._cluster(g) for g in _GRAPHEME.findall(text, start, end))
        return end


_SIMPLE = {
    "NFC": lambda spec: UnicodeForm("NFC"),
    "NFD": lambda spec: UnicodeForm("NFD"),
    "NFKC": lambda spec: UnicodeForm("NFKC"),
    "NFKD": lambda spec: UnicodeForm("NFKD"),
    "Lowercase": lambda spec: Lowercase(),
    "StripAccents": lambda spec: StripAccents(),
    "Nmt": lambda spec: Nmt(),
    "ByteLevel": lambda spec: ByteLevel(),
    "Strip": lambda spec: Strip(bool(spec["strip_left"]), bool(spec["strip_right"])),
    "Replace": lambda spec: Replace(spec["pattern"], spec["content"]),
    "Prepend": lambda spec: Prepend(spec["prepend"]),
    "BertNormalizer": lambda spec: BertNormalizer(
        spec.get("clean_text", True), spec.get("handle_chinese_chars", True),
        spec.get("strip_accents"), spec.get("lowercase", True)),
    "Precompiled": lambda spec: Precompiled(_decode_charsmap(spec.get("precompiled_charsmap"))),
    "Sequence": lambda spec: Sequence([from_spec(s) for s in spec["normalizers"]]),
}


def _decode_charsmap(value) -> bytes:
    if not isinstance(value, str):
        raise ValueError("Precompiled normalizer needs a base64 precompiled_charsmap")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error as error:
        raise ValueError(f"Precompiled charsmap is not base64: {error}") from None


def from_spec(spec: dict | None) -> Normalizer | None:
    """The normalizer a tokenizer.json `normalizer` entry describes (None for none)."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise ValueError(f"normalizer spec must be an object, got {type(spec).__name__}")
    kind = spec.get("type")
    build = _SIMPLE.get(kind)
    if build is None:
        raise UnsupportedComponent("normalizer", kind)
    try:
        return build(spec)
    except KeyError as missing:
        raise ValueError(f"normalizer {kind!r} is missing field {missing}") from None
