"""What makes big vocabularies load fast gives the same ids: Unigram's disk cache (scores and prefix table),
the translated split-pattern cache, and the prefix-trie regex of added tokens."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from tests.tokenizer_corpus import CORPUS
from tests.tokenizer_refs import trained
from tokworker.tokenizer import Tokenizer, unicode
from tokworker.tokenizer.added_tokens import _Matcher

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import models as M, pre_tokenizers as P, trainers as T  # noqa: E402


@pytest.fixture(scope="module")
def unigram_file(tmp_path_factory):
    reference = trained(M.Unigram(), T.UnigramTrainer(vocab_size=400, show_progress=False, unk_token="<unk>",
                                                      special_tokens=["<unk>"]),
                        CORPUS * 4, None, P.Metaspace())
    path = tmp_path_factory.mktemp("unigram") / "tokenizer.json"
    path.write_text(reference.to_str(), encoding="utf-8")
    return path, reference


def _cache_files(directory, suffix):
    return sorted(directory.glob(f"*{suffix}")) if directory.exists() else []


def test_unigram_cold_warm_and_damaged_cache_give_tokenizers_ids(unigram_file, tmp_path, monkeypatch):
    path, reference = unigram_file
    cache = tmp_path / "cache"
    monkeypatch.setenv("TOKWORKER_CACHE_DIR", str(cache))
    expected = [reference.encode(text).ids for text in CORPUS]
    cold = Tokenizer.from_file(path)
    assert [cold.encode(text) for text in CORPUS] == expected
    stored, = _cache_files(cache, ".arrays")
    warm = Tokenizer.from_file(path)
    assert warm.model._nodes == cold.model._nodes and warm.model.vocab == cold.model.vocab
    assert [warm.encode(text) for text in CORPUS] == expected
    for damage in (b"garbage", stored.read_bytes()[:-8], b""):
        stored.write_bytes(damage)
        assert [Tokenizer.from_file(path).encode(text) for text in CORPUS] == expected
    monkeypatch.setenv("TOKWORKER_CACHE_DIR", "off")
    assert [Tokenizer.from_file(path).encode(text) for text in CORPUS] == expected


def test_unigram_cache_of_another_file_is_not_used(unigram_file, tmp_path, monkeypatch):
    """Two files, one digest's table swapped in for the other's: the piece count differs, so it is rebuilt."""
    path, reference = unigram_file
    cache = tmp_path / "cache"
    monkeypatch.setenv("TOKWORKER_CACHE_DIR", str(cache))
    spec = json.loads(path.read_text(encoding="utf-8"))
    spec["model"]["vocab"] = spec["model"]["vocab"][:300]
    other = tmp_path / "other.json"
    other.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    Tokenizer.from_file(path)
    first, = _cache_files(cache, ".arrays")
    Tokenizer.from_file(other)
    second, = [f for f in _cache_files(cache, ".arrays") if f != first]
    second.write_bytes(first.read_bytes())
    small = tokenizers.Tokenizer.from_file(str(other))
    assert [Tokenizer.from_file(other).encode(text) for text in CORPUS] == [small.encode(t).ids for t in CORPUS]


def test_translated_pattern_cache(tmp_path, monkeypatch):
    from tokworker.tokenizer.loaders import LLAMA3_PATTERN
    cache = tmp_path / "cache"
    monkeypatch.setenv("TOKWORKER_CACHE_DIR", str(cache))
    unicode.translate_pattern.cache_clear()
    translated = unicode.translate_pattern(LLAMA3_PATTERN, "tiktoken")
    stored, = _cache_files(cache, ".text")
    unicode.translate_pattern.cache_clear()
    assert unicode.translate_pattern(LLAMA3_PATTERN, "tiktoken") == translated
    stored.write_bytes(b"\xff\xfe not ours")
    unicode.translate_pattern.cache_clear()
    assert unicode.translate_pattern(LLAMA3_PATTERN, "tiktoken") == translated
    unicode.translate_pattern.cache_clear()
    unicode.translate_pattern(LLAMA3_PATTERN, "tokenizers")                   # another flavor, another file
    assert len(_cache_files(cache, ".text")) == 2


def _leftmost_longest(contents, text):
    """The reference semantics: at the leftmost position where any content starts, the longest one."""
    found, position = [], 0
    while position < len(text):
        here = [c for c in contents if text.startswith(c, position)]
        if here:
            best = max(here, key=len)
            found.append((position, best))
            position += len(best)
        else:
            position += 1
    return found


@settings(max_examples=200, deadline=None)
@given(contents=st.lists(st.text(st.sampled_from("<|ab_1>"), min_size=1, max_size=6), min_size=1, max_size=12,
                         unique=True),
       text=st.text(st.sampled_from("<|ab_1> x"), max_size=40))
def test_the_trie_regex_matches_leftmost_longest(contents, text):
    matcher = _Matcher({content: i for i, content in enumerate(contents)})
    got = [(m.start(), m.group()) for m in matcher.pattern.finditer(text)]
    assert got == _leftmost_longest(contents, text)
    for end in range(len(text) + 1):          # bounded matches (literal spans) shorten to the longest that fits
        match = matcher.pattern.match(text, 0, end)
        fitting = [c for c in contents if text.startswith(c) and len(c) <= end]
        assert (match.group() if match else None) == (max(fitting, key=len) if fitting else None)
