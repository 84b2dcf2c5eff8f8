"""WordPiece: greedy longest-match-first over the vocabulary, exactly as `tokenizers` segments a word.

A word longer than `max_input_chars_per_word` characters, or one with any position no vocabulary piece
matches, becomes the single unknown token. The longest piece at a position is found walking forward
through a dict of every piece and every prefix of one (a trie flattened into a dict), so a position costs
as many lookups as its match is long plus one, not one per piece length tried. No per-word cache here: the
Tokenizer caches whole words in front of every model.
"""

from __future__ import annotations

_PREFIX_ONLY = -1         # a string that only begins pieces


def _with_prefixes(pieces: dict[str, int]) -> dict[str, int]:
    """piece -> id, and each proper prefix of a piece that is not itself a piece -> _PREFIX_ONLY."""
    nodes = dict.fromkeys({piece[:end] for piece in pieces for end in range(1, len(piece))}, _PREFIX_ONLY)
    nodes.update(pieces)
    return nodes


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
        self._start_nodes = _with_prefixes(self._starts)
        self._continue_nodes = self._start_nodes if self._continues is vocab else _with_prefixes(self._continues)

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
        ids = self._segment(word)
        return ids if ids is not None else self._unknown()

    def _segment(self, word: str) -> list[int] | None:
        size = len(word)
        if size > self.max_input_chars_per_word:
            return None
        ids = []
        start = 0
        node_of = self._start_nodes.get
        while start < size:
            found = _PREFIX_ONLY
            end = start + 1
            while end <= size:
                node = node_of(word[start:end])
                if node is None:
                    break
                if node != _PREFIX_ONLY:
                    found, found_end = node, end
                end += 1
            if found == _PREFIX_ONLY:
                return None
            ids.append(found)
            start = found_end
            node_of = self._continue_nodes.get
        return ids
