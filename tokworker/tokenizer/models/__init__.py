"""Tokenizer models by tokenizer.json "type": BPE here, WordPiece / Unigram / WordLevel beside it.

Every model has `vocab: dict[str, int]` and `tokenize(word) -> list[int]`.
"""

from __future__ import annotations

from importlib import import_module

from ..errors import UnsupportedComponent

_MODELS = {
    "BPE": ("tokworker.tokenizer.models.bpe", "BPE"),
    "WordPiece": ("tokworker.tokenizer.models.wordpiece", "WordPiece"),
    "Unigram": ("tokworker.tokenizer.models.unigram", "Unigram"),
    "WordLevel": ("tokworker.tokenizer.models.wordlevel", "WordLevel"),
}


def from_spec(spec: dict, cache_key: str | None = None):
    """The model a tokenizer.json "model" object describes; UnsupportedComponent names an unknown type.
    `cache_key` (the file's digest) lets BPE reuse its precomputed merge table from disk."""
    kind = spec.get("type")
    if kind is None and "merges" in spec:
        kind = "BPE"                       # tokenizer.json files written before "type" was stored
    if kind not in _MODELS:
        raise UnsupportedComponent("model", kind)
    module, name = _MODELS[kind]
    try:
        cls = getattr(import_module(module), name)
    except (ImportError, AttributeError) as error:
        raise UnsupportedComponent("model", kind, f"not available yet ({error})") from None
    return cls.from_spec(spec, cache_key) if kind in ("BPE", "Unigram") else cls.from_spec(spec)
