"""Unigram against `tokenizers`: a tokenizer trained with UnigramTrainer end to end, the model alone on
generated words, and hand-built vocabularies for ties, unknown fusing and byte fallback."""

from __future__ import annotations

import json
import math
from typing import NamedTuple

import pytest
from hypothesis import example, given, settings, strategies as st
from tokenizers import Tokenizer as RefTokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from tokworker.tokenizer import Tokenizer
from tokworker.tokenizer.models.unigram import _TRIE_DEPTH, Unigram

from test_normalizers import CORPUS
from test_wordpiece import TRAINING_TEXT

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)


class Pair(NamedTuple):
    ours: Tokenizer
    reference: RefTokenizer

    def __repr__(self) -> str:
        return "Pair(ours, reference)"


def reference_ids(model, word: str) -> list[int]:
    return [token.id for token in model.tokenize(word)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Pair:
    reference = RefTokenizer(models.Unigram())
    reference.normalizer = normalizers.NFKC()
    reference.pre_tokenizer = pre_tokenizers.Metaspace()
    reference.decoder = decoders.Metaspace()
    reference.train_from_iterator(TRAINING_TEXT, trainers.UnigramTrainer(
        vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"], unk_token="<unk>"))
    path = tmp_path_factory.mktemp("unigram") / "tokenizer.json"
    reference.save(str(path))
    return Pair(Tokenizer.from_file(path), reference)


def assert_same(pair: Pair, line: str) -> None:
    expected = pair.reference.encode(line, add_special_tokens=False).ids
    assert pair.ours.encode(line) == expected, line
    for skip in (False, True):
        assert pair.ours.decode(expected, skip_special_tokens=skip) == pair.reference.decode(expected, skip_special_tokens=skip)


def test_trained_unigram_end_to_end(trained):
    for line in CORPUS + TRAINING_TEXT[:6] + [" ".join(CORPUS) * 10]:
        assert_same(trained, line)


@settings(max_examples=150, deadline=None)
@given(line=text)
def test_trained_unigram_on_generated_text(trained, line):
    assert_same(trained, line)


@pytest.fixture(scope="module")
def trained_model(trained) -> Unigram:
    return Unigram.from_spec(json.loads(trained.reference.to_str())["model"])


@settings(max_examples=400, deadline=None)
@given(word=st.lists(st.sampled_from(list("▁abcdefilnorstuvwxyzé東京日本") + ["▁the", "ing", "able", "\U0001f600", "<s>"]),
                     min_size=1, max_size=16).map("".join))
def test_trained_model_alone_on_generated_words(trained, trained_model, word):
    assert trained_model.tokenize(word) == reference_ids(trained.reference.model, word)


VOCAB = [("<unk>", 0.0), ("a", -1.0), ("b", -1.0), ("ab", -2.0), ("c", -3.0), ("abc", -3.0), ("bc", -1.0),
         ("x", -5.0), ("xy", -1.0), ("d", -0.5), ("dd", -1.0), ("ddd", -1.5)]


@pytest.mark.parametrize("unk_id", [0, None])
@pytest.mark.parametrize("byte_fallback", [False, True])
def test_hand_built_vocabularies(unk_id, byte_fallback):
    """Equal-score paths (ties keep the earliest start), fused unknown runs, a fused run that is itself a piece
    ("xy": "y" alone is unknown), byte fallback with and without the byte pieces."""
    vocab = VOCAB + ([(f"<0x{b:02X}>", -10.0) for b in range(256) if b != 0xA9] if byte_fallback else [])
    ours = Unigram(vocab, unk_id=unk_id, byte_fallback=byte_fallback)
    reference = models.Unigram(vocab, unk_id=unk_id, byte_fallback=byte_fallback)
    for word in ["abc", "ab", "abcabc", "dddd", "ddddd", "bcab", "xy", "yy", "qqq", "aqqb", "é", "©", "a©b", "<unk>",
                 "ddd" * 30, "a\U0001f600\U0001f600b", "yxy"]:
        try:
            expected = reference_ids(reference, word)
        except Exception:
            with pytest.raises(ValueError):
                ours.tokenize(word)
            continue
        assert ours.tokenize(word) == expected, word


def test_long_word_is_linear():
    """50,000 characters with no split: Viterbi stays linear for bounded piece length."""
    model = Unigram(VOCAB, unk_id=0)
    word = "abcdxq" * 8_000
    assert model.tokenize(word) == reference_ids(models.Unigram(VOCAB, unk_id=0, byte_fallback=False), word)


# Pieces past the trie's depth (_TRIE_DEPTH characters), found by comparing them whole: a file with one piece
# of 300,000 characters used to keep its every prefix (45 GB), now its first 64.
DEEP = "ab" * 32
LONG_VOCAB = [("<unk>", 0.0), ("a", -1.0), ("b", -1.0), ("ab", -1.5), (DEEP, -3.0), (DEEP + "a", -2.0),
              (DEEP + "ab" * 10, -4.0), (DEEP + "b" * 7, -1.0), ("b" * 100, -9.0), ("b" * 99 + "a", -0.5),
              ("ba" * 40, -6.0)]


@settings(max_examples=300, deadline=None)
@given(word=st.lists(st.sampled_from(["a", "b", "ab", "ba", "b" * 50, DEEP, "c"]), min_size=1, max_size=12).map("".join))
@example(word=DEEP + "a")                     # [5]: the long piece itself
@example(word="b" * 99 + "a" + DEEP + "b" * 7)  # [9, 7]
def test_pieces_longer_than_the_trie_as_tokenizers(word):
    assert _TRIE_DEPTH == len(DEEP)
    ours = Unigram(LONG_VOCAB, unk_id=0)
    assert ours.tokenize(word) == reference_ids(models.Unigram(LONG_VOCAB, unk_id=0, byte_fallback=False), word)


def test_a_huge_piece_keeps_only_the_trie_depth_of_prefixes():
    model = Unigram([("<unk>", 0.0), ("a", -1.0), ("a" * 300_000, -2.0)], unk_id=0)
    assert sum(map(len, model._nodes)) < 300_000 + _TRIE_DEPTH ** 2       # the piece, and its first prefixes
    assert model.tokenize("a" * 300_001) == [1, 2]


@pytest.mark.parametrize("spec", [
    {"type": "Unigram", "vocab": {"a": 1.0}},
    {"type": "Unigram", "vocab": [["a"]]},
    {"type": "Unigram", "vocab": [["a", -1.0]], "unk_id": 5},
])
def test_bad_specs_raise_value_error(spec):
    with pytest.raises(ValueError):
        Unigram.from_spec(spec)


def _scores_as_tokenizers_reads_them(number_texts: list[str]) -> list[float] | None:
    """Each JSON number text as a Unigram score, read back from `tokenizers` (to_str writes its f64 exactly)."""
    vocab = ", ".join(f'["p{i}", {text}]' for i, text in enumerate(number_texts))
    source = '{"version": "1.0", "model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], %s]}}' % vocab
    try:
        reference = RefTokenizer.from_str(source)
    except Exception:
        return None
    return [score for _, score in json.loads(reference.to_str())["model"]["vocab"][1:]]


_NUMBER_TEXTS = st.floats(allow_nan=False, allow_infinity=False).map(repr) | st.from_regex(
    r"-?(0|[1-9][0-9]{0,24})(\.[0-9]{1,25})?([eE][+-]?[0-9]{1,3})?", fullmatch=True)


@pytest.mark.slow  # a sweep of several seconds
@settings(max_examples=300, deadline=None)
@given(texts=st.lists(_NUMBER_TEXTS, min_size=1, max_size=20))
def test_scores_are_read_as_tokenizers_reads_them(texts):
    """serde_json's float parsing (not correctly rounded past 2^53) is what tokenizers' scores are."""
    from tokworker.tokenizer.json_numbers import serde_f64, serde_f64_all
    expected = _scores_as_tokenizers_reads_them(texts)
    if expected is None:                                   # out of range for tokenizers too
        with pytest.raises(ValueError):
            [serde_f64(text) for text in texts]
        with pytest.raises(ValueError):
            serde_f64_all(texts)
        return
    assert [serde_f64(text) for text in texts] == expected
    together = serde_f64_all(texts)                       # the C-level batch: same values, same signs of zero
    assert together == expected and [math.copysign(1, v) for v in together] == [math.copysign(1, v) for v in expected]


def test_near_tie_follows_tokenizers_reading_of_the_file(tmp_path):
    """"-10.637309763495383" is -10.637309763495384 to tokenizers: enough to flip which of two equal-looking
    paths through "iii" wins. Read correctly rounded, the other path wins and the ids differ."""
    scores = [("<unk>", "0.0"), ("▁", "-0.7163940285656256"), ("i", "-7.368580525490345"),
              ("ii", "-10.637309763495383"), ("h", "-9.0")]
    vocab = ", ".join(f'["{piece}", {score}]' for piece, score in scores)
    source = ('{"version": "1.0", "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", '
              '"prepend_scheme": "always", "split": true}, '
              '"model": {"type": "Unigram", "unk_id": 0, "vocab": [%s]}}' % vocab)
    (tmp_path / "tokenizer.json").write_text(source, encoding="utf-8")
    reference = RefTokenizer.from_str(source)
    ours = Tokenizer.from_file(tmp_path / "tokenizer.json")
    for line in ["iii", "iiih", "h iii iiiii"]:
        assert ours.encode(line) == reference.encode(line, add_special_tokens=False).ids, line
    assert ours.encode("iii") == [1, 2, 3]                 # ▁ i ii, not ▁ ii i


@settings(max_examples=300, deadline=None)
@given(line=st.text(st.sampled_from(list(" ▁▁ab\u3000\n")), max_size=30),
       scheme=st.sampled_from(["always", "first", "never"]), at_start=st.booleans())
def test_metaspace_words_match_tokenizers(line, scheme, at_start):
    """Metaspace's split before each ▁ (one findall) gives tokenizers' words, ▁ runs and leading runs too."""
    from tokworker.tokenizer import pre_tokenizers as ours_pre
    ours = ours_pre.Metaspace(prepend_scheme=scheme)
    expected = [word for word, _ in pre_tokenizers.Metaspace(prepend_scheme=scheme).pre_tokenize_str(line)]
    if scheme == "first" and not at_start:
        expected = [word for word, _ in pre_tokenizers.Metaspace(prepend_scheme="never").pre_tokenize_str(line)]
    assert ours.split([line], at_start) == expected
