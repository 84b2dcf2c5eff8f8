"""WordPiece and WordLevel against `tokenizers`: BERT's real vocabulary end to end, trained tokenizers, and the
models alone on generated words."""

from __future__ import annotations

import json
from typing import NamedTuple

import pytest
from hypothesis import example, given, settings, strategies as st
from tokenizers import Tokenizer as RefTokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from tokworker.tokenizer import Tokenizer
from tokworker.tokenizer.models.wordlevel import WordLevel
from tokworker.tokenizer.models.wordpiece import _TRIE_DEPTH, WordPiece

from realdata import vocabulary
from test_normalizers import CORPUS

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)

TRAINING_TEXT = [
    "The quick brown fox jumps over the lazy dog.", "Naïve café owners résumé their déjà vu.",
    "東京都は日本の首都です。北京是中国的首都。", "Hello, world! It's 2024: prices rose 3.5% (again).",
    "def tokenize(word): return [piece for piece in word]", "Unbelievable unbelievably believable believer",
] * 50

LONG_TEXT = " ".join(CORPUS) * 20


class Pair(NamedTuple):
    """Our tokenizer and the reference, with a short repr for hypothesis' falsifying examples."""
    ours: Tokenizer
    reference: RefTokenizer

    def __repr__(self) -> str:
        return "Pair(ours, reference)"


@pytest.fixture(scope="module")
def bert_pair():
    path = vocabulary("bert_wordpiece")
    reference = RefTokenizer.from_file(str(path))
    reference.no_truncation()      # the shipped file truncates and pads to 128 (TRAPS.md)
    reference.no_padding()
    return Pair(Tokenizer.from_file(path), reference)


def assert_same(ours, reference, line):
    for special in (False, True):
        expected = reference.encode(line, add_special_tokens=special).ids
        assert ours.encode(line, add_special_tokens=special) == expected, (line, special)
        for skip in (False, True):
            assert ours.decode(expected, skip_special_tokens=skip) == reference.decode(expected, skip_special_tokens=skip)


def test_bert_real_vocabulary_on_corpus(bert_pair):
    ours, reference = bert_pair
    for line in CORPUS + [LONG_TEXT, "[CLS] literal [SEP] and [MASK]ed", "x" * 150, "supercalifragilistic" * 3]:
        assert_same(ours, reference, line)


@settings(max_examples=150, deadline=None)
@given(line=text)
def test_bert_real_vocabulary_on_generated_text(bert_pair, line):
    assert_same(*bert_pair, line)


@pytest.fixture(scope="module")
def bert_model(bert_pair) -> WordPiece:
    return WordPiece.from_spec(json.loads(bert_pair[1].to_str())["model"])


def test_bert_model_alone_on_pre_tokenized_words(bert_pair, bert_model):
    """WordPiece by itself, on the words tokenizers' own normalizer and pre-tokenizer produce."""
    _, reference = bert_pair
    model = bert_model
    for line in CORPUS + [LONG_TEXT]:
        normalized = reference.normalizer.normalize_str(line)
        for word, _ in reference.pre_tokenizer.pre_tokenize_str(normalized):
            assert model.tokenize(word) == [t.id for t in reference.model.tokenize(word)], word


@settings(max_examples=300, deadline=None)
@given(word=st.lists(st.sampled_from(list("abcdeilnorstuz#éü東京") + ["##", "un", "able", "ing"]), min_size=1,
                    max_size=12).map("".join))
def test_bert_model_alone_on_generated_words(bert_pair, bert_model, word):
    assert bert_model.tokenize(word) == [t.id for t in bert_pair[1].model.tokenize(word)]


@pytest.fixture(scope="module")
def trained_wordpiece(tmp_path_factory):
    reference = RefTokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=20))
    reference.normalizer = normalizers.BertNormalizer(lowercase=False)
    reference.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    reference.decoder = decoders.WordPiece()
    reference.train_from_iterator(TRAINING_TEXT, trainers.WordPieceTrainer(
        vocab_size=300, special_tokens=["[UNK]", "[CLS]", "[SEP]"]))
    reference.post_processor = processors.BertProcessing(("[SEP]", reference.token_to_id("[SEP]")),
                                                         ("[CLS]", reference.token_to_id("[CLS]")))
    path = tmp_path_factory.mktemp("wordpiece") / "tokenizer.json"
    reference.save(str(path))
    return Pair(Tokenizer.from_file(path), reference)


def test_trained_wordpiece(trained_wordpiece):
    ours, reference = trained_wordpiece
    for line in CORPUS + TRAINING_TEXT[:6] + ["averyveryverylongwordthatexceedstwentychars and short"]:
        assert_same(ours, reference, line)


@settings(max_examples=100, deadline=None)
@given(line=text)
def test_trained_wordpiece_on_generated_text(trained_wordpiece, line):
    assert_same(*trained_wordpiece, line)


@pytest.fixture(scope="module")
def trained_wordlevel(tmp_path_factory):
    reference = RefTokenizer(models.WordLevel(unk_token="<unk>"))
    reference.pre_tokenizer = pre_tokenizers.Whitespace()
    reference.train_from_iterator(TRAINING_TEXT, trainers.WordLevelTrainer(special_tokens=["<unk>"]))
    path = tmp_path_factory.mktemp("wordlevel") / "tokenizer.json"
    reference.save(str(path))
    return Pair(Tokenizer.from_file(path), reference)


def test_trained_wordlevel(trained_wordlevel):
    ours, reference = trained_wordlevel
    for line in CORPUS + TRAINING_TEXT[:6]:
        assert_same(ours, reference, line)


@settings(max_examples=100, deadline=None)
@given(line=text)
def test_trained_wordlevel_on_generated_text(trained_wordlevel, line):
    assert_same(*trained_wordlevel, line)


def test_wordpiece_edges():
    vocab = {"[UNK]": 0, "a": 1, "##a": 2, "aa": 3, "b": 4, "##b": 5}
    model = WordPiece(vocab, max_input_chars_per_word=5)
    reference = models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=5)
    for word in ["a", "aaa", "aab", "ba", "aaaaa", "aaaaaa", "c", "ac", "##a", "é"]:
        assert model.tokenize(word) == [t.id for t in reference.tokenize(word)], word
    assert model.tokenize("aaaaaa") == [0]


def test_wordpiece_long_word_stays_linear():
    """A 50,000-character word under a large max_input_chars_per_word: greedy matching, not quadratic."""
    model = WordPiece({"[UNK]": 0, "ab": 1, "##ab": 2, "##a": 3}, max_input_chars_per_word=10**6)
    assert model.tokenize("ab" * 25_000) == [1] + [2] * 24_999


def test_missing_unknown_tokens_raise_value_error():
    with pytest.raises(ValueError, match="UNK"):
        WordPiece({"a": 0}).tokenize("b")
    with pytest.raises(ValueError, match="unk"):
        WordLevel({"a": 0}).tokenize("b")
    assert WordLevel({"a": 0, "<unk>": 1}).tokenize("b") == [1]
    with pytest.raises(ValueError):
        WordPiece.from_spec({"type": "WordPiece", "vocab": ["a"]})


_PRE_TOKENIZER_CHARS = st.characters(blacklist_categories=("Cs",)) | st.sampled_from(
    list(" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2028\u3000\ufeff.,;!?¿¡«»、。・‧—–‐-_~`'\"()[]{}@#%&*\\/"
         "東京abcé\u0301١"))


@settings(max_examples=300, deadline=None)
@given(line=st.text(_PRE_TOKENIZER_CHARS, max_size=80))
def test_bert_pre_tokenizer_matches_tokenizers(line):
    """One pass (re for ASCII, str.translate otherwise) gives tokenizers' words: whitespace by
    char::is_whitespace removed (U+001C..U+001F are not whitespace there), each punctuation character alone."""
    from tokworker.tokenizer import pre_tokenizers as ours_pre
    ours = ours_pre.from_spec({"type": "BertPreTokenizer"})
    expected = [word for word, _ in pre_tokenizers.BertPreTokenizer().pre_tokenize_str(line)]
    assert ours.split([line]) == expected
    assert ours.split([line, line]) == expected * 2


class _CountingDict(dict):
    lookups = 0

    def get(self, key, default=None):
        _CountingDict.lookups += 1
        return super().get(key, default)


def test_wordpiece_looks_up_each_position_as_far_as_its_match_goes(bert_model):
    """The longest piece at a position is found walking forward through pieces and their prefixes: the
    lookups are the characters matched plus one per piece, not one per piece length the vocabulary has."""
    model = WordPiece(bert_model.vocab)
    model._start_nodes = _CountingDict(model._start_nodes)
    model._continue_nodes = _CountingDict(model._continue_nodes)
    for word in ["unbelievable", "tokenization", "абвгд", "東京", "x"]:
        _CountingDict.lookups = 0
        ids = model.tokenize(word)
        assert ids == [t.id for t in models.WordPiece(bert_model.vocab, unk_token="[UNK]").tokenize(word)]
        assert _CountingDict.lookups > 0
        if ids != [model.vocab["[UNK]"]]:
            assert _CountingDict.lookups <= len(word) + len(ids), word


# Pieces past the trie's depth (_TRIE_DEPTH characters), found by comparing them whole: one piece of
# 300,000 characters used to keep its every prefix as a key (45 GB), now its first 64.
DEEP = "ab" * 32
LONG_VOCAB = {"[UNK]": 0, "a": 1, "b": 2, "##a": 3, "##b": 4, DEEP: 5, DEEP + "a": 6, DEEP + "ab" * 10: 7,
              "##" + DEEP + "b" * 7: 8, "##" + "b" * 100: 9, "b" * 99: 10, "a" * 300_000: 11}


@settings(max_examples=300, deadline=None)
@given(word=st.lists(st.sampled_from(["a", "b", "ab", "b" * 50, DEEP, "c"]), min_size=1, max_size=12).map("".join))
@example(word=DEEP + "ab" * 10 + "a")                  # [7, 3]
@example(word="b" * 99 + DEEP + "b" * 7)                # [10, 8]
@example(word="a" * 300_001)                            # [11, 3]
def test_pieces_longer_than_the_trie_as_tokenizers(word):
    assert _TRIE_DEPTH == len(DEEP)
    model = WordPiece(LONG_VOCAB, max_input_chars_per_word=10**6)
    reference = models.WordPiece(LONG_VOCAB, unk_token="[UNK]", max_input_chars_per_word=10**6)
    assert model.tokenize(word) == [t.id for t in reference.tokenize(word)]
    assert sum(map(len, model._start_nodes)) < 2 * 300_000       # not every prefix of the huge piece
