"""The precomputed merge-table cache: a second load reads it, and a bad or foreign file is never trusted."""

from __future__ import annotations

import pytest

from tests.realdata import vocabulary
from tokworker.tokenizer import Tokenizer, loaders, precomputed


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKWORKER_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def small_ranks(tmp_path_factory):
    """The first 20,000 ranks of cl100k: a real, quick-to-load tiktoken file."""
    source = vocabulary("cl100k_tiktoken").read_bytes().splitlines()[:20_000]
    path = tmp_path_factory.mktemp("ranks") / "small.tiktoken"
    path.write_bytes(b"\n".join(source) + b"\n")
    return path


TEXT = "Cached merges must give the same ids: привет, 日本語, 🚀 and   spaces."


def test_second_load_reads_the_cache_and_agrees(cache):
    path = vocabulary("qwen3_dir") / "tokenizer.json"
    first = Tokenizer.from_file(path)
    files = list(cache.glob("*.pairs"))
    assert len(files) == 1
    second = Tokenizer.from_file(path)
    assert second.model.pairs == first.model.pairs
    assert second.encode(TEXT) == first.encode(TEXT)


def test_tiktoken_tables_are_cached_too(cache, small_ranks):
    args = (small_ranks, loaders.CL100K_PATTERN, {})
    first = Tokenizer.from_tiktoken(*args)
    first.encode("日本語")                         # builds the per-character tables too
    second = Tokenizer.from_tiktoken(*args)
    assert len(list(cache.glob("*.pairs"))) == 1 and len(list(cache.glob("*.tables"))) == 1
    assert second.model.pairs == first.model.pairs and second.encode(TEXT) == first.encode(TEXT)
    assert second.encode("日本語") == first.encode("日本語")


def test_corrupt_or_foreign_cache_files_are_rebuilt(cache, small_ranks):
    args = (small_ranks, loaders.CL100K_PATTERN, {})
    expected = Tokenizer.from_tiktoken(*args).model.pairs
    (table_file,) = cache.glob("*.pairs")
    # the character tables beside it: unused by this ASCII text, but must never break a load
    for other_file in cache.glob("*.tables"):
        other_file.write_bytes(b"garbage")
    table_file.write_bytes(b"garbage")
    assert Tokenizer.from_tiktoken(*args).model.pairs == expected
    # a well-formed table of another vocabulary under this name: the spot check rejects it
    other = {1 << 20 | 2: 5 << 20 | 7, 3 << 20 | 4: 6 << 20 | 9}
    precomputed._write(table_file.name, other)
    assert Tokenizer.from_tiktoken(*args).model.pairs == expected


def test_cache_can_be_turned_off(tmp_path, monkeypatch, small_ranks):
    monkeypatch.setenv("TOKWORKER_CACHE_DIR", "off")
    assert precomputed.cache_dir() is None
    tok = Tokenizer.from_tiktoken(small_ranks, loaders.CL100K_PATTERN, {})
    assert tok.decode(tok.encode(TEXT)) == TEXT


def test_unwritable_cache_directory_is_ignored(tmp_path, monkeypatch, small_ranks):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TOKWORKER_CACHE_DIR", str(blocker / "sub"))
    tok = Tokenizer.from_tiktoken(small_ranks, loaders.CL100K_PATTERN, {})
    assert tok.decode(tok.encode(TEXT)) == TEXT


def test_merges_stay_encoded_until_the_table_is_built(tmp_path, cache):
    """from_file decodes everything but the merges, which only a table build (no cache yet) decodes."""
    import json

    import msgspec

    from tokworker.tokenizer.spec_file import read_spec
    path = vocabulary("qwen3_dir") / "tokenizer.json"
    data = path.read_bytes()
    whole = json.loads(data)
    spec = read_spec(data)
    assert isinstance(spec["model"]["merges"], msgspec.Raw)
    assert msgspec.json.decode(spec["model"].pop("merges")) == whole["model"].pop("merges")
    assert spec == {key: value for key, value in whole.items() if key in spec} and set(spec) >= {"model", "decoder"}

    bad = dict(json.loads(data), model=dict(whole["model"], merges=[["a", "b", "c"]]))
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"not a \(left, right\) pair"):
        Tokenizer.from_file(tmp_path / "bad.json")


def test_loads_leave_the_garbage_collector_as_they_found_it(tmp_path, small_ranks):
    import gc
    assert gc.isenabled()
    Tokenizer.from_tiktoken(small_ranks, loaders.CL100K_PATTERN, {})
    assert gc.isenabled()
    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "Nonesuch"}}')
    with pytest.raises(ValueError):
        Tokenizer.from_file(tmp_path / "tokenizer.json")
    assert gc.isenabled()
    gc.disable()
    try:
        Tokenizer.from_tiktoken(small_ranks, loaders.CL100K_PATTERN, {})
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_swapped_split_pattern_file_is_not_used(cache):
    """Each file carries its own name and a checksum: another vocabulary's translated pattern put in the
    place of this one's (it used to change the ids, 39 instead of 15) is rebuilt, not used."""
    from tokworker.tokenizer import unicode
    unicode.translate_pattern.cache_clear()
    llama = unicode.translate_pattern(loaders.LLAMA3_PATTERN, "tiktoken")
    qwen = unicode.translate_pattern(loaders.QWEN_PATTERN, "tiktoken")
    files = {path.read_bytes(): path for path in cache.glob("*.text")}
    assert len(files) == 2
    llama_file = next(path for data, path in files.items() if data.endswith(llama.encode()))
    qwen_file = next(path for data, path in files.items() if data.endswith(qwen.encode()))
    llama_file.write_bytes(qwen_file.read_bytes())
    unicode.translate_pattern.cache_clear()
    assert unicode.translate_pattern(loaders.LLAMA3_PATTERN, "tiktoken") == llama
    unicode.translate_pattern.cache_clear()


def _loads_within(seconds, load):
    import threading
    result = []
    thread = threading.Thread(target=lambda: result.append(load()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"the load blocked for more than {seconds} s"
    return result[0]


@pytest.mark.parametrize("kind", ["fifo", "symlink to /dev/zero", "symlink to a file of ours"])
def test_special_files_in_the_cache_are_refused(cache, small_ranks, kind):
    """A FIFO in place of a cache file blocked a load for more than 60 s; a symlink to /dev/zero raised
    MemoryError. Only regular files of ours are read, opened without following symlinks."""
    import os
    args = (small_ranks, loaders.CL100K_PATTERN, {})
    expected = Tokenizer.from_tiktoken(*args).model.pairs
    (table_file,) = cache.glob("*.pairs")
    stolen = cache.parent / "stolen.pairs"
    table_file.rename(stolen)
    if kind == "fifo":
        os.mkfifo(table_file)
    else:
        table_file.symlink_to("/dev/zero" if "zero" in kind else stolen)
    assert _loads_within(20, lambda: Tokenizer.from_tiktoken(*args).model.pairs) == expected


def test_the_cache_directory_is_ours_and_private(tmp_path, monkeypatch, small_ranks, caplog):
    """Created with mode 0700 (a looser one of ours is tightened); a symlink, or another user's directory,
    is not used at all (logged once), and loads go on without a cache."""
    import os
    args = (small_ranks, loaders.CL100K_PATTERN, {})
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    monkeypatch.setenv("TOKWORKER_CACHE_DIR", str(loose))
    expected = Tokenizer.from_tiktoken(*args).model.pairs
    assert oct(loose.stat().st_mode & 0o777) == oct(0o700) and list(loose.glob("*.pairs"))
    fresh = tmp_path / "a" / "b"
    monkeypatch.setenv("TOKWORKER_CACHE_DIR", str(fresh))
    Tokenizer.from_tiktoken(*args)
    assert oct(fresh.stat().st_mode & 0o777) == oct(0o700)

    link = tmp_path / "link"
    link.symlink_to(loose)
    monkeypatch.setenv("TOKWORKER_CACHE_DIR", str(link))
    with caplog.at_level("WARNING", logger="tokworker.cache"):
        assert Tokenizer.from_tiktoken(*args).model.pairs == expected
        assert Tokenizer.from_tiktoken(*args).model.pairs == expected
    assert [record.message for record in caplog.records].count(
        f"not using the cache directory {link}: it is a symlink (set TOKWORKER_CACHE_DIR to a directory of "
        "yours, or to off)") == 1
    if os.geteuid() == 0:                      # making a directory another user's needs root
        foreign = tmp_path / "foreign"
        foreign.mkdir(mode=0o700)
        os.chown(foreign, 65534, 65534)
        monkeypatch.setenv("TOKWORKER_CACHE_DIR", str(foreign))
        with caplog.at_level("WARNING", logger="tokworker.cache"):
            assert Tokenizer.from_tiktoken(*args).model.pairs == expected
        assert not list(foreign.iterdir())
        assert any("belongs to user 65534" in record.message for record in caplog.records)
