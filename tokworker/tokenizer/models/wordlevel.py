"""WordLevel: each pre-tokenized word is one vocabulary entry, or the unknown token."""

from __future__ import annotations


class WordLevel:
    def __init__(self, vocab: dict[str, int], unk_token: str = "<unk>"):
        self.vocab = vocab
        self.unk_token = unk_token

    @classmethod
    def from_spec(cls, spec: dict) -> "WordLevel":
        vocab = spec.get("vocab")
        if not isinstance(vocab, dict):
            raise ValueError("WordLevel model needs a vocab object")
        return cls(dict(vocab), spec.get("unk_token", "<unk>"))

    def tokenize(self, word: str) -> list[int]:
        id_ = self.vocab.get(word)
        if id_ is None:
            id_ = self.vocab.get(self.unk_token)
            if id_ is None:
                raise ValueError(f"WordLevel: {word!r} is not in the vocabulary and there is no "
                                 f"unknown token {self.unk_token!r}")
        return [id_]
