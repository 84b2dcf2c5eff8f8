"""Unigram: the best-scoring segmentation of a word by Viterbi over piece log-probabilities.

Reproduces `tokenizers`' optimized Viterbi exactly: a position no one-character piece covers gets the
unknown piece with score (lowest piece score - 10); a later candidate replaces an end position's best only
when strictly better, so ties keep the earliest start; runs of unknown pieces are fused into one string,
which becomes its own id if the vocabulary has it, else its UTF-8 bytes as <0xNN> pieces (byte_fallback),
else the unknown id.

Per vocabulary we keep one dict over every piece and every prefix of a piece (a trie flattened into a dict),
so the search from a position stops at the first substring no piece starts with: linear in the word for a
bounded piece length. No per-word cache here: the Tokenizer caches whole words in front of every model.
"""

from __future__ import annotations

_UNK_PENALTY = 10.0
_PREFIX_ONLY = (-1, 0.0)  # marks a string that only begins pieces
_INFINITY = float("inf")


class Unigram:
    def __init__(self, pieces: list[tuple[str, float]], unk_id: int | None = None, byte_fallback: bool = False):
        if unk_id is not None and not 0 <= unk_id < len(pieces):
            raise ValueError(f"Unigram: unk_id {unk_id} is outside the vocabulary of {len(pieces)} pieces")
        self.unk_id = unk_id
        self.byte_fallback = byte_fallback
        self.vocab: dict[str, int] = {}
        self._nodes: dict[str, tuple[int, float]] = {}   # piece -> (id, score); proper prefix -> _PREFIX_ONLY
        for id_, (piece, score) in enumerate(pieces):
            self.vocab[piece] = id_
            self._nodes[piece] = (id_, float(score))
        for piece in self.vocab:
            for end in range(1, len(piece)):
                self._nodes.setdefault(piece[:end], _PREFIX_ONLY)
        lowest = min((float(score) for _, score in pieces), default=float("inf"))
        self._unk_score = lowest - _UNK_PENALTY
        self._byte_ids = [self.vocab.get(f"<0x{byte:02X}>") for byte in range(256)] if byte_fallback else None

    @classmethod
    def from_spec(cls, spec: dict) -> "Unigram":
        vocab = spec.get("vocab")
        if not isinstance(vocab, list):
            raise ValueError("Unigram model needs a vocab list of [piece, score]")
        try:
            pieces = [(str(piece), float(score)) for piece, score in vocab]
        except (TypeError, ValueError):
            raise ValueError("Unigram vocab entries must be [piece, score]") from None
        unk_id = spec.get("unk_id")
        return cls(pieces, None if unk_id is None else int(unk_id), bool(spec.get("byte_fallback", False)))

    def tokenize(self, word: str) -> list[int]:
        return self._encode(word) if word else []

    def _best_path(self, word: str) -> list:
        """For each end position, (start, id) of the best piece ending there."""
        size = len(word)
        node_of, unk_id, unk_score, prefix_only = self._nodes.get, self.unk_id, self._unk_score, _PREFIX_ONLY
        score = [-_INFINITY] * (size + 1)
        score[0] = 0.0
        back: list = [None] * (size + 1)
        for start in range(size):
            reached = score[start]
            end = start + 1
            entry = node_of(word[start])
            if entry is None or entry is prefix_only:
                # No one-character piece here: the unknown piece covers this character.
                candidate = unk_score + reached
                if candidate > score[end]:
                    if unk_id is None:
                        raise ValueError(f"Unigram: {word[start]!r} is not in the vocabulary and there is no unk_id")
                    score[end] = candidate
                    back[end] = (start, unk_id)
                if entry is None:
                    continue
            else:
                candidate = entry[1] + reached
                if candidate > score[end]:
                    score[end] = candidate
                    back[end] = (start, entry[0])
            end += 1
            while end <= size:
                entry = node_of(word[start:end])
                if entry is None:
                    break
                if entry is not prefix_only:
                    candidate = entry[1] + reached
                    if candidate > score[end]:
                        score[end] = candidate
                        back[end] = (start, entry[0])
                end += 1
        return back

    def _encode(self, word: str) -> list[int]:
        back = self._best_path(word)
        unk_id = self.unk_id
        ids: list[int] = []          # built backwards
        end, unknown_end = len(word), -1
        while end > 0:
            start, id_ = back[end]
            if id_ == unk_id:
                if unknown_end < 0:
                    unknown_end = end
            else:
                if unknown_end >= 0:
                    ids.extend(reversed(self._unknown(word[end:unknown_end])))
                    unknown_end = -1
                ids.append(id_)
            end = start
        if unknown_end >= 0:
            ids.extend(reversed(self._unknown(word[:unknown_end])))
        ids.reverse()
        return ids

    def _unknown(self, text: str) -> list[int]:
        """A fused run of unknown pieces: its own id, its bytes (byte_fallback), or the unknown id."""
        id_ = self.vocab.get(text)
        if id_ is not None:
            return [id_]
        if self._byte_ids is not None:
            byte_ids = [self._byte_ids[byte] for byte in text.encode("utf-8", "surrogatepass")]
            if None not in byte_ids:
                return byte_ids
        if self.unk_id is None:
            raise ValueError(f"Unigram: {text!r} is not in the vocabulary and there is no unk_id")
        return [self.unk_id]
