"""Unigram: the best-scoring segmentation of a word by Viterbi over piece log-probabilities.

Reproduces `tokenizers`' optimized Viterbi exactly: a position no one-character piece covers gets the
unknown piece with score (lowest piece score - 10); a later candidate replaces an end position's best only
when strictly better, so ties keep the earliest start; runs of unknown pieces are fused into one string,
which becomes its own id if the vocabulary has it, else its UTF-8 bytes as <0xNN> pieces (byte_fallback),
else the unknown id.

Per vocabulary we keep one dict over every piece (its id) and every other prefix of a piece (_PREFIX_ONLY)
up to _TRIE_DEPTH characters: a trie flattened into a dict, so the search from a position stops at the
first substring no piece starts with, linear in the word for a bounded piece length. A piece longer than
that (none in real vocabularies) is found from its first _TRIE_DEPTH characters by comparing it whole:
its every prefix as a key would cost the square of its length (45 GB for one of 300,000 characters). No
per-word cache here: the Tokenizer caches whole words in front of every model.
"""

from __future__ import annotations

from itertools import repeat
from operator import itemgetter
from typing import Any

import msgspec

from .. import precomputed
from ..json_numbers import serde_f64_all

_UNK_PENALTY = 10.0
_PREFIX_ONLY = -1  # the id of a string that only begins pieces
_TRIE_DEPTH = 64   # the longest prefix kept as a key; longer pieces are compared whole (see _Tables.long)
_INFINITY = float("inf")


class Unigram:
    def __init__(self, pieces: list[tuple[str, float]], unk_id: int | None = None, byte_fallback: bool = False):
        texts = [piece for piece, _ in pieces]
        self._setup(texts, [float(score) for _, score in pieces], _Tables(texts), unk_id, byte_fallback)

    def _setup(self, texts, scores, tables: "_Tables", unk_id, byte_fallback) -> None:
        if unk_id is not None and not 0 <= unk_id < len(texts):
            raise ValueError(f"Unigram: unk_id {unk_id} is outside the vocabulary of {len(texts)} pieces")
        self.unk_id = unk_id
        self.byte_fallback = byte_fallback
        self.vocab: dict[str, int] = tables.vocab
        self._nodes: dict[str, int] = tables.nodes
        self._long: dict[str, list[tuple[str, int]]] = tables.long
        self._scores: list[float] = scores
        self._unk_score = min(scores, default=float("inf")) - _UNK_PENALTY
        self._byte_ids = [self.vocab.get(f"<0x{byte:02X}>") for byte in range(256)] if byte_fallback else None

    @classmethod
    def from_spec(cls, spec: dict, cache_key: str | None = None) -> "Unigram":
        """`vocab` is a list, or msgspec.Raw still to decode (tokenizer.json files, see Tokenizer._read_spec):
        then the pieces, their scores as serde_json reads them and the prefixes come from precomputed's
        disk cache when they are there (named by the file's digest, so the file is not decoded again)."""
        vocab = spec.get("vocab")
        unk_id = spec.get("unk_id")
        unk_id = None if unk_id is None else int(unk_id)
        byte_fallback = bool(spec.get("byte_fallback", False))
        built = []

        def build():
            texts, scores = _decoded(vocab) if isinstance(vocab, msgspec.Raw) else _checked(vocab)
            built.append(_Tables(texts))
            return scores, texts, built[0].prefixes

        if isinstance(vocab, msgspec.Raw) and cache_key is not None:
            scores, texts, prefixes = precomputed.arrays(cache_key + "-unigram", build, "dss")
            scores = scores.tolist()
        else:
            scores, texts, prefixes = build()
        model = cls.__new__(cls)
        model._setup(texts, scores, built[0] if built else _Tables(texts, prefixes), unk_id, byte_fallback)
        return model

    def tokenize(self, word: str) -> list[int]:
        return self._encode(word) if word else []

    def _best_path(self, word: str) -> list:
        """For each end position, (start, id) of the best piece ending there."""
        size = len(word)
        node_of, scores, unk_id, unk_score = self._nodes.get, self._scores, self.unk_id, self._unk_score
        score = [-_INFINITY] * (size + 1)
        score[0] = 0.0
        back: list = [None] * (size + 1)
        for start in range(size):
            reached = score[start]
            end = start + 1
            entry = node_of(word[start])
            if entry is None or entry < 0:
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
                candidate = scores[entry] + reached
                if candidate > score[end]:
                    score[end] = candidate
                    back[end] = (start, entry)
            end += 1
            while end <= size:
                entry = node_of(word[start:end])
                if entry is None:
                    break
                if entry >= 0:
                    candidate = scores[entry] + reached
                    if candidate > score[end]:
                        score[end] = candidate
                        back[end] = (start, entry)
                end += 1
            if end - start > _TRIE_DEPTH and self._long:          # the walk got past the trie's depth
                for piece, entry in self._long.get(word[start:start + _TRIE_DEPTH], ()):
                    if word.startswith(piece, start):
                        end = start + len(piece)
                        candidate = scores[entry] + reached
                        if candidate > score[end]:
                            score[end] = candidate
                            back[end] = (start, entry)
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


_AS_TEXT = msgspec.json.Decoder(list[tuple[str, Any]], float_hook=str)    # numbers' own text, read below


def _decoded(vocab: msgspec.Raw) -> tuple[list[str], list[float]]:
    """A tokenizer.json vocab: pieces, and scores as serde_json reads them (json_numbers)."""
    try:
        pairs = _AS_TEXT.decode(vocab)
    except msgspec.DecodeError as error:
        raise ValueError(f"Unigram vocab entries must be [piece, score]: {error}") from None
    texts, numbers = list(map(itemgetter(0), pairs)), list(map(itemgetter(1), pairs))
    kinds = set(map(type, numbers))
    if kinds <= {str}:
        return texts, serde_f64_all(numbers)
    if not kinds <= {str, int}:
        raise ValueError("Unigram vocab entries must be [piece, score]")
    floats = serde_f64_all([number if type(number) is str else "0.0" for number in numbers])
    return texts, [float(number) if type(number) is int else value for number, value in zip(numbers, floats)]


def _checked(vocab) -> tuple[list[str], list[float]]:
    if not isinstance(vocab, list):
        raise ValueError("Unigram model needs a vocab list of [piece, score]")
    try:
        pairs = [(str(piece), float(score)) for piece, score in vocab]
    except (TypeError, ValueError):
        raise ValueError("Unigram vocab entries must be [piece, score]") from None
    return [piece for piece, _ in pairs], [score for _, score in pairs]


class _Tables:
    """piece -> id (`vocab`: a repeated piece, the last id), `nodes`: the same plus each other proper
    prefix of a piece up to _TRIE_DEPTH characters -> _PREFIX_ONLY, and `long`: the first _TRIE_DEPTH
    characters of each longer piece -> [(piece, id)]. Without `prefixes` (a cache's), they are found: a
    piece's prefixes are walked from the longest down, and the first one already known ends the walk, since
    its own prefixes are known too (a piece's are walked when that piece is), so each new prefix costs one
    step."""

    def __init__(self, texts: list[str], prefixes: list[str] | None = None):
        self.vocab = dict(zip(texts, range(len(texts))))
        self.nodes = nodes = self.vocab.copy()
        self.long: dict[str, list[tuple[str, int]]] = {}
        for text, piece_id in self.vocab.items():
            if len(text) > _TRIE_DEPTH:
                self.long.setdefault(text[:_TRIE_DEPTH], []).append((text, piece_id))
        if prefixes is not None:
            nodes.update(zip(prefixes, repeat(_PREFIX_ONLY)))
            self.prefixes = prefixes
            return
        self.prefixes = found = []
        for text in texts:
            for end in range(min(len(text) - 1, _TRIE_DEPTH), 0, -1):
                prefix = text[:end]
                if prefix in nodes:
                    break
                nodes[prefix] = _PREFIX_ONLY
                found.append(prefix)
