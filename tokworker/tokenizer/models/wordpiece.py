"""WordPiece: greedy longest-match-first over the vocabulary, exactly as `tokenizers` segments a word.

A word longer than `max_input_chars_per_word` characters, or one with any position no vocabulary piece
matches, becomes the single unknown token. Matching tries only lengths that some piece has (precomputed
per vocabulary), and whole-word results are cached in a bounded dict.
"""

from __future__ import annotations

_CACHE_LIMIT = 50_000     # words remembered; cleared when full


class WordPiece:
    def __init__(self, vocab: dict[str, int], unk_token: str = "[UNK]", continuing_subword_prefix: str = "##",
                 max_input_chars_per_word: int = 100):
        self.vocab = vocab
        self.unk_token = unk_token
        self.prefix = continuing_subword_prefix
        self.max_input_chars_per_word = max_input_chars_per_word
        # Pieces that may start a word, and pieces that continue one (keyed without their prefix).
        self._starts = vocab
        prefix_len = len(continuing_subword_prefix)
        self._continues = {token[prefix_len:]: id_ for token, id_ in vocab.items()
                           if token.startswith(continuing_subword_prefix) and len(token) > prefix_len}
        if not continuing_subword_prefix:
            self._continues = vocab
        # Lengths that exist, longest first, so a position tries only lengths some piece has.
        self._start_lengths = sorted({len(t) for t in vocab}, reverse=True)
        self._continue_lengths = sorted({len(t) for t in self._continues}, reverse=True)
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def from_spec(cls, spec: dict) -> "WordPiece":
        vocab = spec.get("vocab")
        if not isinstance(vocab, dict):
            raise ValueError("WordPiece model needs a vocab object")
        return cls(dict(vocab), spec.get("unk_token", "[UNK]"), spec.get("continuing_subword_prefix", "##"),
                   int(spec.get("max_input_chars_per_word", 100)))

    def _unknown(self) -> list[int]:
        unk_id = self.vocab.get(self.unk_token)
        if unk_id is None:
            raise ValueError(f"WordPiece: unknown token {self.unk_token!r} is not in the vocabulary")
        return [unk_id]

    def tokenize(self, word: str) -> list[int]:
        cached = self._cache.get(word)
        if cached is not None:
            return cached[:]
        ids = self._segment(word)
        if ids is None:
            ids = self._unknown()
        cache = self._cache
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[word] = ids
        return ids[:]

    def _segment(self, word: str) -> list[int] | None:
        size = len(word)
        if size > self.max_input_chars_per_word:
            return None
        ids = []
        start = 0
        pieces, lengths = self._starts, self._start_lengths
        while start < size:
            remaining = size - start
            for length in lengths:
                if length > remaining:
                    continue
                id_ = pieces.get(word[start:start + length])
                if id_ is not None:
                    ids.append(id_)
                    start += length
                    break
            else:
                return None
            pieces, lengths = self._continues, self._continue_lengths
        return ids
