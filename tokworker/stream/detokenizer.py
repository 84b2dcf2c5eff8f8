"""IncrementalDetokenizer: generated ids -> text deltas whose concatenation is exactly `decode(all ids)`.

Three ways, chosen once per tokenizer:

- Bytewise, no byte fallback (byte-level BPE): each id is one lookup in a precomputed bytes table fed to an
  incremental UTF-8 decoder, which holds an unfinished character until its last byte arrives. O(1) per token.
- Bytewise with byte fallback (SentencePiece "<0xAB>" tokens): `tokenizers` decodes a run of byte tokens as a
  whole, and an invalid run becomes one U+FFFD per byte, so a run is held until a non-byte token ends it
  (emitting its first valid character early could be contradicted by a later invalid byte).
- Any other decoder (WordPiece, Metaspace edge cases, CTC...): windowed string decode, DecodeStream's idea.
  The window keeps one visible token of context, so a decoder's "first token" rules apply only where they
  apply in the full decode; text ending in U+FFFD or inside a byte run waits for the next token.

Strip-leading-space decoders (SentencePiece) drop one space at the very start of the stream, once.
Ids are checked before any state changes: a bad id raises DetokenizeError and the stream stays usable.

spaces_between_special_tokens (OpenAI's and vLLM's request default, True) changes nothing: every vocabulary
here is a tokenizer.json or tiktoken file, i.e. what transformers calls a fast tokenizer, and fast decoding
ignores the flag (transformers' `decode`, and vLLM's fast incremental detokenizer on DecodeStream). Only
vLLM's slow-tokenizer path joins added tokens with spaces.
"""

from __future__ import annotations

from codecs import utf_8_decode
import weakref

_REPLACEMENT = "\ufffd"
_INT_ONLY = {int}
_TABLE_VARIANTS = 8  # skip-sets cached per tokenizer (one per distinct parser configuration in practice)


class DetokenizeError(ValueError):
    """An id that is not in the vocabulary (negative, too large, or not an int)."""


class _VocabTables:
    """What every stream of one tokenizer shares: bytes and text per id, byte-fallback ids, added ids."""

    def __init__(self, tokenizer):
        self.size = tokenizer.vocab_size
        self.bytewise = bool(tokenizer.decode_is_bytewise)
        self._variants: dict[tuple, tuple[frozenset, list, list]] = {}
        if not self.bytewise:
            self.full, self.byte_ids = None, frozenset()
            return
        table = tokenizer.vocab_bytes()
        for token_id in tokenizer.special_ids:
            table[token_id] = tokenizer.token_bytes(token_id)
        self.full = (table, [_whole_text(data) for data in table])
        self.byte_ids = frozenset(
            i for i, data in enumerate(table)
            if len(data) == 1 and _is_byte_token(tokenizer.id_to_token(i)))

    def skipping(self, tokenizer, skip_special_tokens: bool, keep_special_tokens) -> tuple[frozenset, list, list]:
        """(skipped ids, bytes per id, text per id) for one configuration, built once: skipped ids decode to
        nothing. A text is None for an id whose bytes are not whole UTF-8 characters on their own."""
        key = (skip_special_tokens, tuple(keep_special_tokens))
        variant = self._variants.get(key)
        if variant is None:
            kept = {tokenizer.added_tokens[t] for t in keep_special_tokens if t in tokenizer.added_tokens}
            skipped = frozenset(tokenizer.special_ids) - kept if skip_special_tokens else frozenset()
            data, texts = self.full if self.bytewise else (None, None)
            if skipped and self.bytewise:
                data, texts = list(data), list(texts)
                for token_id in skipped:
                    data[token_id], texts[token_id] = b"", ""
            if len(self._variants) >= _TABLE_VARIANTS:
                self._variants.pop(next(iter(self._variants)))
            variant = self._variants[key] = (skipped, data, texts)
        return variant


def _whole_text(data: bytes):
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


_TABLES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def vocab_tables(tokenizer) -> _VocabTables:
    tables = _TABLES.get(tokenizer)
    if tables is None:
        tables = _TABLES[tokenizer] = _VocabTables(tokenizer)
    return tables


def _is_byte_token(token) -> bool:
    return (isinstance(token, str) and len(token) == 6 and token.startswith("<0x") and token.endswith(">")
            and all(c in "0123456789ABCDEFabcdef" for c in token[3:5]))


class IncrementalDetokenizer:
    """`add(ids) -> str` returns the text those ids complete; `flush() -> str` ends the stream (an
    unfinished character becomes U+FFFD, as in `decode`).

    keep_special_tokens names special tokens that stay in the text even with skip_special_tokens (parsers
    that read <|channel|> or <|tool_calls_section_begin|>). spaces_between_special_tokens is accepted and,
    as in fast tokenizers' decode, changes nothing.
    """

    def __init__(self, tokenizer, skip_special_tokens: bool = True, spaces_between_special_tokens: bool = True,
                 keep_special_tokens=()):
        self.tokenizer = tokenizer
        tables = vocab_tables(tokenizer)
        self._size = tables.size
        self._skipped, table, texts = tables.skipping(tokenizer, skip_special_tokens, keep_special_tokens)
        self._at_start = False  # windowed decode strips through tokenizer.decode itself
        self._byte_ids = tables.byte_ids
        self._pending = b""  # the start of a character whose last bytes have not come yet
        # The way this tokenizer decodes, as a plain function (a bound method kept on self would make every
        # stream a reference cycle, freed only by the cyclic collector).
        if tables.bytewise:
            self._table = table
            # text per id for the one-lookup path; not with byte fallback, whose runs decode as a whole
            self._texts = None if self._byte_ids else texts
            self._run = bytearray()
            self._step = IncrementalDetokenizer._bytes_with_runs if self._byte_ids else IncrementalDetokenizer._bytes
            self._at_start = bool(tokenizer.strip_leading_space)
        else:
            self._texts = None
            self._step = IncrementalDetokenizer._windowed
        # windowed state: the ids decoded together (one visible token of context + new ones), and the
        # decoded text of the context, already emitted
        self._window: list[int] = []
        self._prefix_text = ""
        # Nothing is held (no unfinished character) and no leading space is left to strip: while idle, one
        # id whose `texts` entry is a str decodes to exactly that str and changes no state.
        self.idle = self._texts is not None and not self._at_start

    # ------------------------------------------------------------------ public
    @property
    def texts(self):
        """Text per id for the one-lookup path, or None when this tokenizer has none (byte fallback,
        windowed decode). While `idle` is True, one id whose entry is a str decodes to exactly that str and
        changes no state, so a caller may look it up itself (TextStream's hot path does)."""
        return self._texts

    def check(self, ids) -> None:
        """Raise DetokenizeError unless every id is an int in the vocabulary."""
        size = self._size
        try:
            if len(ids) == 1:
                if type(ids[0]) is int and 0 <= ids[0] < size:
                    return
            elif ids and min(ids) >= 0 and max(ids) < size and set(map(type, ids)) == _INT_ONLY:
                return
            elif not ids:
                return
        except TypeError:
            pass
        bad = next((i for i in ids if type(i) is not int or not 0 <= i < size), ids)
        raise DetokenizeError(f"token id {bad!r:.80} is not in the vocabulary (0 <= id < {size})")

    def add(self, ids, checked: bool = False) -> str:
        """Append generated ids; returns the text they complete (possibly ""). checked=True skips the id
        check for a caller that already ran `check` on them."""
        if len(ids) == 1 and self._texts is not None and not self._pending and not self._at_start:
            token_id = ids[0]  # the usual step: one token of whole characters, one lookup
            if type(token_id) is int and 0 <= token_id < self._size:
                text = self._texts[token_id]
                if text is not None:
                    return text
        if not ids:
            return ""
        if not checked:
            if len(ids) != 1:
                self.check(ids)
            elif type(ids[0]) is not int or not 0 <= ids[0] < self._size:
                self.check(ids)
        text = self._step(self, ids, False)
        if self._at_start and text:
            self._at_start = False
            if text[0] == " ":
                text = text[1:]
        self.idle = self._texts is not None and not self._pending and not self._at_start
        return text

    def add_id(self, token_id: int) -> str:
        """One id already checked to be in the vocabulary: `add([token_id])` with the fewest steps for the
        common case of a byte-level vocabulary mid-character (CJK, emoji: one token per byte or two)."""
        if self._texts is None or self._at_start:
            return self.add((token_id,), checked=True)
        pending = self._pending
        if not pending:
            text = self._texts[token_id]
            if text is not None:
                return text
        data = pending + self._table[token_id]
        text, used = utf_8_decode(data, "replace", False)
        self._pending = pending = data[used:]
        self.idle = not pending
        return text

    def flush(self) -> str:
        """The stream is over: release everything held."""
        text = self._step(self, (), True)
        if self._at_start and text:
            self._at_start = False
            if text[0] == " ":
                text = text[1:]
        self.idle = self._texts is not None and not self._pending and not self._at_start
        return text

    # ------------------------------------------------------------------ bytewise
    def _bytes(self, ids, final: bool) -> str:
        if final:
            return self._utf8(b"", True)
        table = self._table
        return self._utf8(b"".join([table[i] for i in ids]), False)

    def _utf8(self, data: bytes, final: bool) -> str:
        """Incremental UTF-8 with U+FFFD for invalid bytes, exactly as decoding all bytes at once would."""
        if self._pending:
            data = self._pending + data
        text, used = utf_8_decode(data, "replace", final)
        self._pending = data[used:]
        return text

    def _bytes_with_runs(self, ids, final: bool) -> str:
        table, byte_ids, run, skipped = self._table, self._byte_ids, self._run, self._skipped
        pieces = []
        for token_id in ids:
            if token_id in byte_ids:
                run += table[token_id]
            elif token_id not in skipped:
                if run:
                    pieces.append(self._end_run())
                pieces.append(self._utf8(table[token_id], False))
        if final:
            if run:
                pieces.append(self._end_run())
            pieces.append(self._utf8(b"", True))
        return "".join(pieces)

    def _end_run(self) -> str:
        """A finished run of byte tokens: its UTF-8 text, or one U+FFFD per byte if it is not valid."""
        head = self._utf8(b"", True)  # normal tokens are whole characters, so this is "" in practice
        try:
            text = self._run.decode("utf-8")
        except UnicodeDecodeError:
            text = _REPLACEMENT * len(self._run)
        self._run.clear()
        return head + text

    # ------------------------------------------------------------------ windowed string decode
    def _windowed(self, ids, final: bool) -> str:
        skipped = self._skipped
        self._window.extend(i for i in ids if i not in skipped)
        return self._advance(final)

    def _advance(self, final: bool) -> str:
        window = self._window
        if not window:
            return ""
        if not final and window[-1] in self._byte_ids:
            return ""
        text = self.tokenizer.decode(window, skip_special_tokens=False)
        if not final and (text.endswith(_REPLACEMENT) or len(text) <= len(self._prefix_text)):
            return ""
        # Every decoder tokenizers has is local (a token's text depends on itself and on being first), so
        # the context's text is a prefix of the window's; a decoder breaking that would lose this text.
        new = text[len(self._prefix_text):] if text.startswith(self._prefix_text) else ""
        # Keep only the last token as context: the next window decodes it as its first token, exactly as
        # the prefix text was decoded, so the difference is the new tokens' text.
        self._window = window[-1:]
        self._prefix_text = self.tokenizer.decode(self._window, skip_special_tokens=False)
        return new
