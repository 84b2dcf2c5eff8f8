"""What makes big vocabularies load fast gives the same ids: Unigram's disk cache (pieces, scores and
prefixes: a warm load decodes none of the file's vocab), the translated split-pattern cache, the cache
directory's byte bound, and the prefix-trie regex of added tokens."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from tests.tokenizer_corpus import CORPUS
from tests.tokenizer_refs import trained
from tokworker.tokenizer import Tokenizer, precomputed, unicode
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
    assert warm.model._scores == cold.model._scores
    assert [warm.encode(text) for text in CORPUS] == expected
    whole = stored.read_bytes()
    flipped = bytearray(whole)
    flipped[len(whole) // 2] ^= 0x20              # same size, one piece's letter changed: the checksum says so
    for damage in (b"garbage", whole[:-8], b"", bytes(flipped)):
        stored.write_bytes(damage)
        assert [Tokenizer.from_file(path).encode(text) for text in CORPUS] == expected
    monkeypatch.setenv("TOKWORKER_CACHE_DIR", "off")
    assert [Tokenizer.from_file(path).encode(text) for text in CORPUS] == expected


def test_unigram_cache_of_another_file_is_not_used(unigram_file, tmp_path, monkeypatch):
    """Two files, one digest's table swapped in for the other's: the name inside it differs, so it is rebuilt."""
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


def test_a_changed_file_gets_its_own_tables(unigram_file, tmp_path, monkeypatch):
    """One piece renamed and one score changed: the file's digest changes, so the old tables are not reused."""
    path, _ = unigram_file
    monkeypatch.setenv("TOKWORKER_CACHE_DIR", str(tmp_path / "cache"))
    spec = json.loads(path.read_text(encoding="utf-8"))
    copy = tmp_path / "tokenizer.json"
    copy.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    Tokenizer.from_file(copy)
    vocab = spec["model"]["vocab"]
    index = max(range(len(vocab)), key=lambda i: len(vocab[i][0]))
    vocab[index][0] = "\u2581zzqx"
    vocab[index + 1][1] = vocab[index + 1][1] - 3.5
    copy.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    changed = tokenizers.Tokenizer.from_file(str(copy))
    ours = Tokenizer.from_file(copy)
    assert ours.token_to_id("\u2581zzqx") == index
    lines = CORPUS + ["zzqx zzqx", vocab[index + 1][0].replace("\u2581", " ")]
    assert [ours.encode(text) for text in lines] == [changed.encode(text).ids for text in lines]
    assert len(_cache_files(tmp_path / "cache", ".arrays")) == 2


@pytest.mark.parametrize("strings", [[], [""], ["", "a", ""], ["a\0b", "\ufdd0", "c"], ["日本", "\U0001f680", "x" * 9]])
def test_string_arrays_round_trip(strings, tmp_path, monkeypatch):
    """Joined by the first separator none of them holds (NUL, then Unicode's noncharacters)."""
    monkeypatch.setenv("TOKWORKER_CACHE_DIR", str(tmp_path))
    built = precomputed.arrays("strings", lambda: [[1.5, -2.0], strings], "ds")
    assert precomputed.arrays("strings", lambda: pytest.fail("not read back"), "ds") == built
    assert built[1] == strings


def test_strings_holding_every_separator_are_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKWORKER_CACHE_DIR", str(tmp_path))
    strings = list(precomputed._SEPARATORS)
    assert precomputed.arrays("every", lambda: [strings], "s") == [strings]
    assert not list(tmp_path.glob("*.arrays"))


def test_the_cache_directory_stays_under_its_byte_limit(tmp_path, monkeypatch):
    """Past the limit the least recently used files go; a file read again counts as recently used."""
    monkeypatch.setenv("TOKWORKER_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(precomputed, "_DIRECTORY_LIMIT", 100_000)
    (tmp_path / "someone-elses.data").write_bytes(b"x" * 200_000)          # not ours: never deleted
    for number in range(8):
        precomputed.arrays(f"table{number}", lambda: [range(3000)], "q")   # 24 kB each
        if number >= 1:
            precomputed.arrays("table0", lambda: pytest.fail("table0 was pruned"), "q")
    ours = list(tmp_path.glob("*.arrays"))
    assert sum(path.stat().st_size for path in ours) <= 100_000
    assert tmp_path / "table0.arrays" in ours and tmp_path / "table7.arrays" in ours
    assert (tmp_path / "someone-elses.data").exists()


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


@pytest.mark.parametrize("behavior", ["Isolated", "Removed", "Contiguous", "MergedWithPrevious", "MergedWithNext"])
@pytest.mark.parametrize("invert", [False, True])
@pytest.mark.parametrize("pattern", [r"\p{L}+|\s+(?!\S)", r"(\d)(\d)?", "ab"])
def test_split_from_a_source_equals_split_from_its_compiled_pattern(behavior, invert, pattern):
    """A Split given the source compiles only the form it runs (the plain pattern lazily): same pieces."""
    import regex
    from tokworker.tokenizer.pre_tokenizers import Split
    texts = CORPUS + ["abab 12 345 ab", "", "   ", "日本語 ab12"]
    from_source = Split(unicode.translate_pattern(pattern), behavior, invert)
    compiled = Split(regex.compile(unicode.translate_pattern(pattern)), behavior, invert)
    assert [from_source.split([text]) for text in texts] == [compiled.split([text]) for text in texts]
