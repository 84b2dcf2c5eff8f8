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

from itertools import repeat
from operator import getitem, itemgetter

import msgspec

from .. import precomputed
from ..json_numbers import serde_f64

_UNK_PENALTY = 10.0
_PREFIX_ONLY = (-1, 0.0)  # marks a string that only begins pieces
_INFINITY = float("inf")


class Unigram:
    def __init__(self, pieces: list[tuple[str, float]], unk_id: int | None = None, byte_fallback: bool = False):
        texts = [piece for piece, _ in pieces]
        self._setup(texts, [float(score) for _, score in pieces], *_prefixes(texts), unk_id, byte_fallback)

    def _setup(self, texts, scores, prefix_ids, prefix_ends, unk_id, byte_fallback) -> None:
        if unk_id is not None and not 0 <= unk_id < len(texts):
            raise ValueError(f"Unigram: unk_id {unk_id} is outside the vocabulary of {len(texts)} pieces")
        self.unk_id = unk_id
        self.byte_fallback = byte_fallback
        self.vocab: dict[str, int] = dict(zip(texts, range(len(texts))))       # a repeated piece: last wins
        # piece -> (id, score); a proper prefix of a piece -> _PREFIX_ONLY. Built with C-level maps: the
        # prefixes of 250k pieces are a million strings.
        prefixes = map(getitem, map(texts.__getitem__, prefix_ids), map(slice, repeat(None), prefix_ends))
        self._nodes: dict[str, tuple[int, float]] = dict.fromkeys(prefixes, _PREFIX_ONLY)
        self._nodes.update(zip(texts, zip(range(len(texts)), scores)))
        self._unk_score = min(scores, default=float("inf")) - _UNK_PENALTY
        self._byte_ids = [self.vocab.get(f"<0x{byte:02X}>") for byte in range(256)] if byte_fallback else None

    @classmethod
    def from_spec(cls, spec: dict, cache_key: str | None = None) -> "Unigram":
        """`vocab` is a list, or msgspec.Raw still to decode (tokenizer.json files, see Tokenizer._read_spec):
        then the scores as serde_json reads them and the prefix table come from precomputed's disk cache
        when they are there, and the pieces are decoded at C speed with plain floats."""
        vocab = spec.get("vocab")
        unk_id = spec.get("unk_id")
        unk_id = None if unk_id is None else int(unk_id)
        byte_fallback = bool(spec.get("byte_fallback", False))
        decoded = {}

        def build():
            texts, scores = _checked(_SERDE.decode(vocab) if isinstance(vocab, msgspec.Raw) else vocab)
            decoded["texts"] = texts
            return [scores, *_prefixes(texts)]

        if isinstance(vocab, msgspec.Raw) and cache_key is not None:
            scores, prefix_ids, prefix_ends = precomputed.arrays(cache_key + "-unigram", build, "dqq")
            texts = decoded.get("texts")
            if texts is None:
                try:
                    texts = list(map(itemgetter(0), _PLAIN.decode(vocab)))
                except msgspec.DecodeError:
                    texts = None
                if texts is None or len(texts) != len(scores):       # not this file's table: rebuild
                    scores, prefix_ids, prefix_ends = build()
                    texts = decoded["texts"]
        else:
            scores, prefix_ids, prefix_ends = build()
            texts = decoded["texts"]
        model = cls.__new__(cls)
        model._setup(texts, scores, prefix_ids, prefix_ends, unk_id, byte_fallback)
        return model

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


_SERDE = msgspec.json.Decoder(float_hook=serde_f64)
_PLAIN = msgspec.json.Decoder(list[tuple[str, float]])


def _checked(vocab) -> tuple[list[str], list[float]]:
    if not isinstance(vocab, list):
        raise ValueError("Unigram model needs a vocab list of [piece, score]")
    try:
        pairs = [(str(piece), float(score)) for piece, score in vocab]
    except (TypeError, ValueError):
        raise ValueError("Unigram vocab entries must be [piece, score]") from None
    return [piece for piece, _ in pairs], [score for _, score in pairs]


def _prefixes(texts: list[str]) -> tuple[list[int], list[int]]:
    """(piece index, length) naming each distinct proper prefix of the pieces that is not a piece itself."""
    known = set(texts)
    ids, ends = [], []
    for index, text in enumerate(texts):
        for end in range(1, len(text)):
            prefix = text[:end]
            if prefix not in known:
                known.add(prefix)
                ids.append(index)
                ends.append(end)
    return ids, ends
