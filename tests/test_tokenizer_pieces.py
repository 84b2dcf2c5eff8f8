"""The cache of whole pieces between added tokens: a chat's next turn re-encodes its earlier turns from it,
the ids equal a fresh tokenizer's (with and without the piece at the text's start, where a prefix space may
apply), and the cache stays under its byte bound."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.realdata import vocabulary
from tokworker import Tokenizer
from tokworker.tokenizer import tokenizer as tokenizer_module
from tokworker.worker.options import DEFAULT_MODEL_DIR

TURN = "<|im_start|>{role}\n{text}<|im_end|>\n"
WORDS = st.sampled_from(["the", " quick", " 日本語", " naïve", "\n\n", "  ", " 🧑‍🚀", "x" * 70, " café,"])
TEXTS = st.lists(WORDS, min_size=0, max_size=40).map("".join)
WARM = Tokenizer.from_dir(DEFAULT_MODEL_DIR)          # one instance across examples: its cache fills up


def conversation(texts: list[str]) -> str:
    return "".join(TURN.format(role=("user", "assistant")[i % 2], text=t) for i, t in enumerate(texts))


@settings(max_examples=60, deadline=None)
@given(st.lists(TEXTS, min_size=1, max_size=5))
def test_cached_pieces_give_a_fresh_tokenizers_ids(texts):
    warm, fresh = WARM, Tokenizer.from_dir(DEFAULT_MODEL_DIR)
    for upto in range(1, len(texts) + 1):               # each turn re-encodes the ones before it
        text = conversation(texts[:upto])
        assert warm.encode(text) == fresh.encode(text)
        fresh = Tokenizer.from_dir(DEFAULT_MODEL_DIR)
    piece = texts[0] * 3
    assert warm.encode(piece) == warm.encode(piece) == Tokenizer.from_dir(DEFAULT_MODEL_DIR).encode(piece)


def test_the_cache_is_bounded_in_bytes(monkeypatch):
    monkeypatch.setattr(tokenizer_module, "_PIECE_CACHE_BYTES", 20_000)
    tokenizer = Tokenizer.from_dir(vocabulary("qwen3_dir"))
    for i in range(200):
        tokenizer.encode(f"<|im_start|>user\n{'word%d ' % i * 30}<|im_end|>")
        assert tokenizer._pieces_bytes <= 20_000
    assert 0 < len(tokenizer._pieces_seen) < 200
