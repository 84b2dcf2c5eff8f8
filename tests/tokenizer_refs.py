"""Real tokenizers loaded once per test session and shared by the tokenizer test files (each load of a 150k
vocabulary costs about a second on both sides)."""

from __future__ import annotations

import functools
from collections import Counter

from tests.realdata import vocabulary


class Pair(tuple):
    """(ours, reference) for one vocabulary, with a short repr: hypothesis prints a failing example's
    fixtures, and the repr of a 150k-vocabulary tokenizers.Tokenizer runs for minutes."""

    def __new__(cls, name: str):
        pair = super().__new__(cls, (ours(name), reference(name)))
        pair.name = name
        return pair

    def __repr__(self) -> str:
        return f"Pair({self.name!r})"


def tokenizer_json(name: str):
    path = vocabulary(name)
    return path / "tokenizer.json" if path.is_dir() else path


@functools.lru_cache(maxsize=None)
def ours(name: str):
    from tokworker import Tokenizer
    path = vocabulary(name)
    return Tokenizer.from_dir(path) if path.is_dir() else Tokenizer.from_file(path)


@functools.lru_cache(maxsize=None)
def reference(name: str):
    import tokenizers
    return tokenizers.Tokenizer.from_file(str(tokenizer_json(name)))


def trained(model, trainer, corpus, normalizer=None, pre_tokenizer=None, decoder=None):
    """A `tokenizers` pipeline trained here on `corpus` (offline): the reference side of a trained-pipeline test."""
    import tokenizers
    tok = tokenizers.Tokenizer(model)
    if normalizer is not None:
        tok.normalizer = normalizer
    if pre_tokenizer is not None:
        tok.pre_tokenizer = pre_tokenizer
    if decoder is not None:
        tok.decoder = decoder
    tok.train_from_iterator(corpus, trainer)
    return tok


def trained_ids(ours, reference, text: str, add_special_tokens: bool = False) -> list[int]:
    """`tokenizers`' ids for `text` as the model's training stack reads it. With SentencePiece's dummy-prefix
    normalizer a space right after a special token is that prefix (mistral-common's prompts, see
    tests/test_trained_ids.py), where tokenizers prepends one more "▁": that space is left out, unless another
    special token starts on it. The text is encoded in pieces cut after each such space, each piece ending
    with its special token (so every other token keeps the neighbours it has in the whole text)."""
    from tokworker.tokenizer.normalizers import is_dummy_prefix
    if not is_dummy_prefix(ours.normalizer):
        return reference.encode(text, add_special_tokens=add_special_tokens).ids
    special = {i: token.content for i, token in reference.get_added_tokens_decoder().items()
               if token.special and not token.normalized}
    encoding = reference.encode(text, add_special_tokens=False)
    # an added token's match is a word of its own, holding its content (a model piece with the same id, or a
    # byte-fallback piece, is neither)
    words = Counter(encoding.word_ids)
    matches = [(start, end) for (start, end), token_id, word in zip(encoding.offsets, encoding.ids, encoding.word_ids)
               if token_id in special and special[token_id] in text[start:end] and words[word] == 1]
    cuts = [end for (_, end), (after, _) in zip(matches, matches[1:] + [(None, None)])
            if text[end:end + 1] == " " and after != end]
    if not cuts:
        return reference.encode(text, add_special_tokens=add_special_tokens).ids
    ids, cursor = [], 0
    for end in cuts:
        ids += reference.encode(text[cursor:end], add_special_tokens=False).ids
        cursor = end + 1
    if cursor < len(text):
        ids += reference.encode(text[cursor:], add_special_tokens=False).ids
    if add_special_tokens:                   # SentencePiece conversions put BOS first and nothing after
        ids = reference.encode("", add_special_tokens=True).ids + ids
    return ids
