"""Long BPE words: exact ids against `tokenizers`, and the heap merge equal to the list merge.

Speed is measured side by side in bench/encode.py; here only that these inputs finish and are exact.
Covers tokworker.tokenizer.models.bpe_chars.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

tokenizers = pytest.importorskip("tokenizers")

from tests import tokenizer_refs as shared  # noqa: E402
from tests.realdata import vocabulary  # noqa: E402
from tokworker.tokenizer import Tokenizer  # noqa: E402
from tokworker.tokenizer.models import bpe as bpe_module  # noqa: E402


@pytest.fixture(scope="module")
def qwen():
    return shared.Pair("qwen3_dir")


def _long_inputs():
    rng = random.Random(11)
    return {
        "50k letters": "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(50_000)),
        "20k spaces": " " * 20_000,
        "CJK run": "日" * 10_000,
        "minified code": "".join(rng.choice(["a=1;", "b.c()", "{x:[1,2]}", "if(a){b}", "function(){}"])
                                 for _ in range(5_000)),
        "no split 100k": "".join(rng.choice("abcdefghij.,;:-_") for _ in range(100_000)),
        "emoji run": "🧑‍🚀" * 2_000,
        "tabs and newlines": "\t" * 3_000 + "\n" * 3_000,
    }


@pytest.mark.parametrize("name", list(_long_inputs()))
def test_long_words_match_tokenizers(qwen, name):
    ours, ref = qwen
    text = _long_inputs()[name]
    assert ours.encode(text) == ref.encode(text, add_special_tokens=False).ids


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(list(b"abcdeth ing\xe6\x97\xa5")), min_size=2, max_size=400))
def test_heap_merge_equals_list_merge(qwen, data):
    """Both merge paths pick the lowest rank, leftmost on ties; the heap path must agree exactly."""
    model = qwen[0].model
    symbols = [model.byte_ids[b] for b in data]
    assert model._merge_long(list(symbols)) == _list_merge(model, list(symbols))


@pytest.fixture(scope="module")
def llama3_model():
    from tokworker.tokenizer import loaders
    return Tokenizer.from_tiktoken(vocabulary("llama3_tiktoken"), loaders.LLAMA3_PATTERN,
                                   loaders.llama3_special_tokens()).model


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(list("абвгдеж ин".encode()) + list(b"the ing")), min_size=2, max_size=300))
def test_heap_merge_equals_list_merge_on_tiktoken_table(llama3_model, data):
    """tiktoken tables can create a pair ranked below the one just merged: the long path must still agree."""
    symbols = [llama3_model.byte_ids[b] for b in data]
    assert llama3_model._merge_long(list(symbols)) == _list_merge(llama3_model, list(symbols))


def _list_merge(model, symbols):
    """The plain definition: scan for the lowest-ranked adjacent pair, merge it, repeat."""
    while True:
        best = None
        for i in range(len(symbols) - 1):
            value = model.pairs.get(symbols[i] << model.shift | symbols[i + 1])
            if value is not None and (best is None or value < best[0]):
                best = (value, i)
        if best is None:
            return symbols
        value, i = best
        symbols[i:i + 2] = [value & model.id_mask]


def test_short_path_threshold_is_exercised(qwen):
    ours, ref = qwen
    for length in (bpe_module._LONG_WORD - 1, bpe_module._LONG_WORD, bpe_module._LONG_WORD + 1):
        word = ("unbelievable" * 10)[:length]
        assert ours.encode(word) == ref.encode(word, add_special_tokens=False).ids


def test_sentencepiece_style_document_is_one_word():
    """With no pre-tokenizer every document is a single BPE word (Mistral-style)."""
    from tokenizers import decoders as D, models as M, normalizers as N, trainers as T
    corpus = ["the cat sat on the mat", "a quick brown fox", "日本語の文章", "numbers 12345"] * 20
    ref = tokenizers.Tokenizer(M.BPE(byte_fallback=True, unk_token="<unk>"))
    ref.normalizer = N.Sequence([N.Prepend("▁"), N.Replace(" ", "▁")])
    ref.decoder = D.Sequence([D.Replace("▁", " "), D.ByteFallback(), D.Fuse(), D.Strip(" ", 1, 0)])
    ref.train_from_iterator(corpus, T.BpeTrainer(vocab_size=300, show_progress=False, special_tokens=[
        "<unk>"] + [f"<0x{b:02X}>" for b in range(256)]))
    import json
    ours = Tokenizer.from_spec(json.loads(ref.to_str()))
    rng = random.Random(3)
    text = " ".join(rng.choice(corpus) for _ in range(3_000))
    assert ours.encode(text) == ref.encode(text, add_special_tokens=False).ids
    assert ours.decode(ours.encode(text)) == ref.decode(ref.encode(text).ids)


def test_mistral_document_cut_before_metaspace_runs_is_exact():
    """Mistral v3 has no pre-tokenizer; tokworker cuts documents before ▁ runs (no token has ▁ inside), which
    must give tokenizers' ids exactly, on prose, code, whitespace runs and a long word."""
    convert = pytest.importorskip("bench.sentencepiece_convert").convert
    import json
    spec = convert(vocabulary("mistral_v3_sp"))
    ours, ref = Tokenizer.from_spec(spec), tokenizers.Tokenizer.from_str(json.dumps(spec))
    assert ours._pieces is not None
    from tests.tokenizer_corpus import CORPUS
    rng = random.Random(5)
    texts = CORPUS + ["\n".join(CORPUS), " ".join(rng.choice(CORPUS) for _ in range(200)), _long_inputs()["50k letters"]]
    for text in texts:
        ids = ours.encode(text, add_special_tokens=True)
        assert ids == shared.trained_ids(ours, ref, text, True), text[:60]    # the space after [INST]: the prefix
        assert ours.decode(ids) == ref.decode(ids, skip_special_tokens=False)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("的一是不了人我在有他这中大来们国个，。 éяж𝔐🚀\u0301") + ["a", " "]),
               min_size=1, max_size=40))
def test_whole_character_start_equals_byte_start(qwen, llama3_model, word):
    """Starting a word from whole-character tokens (where bpe_chars proves it safe) merges to exactly what
    starting from bytes does, on a byte-level vocabulary and on a tiktoken one."""
    for model in (qwen[0].model, llama3_model):
        if model.ignore_merges and model.vocab.get("".join(
                model._latin1_to_symbols[b] for b in word.encode())) is not None:
            continue
        expected = model.merge([model.byte_ids[b] for b in word.encode()])
        assert model.tokenize_byte_word(word) == expected


_SCRIPTS = "абвгдежзийклмнопрстуфхцчшщыэюя" + "αβγδεζηθικλμνξοπρστυφχψω" + "ابتثجحخدذرزسشصضطظعغفقكلمنهوي" + \
    "अआइईउऊएऐओऔकखगघचछजझटठडढणतथदधनपफबभमयरलवशसह" + "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后"


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(list(" (\n'a1")), st.text(alphabet=st.sampled_from(list(_SCRIPTS)), min_size=1, max_size=9))
def test_word_initial_units_equal_byte_start(qwen, llama3_model, first, rest):
    """An ASCII character and the non-ASCII one after it start as one token where bpe_chars proves it safe
    (" п" in " привет"): the merges must end exactly where starting from bytes ends."""
    word = first + rest
    for model in (qwen[0].model, llama3_model):
        if model.ignore_merges and model.vocab.get("".join(
                model._latin1_to_symbols[b] for b in word.encode())) is not None:
            continue
        assert model.tokenize_byte_word(word) == model.merge([model.byte_ids[b] for b in word.encode()])


def test_word_initial_units_are_used(qwen):
    """The unit saves merges on real words: " привет" starts from fewer symbols than its characters alone."""
    chars = qwen[0].model._chars
    words = [" " + "".join(random.Random(i).choice(_SCRIPTS[:30]) for _ in range(6)) for i in range(200)]
    started_whole = sum(chars.symbols(word)[0] == chars.table[word[:2]][1] for word in words)
    assert started_whole > 100
