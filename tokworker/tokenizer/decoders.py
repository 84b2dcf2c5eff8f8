"""Decoders: token strings -> text, stage by stage, exactly as `tokenizers`' decode_chain.

Each stage maps a list of token strings to a list of strings; the result is their concatenation. With no
decoder at all, `tokenizers` joins the tokens with spaces.
"""

from __future__ import annotations

from functools import partial

import regex

from . import unicode
from .errors import UnsupportedComponent
from .pre_tokenizers import BYTE_SYMBOLS

_SYMBOL_TO_BYTE = {symbol: byte for byte, symbol in enumerate(BYTE_SYMBOLS)}


def byte_level_bytes(token: str) -> bytes:
    """A byte-level token's bytes; a token with any character outside the byte alphabet (an added token
    such as DeepSeek's "<｜begin▁of▁sentence｜>") stands for its own UTF-8, as in `tokenizers`."""
    try:
        return bytes([_SYMBOL_TO_BYTE[char] for char in token])
    except KeyError:
        return token.encode("utf-8")


class ByteLevel:
    def decode_chain(self, tokens: list[str]) -> list[str]:
        return [b"".join(map(byte_level_bytes, tokens)).decode("utf-8", errors="replace")]


class Metaspace:
    """Replacement -> space; the first token loses its replacements unless prepend_scheme is "never"."""

    def __init__(self, replacement: str = "▁", prepend_scheme: str = "always"):
        self.replacement, self.strip_first = replacement, prepend_scheme != "never"

    def decode_chain(self, tokens: list[str]) -> list[str]:
        out = [token.replace(self.replacement, " ") for token in tokens]
        if out and self.strip_first:
            out[0] = tokens[0].replace(self.replacement, "")
        return out


class Replace:
    def __init__(self, pattern: dict, content: str):
        self.literal = pattern.get("String")         # None for a regex pattern
        if self.literal is None:
            self.pattern = regex.compile(unicode.translate_pattern(pattern["Regex"]))
        else:
            self.pattern = regex.compile(regex.escape(self.literal))
        self.content = content

    def decode_chain(self, tokens: list[str]) -> list[str]:
        sub, content = self.pattern.sub, self.content.replace("\\", "\\\\")
        return [sub(content, token) for token in tokens]


def byte_fallback_value(token: str) -> int | None:
    """The byte a "<0xAB>" token stands for, else None."""
    if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
        try:
            return int(token[3:5], 16)
        except ValueError:
            return None
    return None


class ByteFallback:
    """Runs of "<0xAB>" tokens become their UTF-8 text; an invalid run becomes one U+FFFD per byte."""

    def decode_chain(self, tokens: list[str]) -> list[str]:
        out: list[str] = []
        run = bytearray()
        for token in tokens:
            value = byte_fallback_value(token)
            if value is not None:
                run.append(value)
                continue
            if run:
                out.append(_decode_run(run))
                run = bytearray()
            out.append(token)
        if run:
            out.append(_decode_run(run))
        return out


def _decode_run(run: bytearray) -> str:
    try:
        return run.decode("utf-8")
    except UnicodeDecodeError:
        return "\ufffd" * len(run)


class Fuse:
    def decode_chain(self, tokens: list[str]) -> list[str]:
        return ["".join(tokens)]


class Strip:
    """Removes up to `start` leading and `stop` trailing `content` characters from every token."""

    def __init__(self, content: str = " ", start: int = 0, stop: int = 0):
        self.content, self.start, self.stop = content, start, stop

    def decode_chain(self, tokens: list[str]) -> list[str]:
        return [self._strip(token) for token in tokens]

    def _strip(self, token: str) -> str:
        begin = 0
        while begin < min(self.start, len(token)) and token[begin] == self.content:
            begin += 1
        end = len(token)
        for _ in range(self.stop):
            if end > begin and token[end - 1] == self.content:
                end -= 1
            else:
                break
        return token[begin:end]


_CLEANUP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
            (" do not", " don't"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


def cleanup(text: str) -> str:
    """tokenizers' wordpiece cleanup of spaces before punctuation and contractions."""
    for old, new in _CLEANUP:
        text = text.replace(old, new)
    return text


class WordPiece:
    def __init__(self, prefix: str = "##", cleanup: bool = True):
        self.prefix, self.cleanup = prefix, cleanup

    def decode_chain(self, tokens: list[str]) -> list[str]:
        out = []
        for index, token in enumerate(tokens):
            if index:
                token = token.replace(self.prefix, "", 1) if token.startswith(self.prefix) else " " + token
            out.append(cleanup(token) if self.cleanup else token)
        return out


class BPEDecoder:
    def __init__(self, suffix: str = "</w>"):
        self.suffix = suffix

    def decode_chain(self, tokens: list[str]) -> list[str]:
        last = len(tokens) - 1
        return [token.replace(self.suffix, "" if index == last else " ") for index, token in enumerate(tokens)]


class CTC:
    def __init__(self, pad_token: str = "<pad>", word_delimiter_token: str = "|", cleanup: bool = True):
        self.pad, self.delimiter, self.cleanup = pad_token, word_delimiter_token, cleanup

    def decode_chain(self, tokens: list[str]) -> list[str]:
        out, previous = [], object()
        for token in tokens:
            if token == previous:
                continue
            previous = token
            if token == self.pad:
                continue
            token = token.replace(self.delimiter, " ")
            out.append(cleanup(token) if self.cleanup else token)
        return out


class Sequence:
    def __init__(self, stages: list):
        self.stages = stages

    def decode_chain(self, tokens: list[str]) -> list[str]:
        for stage in self.stages:
            tokens = stage.decode_chain(tokens)
        return tokens


def from_spec(spec: dict | None):
    """The decoder a tokenizer.json "decoder" object describes (None when absent)."""
    if not spec:
        return None
    kind = spec.get("type")
    if kind == "Sequence":
        return Sequence([stage for stage in map(from_spec, spec.get("decoders", [])) if stage is not None])
    if kind == "ByteLevel":
        return ByteLevel()
    if kind == "Metaspace":
        scheme = spec.get("prepend_scheme")
        if scheme is None:
            scheme = "always" if spec.get("add_prefix_space", True) else "never"
        return Metaspace(spec.get("replacement", "▁"), scheme)
    if kind == "Replace":
        return Replace(spec["pattern"], spec["content"])
    if kind == "ByteFallback":
        return ByteFallback()
    if kind == "Fuse":
        return Fuse()
    if kind == "Strip":
        return Strip(spec.get("content", " "), int(spec.get("start", 0)), int(spec.get("stop", 0)))
    if kind == "WordPiece":
        return WordPiece(spec.get("prefix", "##"), bool(spec.get("cleanup", True)))
    if kind == "BPEDecoder":
        return BPEDecoder(spec.get("suffix", "</w>"))
    if kind == "CTC":
        return CTC(spec.get("pad_token", "<pad>"), spec.get("word_delimiter_token", "|"), bool(spec.get("cleanup", True)))
    raise UnsupportedComponent("decoder", kind)


def decode_tokens(decoder, tokens: list[str]) -> str:
    if decoder is None:
        return " ".join(tokens)
    return "".join(decoder.decode_chain(tokens))


def _flatten(decoder) -> list:
    if decoder is None:
        return []
    if isinstance(decoder, Sequence):
        return [stage for inner in decoder.stages for stage in _flatten(inner)]
    return [decoder]


def _word_final_bytes(suffix: str, token: str) -> bytes:
    """A byte-level token whose end-of-word suffix is the space after the word (see bytewise_form)."""
    if token.endswith(suffix):
        return byte_level_bytes(token[:-len(suffix)]) + b" "
    return byte_level_bytes(token)


def bytewise_form(decoder, tokens, word_suffix: str = ""):
    """(token -> bytes, strip_leading_space) when decoding a token list equals decoding the concatenation of
    each token's bytes as UTF-8, after removing one leading space if strip_leading_space; else None.

    `word_suffix` is a BPE model's end_of_word_suffix (CLIP's "</w>"). With a ByteLevel decoder, which knows
    nothing of it, `tokenizers` leaves it in the text ("a</w>photo</w>"); the original CLIP tokenizer that
    trained those models decodes it as the space after each word ("a photo "), and so does this form.

    Holds for byte-level BPE (ByteLevel) and SentencePiece-style chains (Replace "▁"->" ", ByteFallback,
    Fuse, Strip one leading space; or Metaspace). Exact on valid UTF-8; on an invalid byte run ByteFallback
    writes one U+FFFD per byte where a UTF-8 decoder may write fewer. `tokenizers`' Metaspace decoder drops
    every "▁" of the first token, so Metaspace counts as bytewise only when no token in `tokens` (all token
    strings) has a "▁" other than a leading one."""
    stages = _flatten(decoder)
    kinds = [type(stage) for stage in stages]
    if kinds == [ByteLevel]:
        if word_suffix:
            return partial(_word_final_bytes, word_suffix), False
        return byte_level_bytes, False
    if kinds == [Metaspace]:
        symbol = stages[0].replacement
        if stages[0].strip_first and any(symbol in token[1:] for token in tokens if token):
            return None
        return (lambda token: token.replace(symbol, " ").encode("utf-8")), stages[0].strip_first
    replace = stages.pop(0) if kinds and kinds[0] is Replace else None
    kinds = [type(stage) for stage in stages]
    if replace is not None and (replace.literal is None or replace.content != " "):
        return None
    if kinds not in ([ByteFallback], [ByteFallback, Fuse], [ByteFallback, Fuse, Strip], [Fuse], [Fuse, Strip]):
        return None
    strip = stages[-1] if kinds[-1] is Strip else None
    if strip is not None and (strip.content != " " or strip.start > 1 or strip.stop):
        return None
    symbol = replace.literal if replace is not None else None
    has_fallback = ByteFallback in kinds

    def token_bytes(token: str) -> bytes:
        if has_fallback:
            value = byte_fallback_value(token)
            if value is not None:
                return bytes((value,))
        return (token.replace(symbol, " ") if symbol else token).encode("utf-8")

    return token_bytes, bool(strip and strip.start == 1)

