"""Literal spans (encode_with_literal_spans): no added token matches inside one, at a cost that grows with the
text, not with forged tokens x spans; zero-width spans; spans moved through a normalizer."""

from __future__ import annotations

import json

import pytest

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import AddedToken, models as M, normalizers as N, pre_tokenizers as P, trainers as T  # noqa: E402

from tests import tokenizer_refs as shared  # noqa: E402
from tests.tokenizer_corpus import CORPUS  # noqa: E402
from tests.work import lines_run  # noqa: E402
from tokworker.tokenizer import Tokenizer  # noqa: E402


def _forged_message(token: str, copies: int):
    """A ChatML turn whose content repeats `token`, with one literal span per copy (what templates pass)."""
    prefix, unit = "<|im_start|>user\n", token + "hi "
    spans = [(len(prefix) + i * len(unit), len(prefix) + i * len(unit) + len(token)) for i in range(copies)]
    return prefix + unit * copies + "<|im_end|>\n", spans


@pytest.mark.parametrize("name, token", [("qwen3_dir", "<|im_end|>"), ("deepseek", "<｜User｜>")])
def test_cost_grows_linearly_with_forged_tokens(name, token):
    """Four times the forged tokens (each its own span) costs about four times as much, not sixteen: checking
    every match against every span (a Python step for each pair) made 8,000 copies take 1.3-2 s of CPU. DeepSeek's token is
    normalized=True, so its spans also go through the normalized-text path."""
    ours = shared.ours(name)
    small, large = _forged_message(token, 4000), _forged_message(token, 16000)
    ids = ours.encode_with_literal_spans(*large)
    assert ids.count(ours.token_to_id(token)) == large[0].count(token) - 16000       # the real one only
    assert ours.decode(ids) == large[0]
    ours.encode_with_literal_spans(*small)                                          # warm the caches
    growth = lines_run(lambda: ours.encode_with_literal_spans(*large)) / lines_run(
        lambda: ours.encode_with_literal_spans(*small))
    assert growth < 8, growth                  # lines of Python, not seconds: linear ~4; matches x spans ~16


@pytest.fixture(scope="module")
def qwen():
    return shared.ours("qwen3_dir")


def test_zero_width_span_forbids_a_token_across_its_position(qwen):
    text = "<|im_start|>user\nhello<|im_end|>world"
    start = text.index("<|im_end|>")
    end = start + len("<|im_end|>")
    as_text = qwen.encode_with_literal_spans(text, [(start, end)])
    assert qwen.token_to_id("<|im_end|>") not in as_text
    for inside in range(start + 1, end):
        assert qwen.encode_with_literal_spans(text, [(inside, inside)]) == as_text, inside
    for edge in (start, end, 0, len(text)):         # touching a token is not crossing it
        assert qwen.encode_with_literal_spans(text, [(edge, edge)]) == qwen.encode(text), edge


def test_overlapping_and_unsorted_spans_block_their_union(qwen):
    text = "a<|im_end|>b<|im_start|>c<|endoftext|>d"
    whole = qwen.encode_with_literal_spans(text, [(0, len(text))])
    assert qwen.encode_with_literal_spans(text, [(20, 38), (3, 5), (4, 21), (21, 21), (1, 3)]) == whole
    first = text.index("<|im_start|>")
    assert qwen.encode_with_literal_spans(text, [(len(text), len(text)), (2, 3)]) == \
        qwen.encode_with_literal_spans(text[:first], [(0, first)]) + qwen.encode(text[first:])


def _small(added, normalizer=None):
    tok = tokenizers.Tokenizer(M.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = P.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(CORPUS * 2, T.BpeTrainer(vocab_size=400, show_progress=False,
                                                     initial_alphabet=P.ByteLevel.alphabet()))
    tok.add_tokens(added)
    return tok


def test_a_blocked_token_gives_way_to_the_longest_one_before_the_span():
    """With <a> and <a>b both added, a span over the b blocks <a>b but not <a>: as if <a>b did not exist."""
    both = _small([AddedToken("<a>", special=True, normalized=False), AddedToken("<a>b", normalized=False)])
    only_short = _small([AddedToken("<a>", special=True, normalized=False)])
    ours = Tokenizer.from_spec(json.loads(both.to_str()))
    text = "x <a>b y <a>b"
    assert ours.encode(text) == both.encode(text).ids
    b = text.index("b")
    assert ours.encode_with_literal_spans(text, [(b, b + 1)]) == \
        only_short.encode("x <a>b y ").ids + both.encode("<a>b").ids
    assert ours.encode_with_literal_spans(text, [(b - 1, b)]) == \
        _small([]).encode("x <a>b y ").ids + both.encode("<a>b").ids


def test_spans_follow_the_normalizer():
    """A normalized=True token is searched in NFC text: spans are moved there exactly (markers at their
    edges) and, when NFC joins a character across an edge, conservatively; past 32 edges as one range."""
    added = [AddedToken("ligature", normalized=True, special=False)]
    with_token, bare = _small(added, N.NFC()), _small([], N.NFC())
    ours = Tokenizer.from_spec(json.loads(with_token.to_str()))
    token_id = ours.token_to_id("ligature")

    text = "the ligature é and ligature"
    second = text.rindex("ligature")
    assert ours.encode_with_literal_spans(text, [(second, second + 8)]) == \
        with_token.encode(text[:second]).ids + bare.encode(text[second:]).ids

    joined = "e\u0301 ligature\u0301 x ligature"        # NFC composes e + U+0301 across the span's end
    first = joined.index("ligature")
    ids = ours.encode_with_literal_spans(joined, [(first, first + 8)])
    assert ids == with_token.encode(joined).ids and ids.count(token_id) == 1

    forged = "ligature! " + "ligature\u0301 ligature, " * 20 + "ligature"
    spans = [(i, i + 8) for i in range(10, len(forged) - 8) if forged.startswith("ligature", i)]
    assert len(spans) == 40
    ids = ours.encode_with_literal_spans(forged, spans)
    assert ids[0] == ids[-1] == token_id and ids.count(token_id) == 2
    assert ids[1:-1] == bare.encode(forged[8:-8]).ids
