"""WordPiece: greedy longest-match-first over the vocabulary, exactly as `tokenizers` segments a word.

A word longer than `max_input_chars_per_word` characters, or one with any position no vocabulary piece
matches, becomes the single unknown token. The longest piece at a position is found walking forward
through a dict of every piece and every prefix of one up to _TRIE_DEPTH characters (a trie flattened into a
dict), so a position costs as many lookups as its match is long plus one, not one per piece length tried. A
longer piece (none in real vocabularies) is found from its first _TRIE_DEPTH characters by comparing it
whole: its every prefix as a key would cost the square of its length. No per-word cache here: the
Tokenizer caches whole words in front of every model.
"""

from __future__ import annotations

_PREFIX_ONLY = -1         # a string that only begins pieces
_TRIE_DEPTH = 64          # the longest prefix kept as a key


def _with_prefixes(pieces: dict[str, int]) -> tuple[dict[str, int], dict[str, list[tuple[str, int]]]]:
    """piece -> id with each proper prefix of a piece up to _TRIE_DEPTH characters that is not itself a
    piece -> _PREFIX_ONLY; and the pieces longer than that under their first _TRIE_DEPTH characters."""
    nodes = dict.fromkeys({piece[:end] for piece in pieces for end in range(1, min(len(piece), _TRIE_DEPTH + 1))},
                          _PREFIX_ONLY)
    nodes.update(pieces)
    long: dict[str, list[tuple[str, int]]] = {}
    for piece, piece_id in pieces.items():
        if len(piece) > _TRIE_DEPTH:
            long.setdefault(piece[:_TRIE_DEPTH], []).append((piece, piece_id))
    return nodes, long


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
        self._start_nodes, self._start_long = _with_prefixes(self._starts)
        self._continue_nodes, self._continue_long = (self._start_nodes, self._start_long) \
            if self._continues is vocab else _with_prefixes(self._continues)

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
        node_of, long = self._start_nodes.get, self._start_long
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
            if end - start > _TRIE_DEPTH and long:            # the walk got past the trie's depth
                for piece, piece_id in long.get(word[start:start + _TRIE_DEPTH], ()):
                    if (found == _PREFIX_ONLY or start + len(piece) > found_end) and word.startswith(piece, start):
                        found, found_end = piece_id, start + len(piece)
            if found == _PREFIX_ONLY:
                return None
            ids.append(found)
            start = found_end
            node_of, long = self._continue_nodes.get, self._continue_long
        return ids
