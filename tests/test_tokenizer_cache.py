"""The precomputed merge-table cache: a second load reads it, and a bad or foreign file is never trusted."""

from __future__ import annotations

import pytest

from tests.realdata import vocabulary
from tokworker.tokenizer import Tokenizer, loaders, precomputed


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKWORKER_CACHE_DIR", str(tmp_path))
    return tmp_path


TEXT = "Cached merges must give the same ids: привет, 日本語, 🚀 and   spaces."


def test_second_load_reads_the_cache_and_agrees(cache):
    path = vocabulary("qwen3_dir") / "tokenizer.json"
    first = Tokenizer.from_file(path)
    files = list(cache.glob("*.pairs"))
    assert len(files) == 1
    second = Tokenizer.from_file(path)
    assert second.model.pairs == first.model.pairs
    assert second.encode(TEXT) == first.encode(TEXT)


def test_tiktoken_tables_are_cached_too(cache):
    args = (vocabulary("cl100k_tiktoken"), loaders.CL100K_PATTERN, loaders.CL100K_SPECIAL_TOKENS)
    first = Tokenizer.from_tiktoken(*args)
    second = Tokenizer.from_tiktoken(*args)
    assert len(list(cache.glob("*.pairs"))) == 1
    assert second.model.pairs == first.model.pairs and second.encode(TEXT) == first.encode(TEXT)


def test_corrupt_or_foreign_cache_files_are_rebuilt(cache):
    args = (vocabulary("cl100k_tiktoken"), loaders.CL100K_PATTERN, loaders.CL100K_SPECIAL_TOKENS)
    expected = Tokenizer.from_tiktoken(*args).model.pairs
    (table_file,) = cache.glob("*.pairs")
    table_file.write_bytes(b"garbage")
    assert Tokenizer.from_tiktoken(*args).model.pairs == expected
    # a well-formed table of another vocabulary under this name: the spot check rejects it
    other = {1 << 20 | 2: 5 << 20 | 7, 3 << 20 | 4: 6 << 20 | 9}
    precomputed._write(table_file, other)
    assert Tokenizer.from_tiktoken(*args).model.pairs == expected


def test_cache_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKWORKER_CACHE_DIR", "off")
    Tokenizer.from_tiktoken(vocabulary("cl100k_tiktoken"), loaders.CL100K_PATTERN, loaders.CL100K_SPECIAL_TOKENS)
    assert precomputed.cache_dir() is None


def test_unwritable_cache_directory_is_ignored(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TOKWORKER_CACHE_DIR", str(blocker / "sub"))
    tok = Tokenizer.from_tiktoken(vocabulary("cl100k_tiktoken"), loaders.CL100K_PATTERN, loaders.CL100K_SPECIAL_TOKENS)
    assert tok.decode(tok.encode(TEXT)) == TEXT
