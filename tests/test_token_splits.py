"""token_splits, the merges of tiktoken ranks and of SentencePiece-style GGUF vocabularies: equal to listing
every cut of every token (on real vocabularies and generated ones), and linear in the tokens' length: a file
holding one 300,000-character token loads in about the lines of Python of the same vocabulary without it
(every cut sliced took a step per cut, 12 s of CPU in all). Ids on real vocabularies: test_trained_ids.py, test_gguf_built.py."""

from __future__ import annotations

import base64
import functools
import random
import struct

import pytest
from hypothesis import given, settings, strategies as st

from tests.realdata import vocabulary
from tests.work import lines_run
from tokworker import Tokenizer
from tokworker.tokenizer.loaders import CL100K_PATTERN, read_tiktoken_ranks
from tokworker.tokenizer.models.bpe import token_splits


def every_cut(tokens: list) -> set[tuple[int, int, int]]:
    """The definition, quadratic in a token's length."""
    index = {token: i for i, token in enumerate(tokens)}
    return {(i, index[token[:cut]], index[token[cut:]]) for i, token in enumerate(tokens)
            for cut in range(1, len(token)) if token[:cut] in index and token[cut:] in index}


@settings(max_examples=300, deadline=None)
@given(st.sets(st.text("ab▁", max_size=7), max_size=40), st.booleans())
def test_equal_to_every_cut(tokens, as_bytes):
    tokens = sorted(tokens)
    if as_bytes:
        tokens = [token.encode() for token in tokens]
    assert set(token_splits(tokens)) == every_cut(tokens)


@pytest.mark.parametrize("name", ["cl100k_tiktoken", "mistral_v1_sp"])
def test_equal_to_every_cut_on_real_vocabularies(name):
    path = vocabulary(name)
    if name.endswith("_sp"):
        sentencepiece = pytest.importorskip("sentencepiece")
        processor = sentencepiece.SentencePieceProcessor(model_file=str(path))
        tokens = [processor.IdToPiece(i) for i in range(processor.vocab_size())]
    else:
        tokens = list(read_tiktoken_ranks(path))
    splits = set(token_splits(tokens))
    assert len(splits) > 50_000 and splits == every_cut(tokens)


def _text(data: bytes) -> bytes:
    return struct.pack("<Q", len(data)) + data


def _spm_gguf(tokens: list[bytes]) -> bytes:
    """A SentencePiece-style ("llama") vocabulary with a score per token."""
    return (b"GGUF" + struct.pack("<IQQ", 3, 0, 3) + _text(b"tokenizer.ggml.model") + struct.pack("<I", 8)
            + _text(b"llama") + _text(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, len(tokens))
            + b"".join(map(_text, tokens)) + _text(b"tokenizer.ggml.scores") + struct.pack("<IIQ", 9, 6, len(tokens))
            + struct.pack(f"<{len(tokens)}f", *(-float(i) for i in range(len(tokens)))))


def _ordinary_tokens() -> list[bytes]:
    """20,000 distinct tokens of 1-10 letters (most with the "▁" prefix), every letter among them."""
    rng = random.Random(29)
    tokens = {b"<unk>": None, b"<s>": None, b"</s>": None, "▁".encode(): None}
    tokens.update(dict.fromkeys(bytes([c]) for c in range(97, 123)))
    while len(tokens) < 20_000:
        word = bytes(rng.choice(b"etaoinshrdlucmfw") for _ in range(rng.randint(1, 10)))
        tokens["▁".encode() * (rng.random() < 0.6) + word] = None
    return list(tokens)


def _load_lines(load, *paths) -> list[int]:
    """Lines of Python each load runs (counted, not timed: a loaded machine cannot stretch them)."""
    return [lines_run(functools.partial(load, path), limit=10_000_000) for path in paths]


def _from_tiktoken(path):
    return Tokenizer.from_tiktoken(path, CL100K_PATTERN, {"<|endoftext|>": 100000})


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch):
    monkeypatch.setenv("TOKWORKER_CACHE_DIR", "off")         # each load does the whole work


HUGE = b"a" * 300_000                  # with "a", "aa" and "aaaa" in the vocabulary: 299,999 cuts to look at
#: the huge token's own lines: a few dozen now (its prefixes and suffixes are chains of 3 tokens); looking at
#: every cut is a Python step per cut (299,999 of them), each slicing the token (12 s of CPU in all)
HUGE_TOKEN_LINES = 10_000


def test_a_huge_sentencepiece_token_loads_in_linear_time(tmp_path):
    ordinary = list(dict.fromkeys(_ordinary_tokens() + [b"aa", b"aaaa"]))
    (tmp_path / "ordinary.gguf").write_bytes(_spm_gguf(ordinary))
    (tmp_path / "huge.gguf").write_bytes(_spm_gguf(ordinary + [HUGE]))
    ordinary, huge = _load_lines(Tokenizer.from_gguf, tmp_path / "ordinary.gguf", tmp_path / "huge.gguf")
    assert huge < ordinary + HUGE_TOKEN_LINES, (ordinary, huge)


def test_a_huge_tiktoken_token_loads_in_linear_time(tmp_path):
    ordinary = list(dict.fromkeys(_ordinary_tokens() + [b"aa", b"aaaa"]))
    lines = [base64.b64encode(token) + b" %d" % rank for rank, token in enumerate(ordinary)]
    (tmp_path / "ordinary.tiktoken").write_bytes(b"\n".join(lines))
    (tmp_path / "huge.tiktoken").write_bytes(b"\n".join(lines + [base64.b64encode(HUGE) + b" %d" % len(lines)]))
    ordinary, huge = _load_lines(_from_tiktoken, tmp_path / "ordinary.tiktoken", tmp_path / "huge.tiktoken")
    assert huge < ordinary + HUGE_TOKEN_LINES, (ordinary, huge)
