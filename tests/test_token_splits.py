"""token_splits, the merges of tiktoken ranks and of SentencePiece-style GGUF vocabularies: equal to listing
every cut of every token (on real vocabularies and generated ones), and linear in the tokens' length: a file
holding one 300,000-character token loads in about the CPU time of the same vocabulary without it (it took
12 s when every cut was sliced). Ids on real vocabularies: test_trained_ids.py, test_gguf_built.py."""

from __future__ import annotations

import base64
import json
import random
import struct
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from tests.realdata import REPO, vocabulary
from tokworker.tokenizer.loaders import read_tiktoken_ranks
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


# Loads in a fresh process (no disk cache): the CPU seconds of each, on one line of JSON.
_LOAD = """
import json, sys, time
from tokworker import Tokenizer
from tokworker.tokenizer.loaders import CL100K_PATTERN
load = {"gguf": Tokenizer.from_gguf,
        "tiktoken": lambda path: Tokenizer.from_tiktoken(path, CL100K_PATTERN, {"<|endoftext|>": 100000})}[sys.argv[1]]
seconds = []
for path in sys.argv[2:]:
    start = time.process_time()
    load(path)
    seconds.append(time.process_time() - start)
print(json.dumps(seconds))
"""


def _load_cpu_seconds(kind: str, *paths) -> list[float]:
    done = subprocess.run([sys.executable, "-c", _LOAD, kind, *map(str, paths)], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env={"TOKWORKER_CACHE_DIR": "off", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


HUGE = b"a" * 300_000                  # with "a", "aa" and "aaaa" in the vocabulary: 299,999 cuts to look at


def test_a_huge_sentencepiece_token_loads_in_linear_time(tmp_path):
    ordinary = list(dict.fromkeys(_ordinary_tokens() + [b"aa", b"aaaa"]))
    (tmp_path / "ordinary.gguf").write_bytes(_spm_gguf(ordinary))
    (tmp_path / "huge.gguf").write_bytes(_spm_gguf(ordinary + [HUGE]))
    ordinary_s, huge_s = _load_cpu_seconds("gguf", tmp_path / "ordinary.gguf", tmp_path / "huge.gguf")
    assert huge_s < 2 * ordinary_s + 0.5, (ordinary_s, huge_s)


def test_a_huge_tiktoken_token_loads_in_linear_time(tmp_path):
    ordinary = list(dict.fromkeys(_ordinary_tokens() + [b"aa", b"aaaa"]))
    lines = [base64.b64encode(token) + b" %d" % rank for rank, token in enumerate(ordinary)]
    (tmp_path / "ordinary.tiktoken").write_bytes(b"\n".join(lines))
    (tmp_path / "huge.tiktoken").write_bytes(b"\n".join(lines + [base64.b64encode(HUGE) + b" %d" % len(lines)]))
    ordinary_s, huge_s = _load_cpu_seconds("tiktoken", tmp_path / "ordinary.tiktoken", tmp_path / "huge.tiktoken")
    assert huge_s < 2 * ordinary_s + 0.5, (ordinary_s, huge_s)
