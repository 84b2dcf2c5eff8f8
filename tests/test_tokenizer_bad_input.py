"""Bad and extreme input: the reference's ids, or a clear ValueError where the reference cannot take it."""

from __future__ import annotations

import pytest

tokenizers = pytest.importorskip("tokenizers")

from tests import tokenizer_refs as shared  # noqa: E402
from tests.realdata import vocabulary  # noqa: E402
from tokworker.tokenizer import Tokenizer, loaders  # noqa: E402


@pytest.fixture(scope="module")
def qwen():
    return shared.ours("qwen3_dir"), shared.reference("qwen3_dir")


@pytest.mark.parametrize("text", ["a\ud800b", "\udfff", "ok " * 100 + "\udbff"])
def test_lone_surrogates_are_a_clear_value_error(qwen, text):
    ours, ref = qwen
    with pytest.raises(TypeError):                      # the reference cannot take them either
        ref.encode(text)
    with pytest.raises(ValueError, match="surrogate"):
        ours.encode(text)
    with pytest.raises(ValueError, match="surrogate"):
        ours.encode_with_literal_spans(text, [(0, 1)])


@pytest.mark.parametrize("text", [
    "\x00", "a\x00b\x00", "".join(map(chr, range(32))) + "\x7f\x80\x9f", "\u200b\u200c\u200d\u2060\ufeff",
    "\U000e0001\U000e0041", "\U0010ffff\U000f0000", "\ufffe\uffff", "\u0378\u0379 unassigned \U0001fbfa",
    "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f", "\u202e rtl override \u202c",
])
def test_control_unassigned_and_astral_match(qwen, text):
    ours, ref = qwen
    ids = ours.encode(text)
    assert ids == ref.encode(text, add_special_tokens=False).ids
    assert ours.decode(ids) == ref.decode(ids, skip_special_tokens=False) == text


def test_one_megabyte_matches_reference(qwen):
    ours, ref = qwen
    text = ("Lorem ipsum dolor sit amet, 12345 consectetur — 日本語 😀\n" * 20_000)[:1_000_000]
    assert ours.encode(text) == ref.encode(text, add_special_tokens=False).ids


def test_ten_megabytes_scale_exactly(qwen):
    """10 MB: every repetition of a newline-terminated block encodes like the block alone."""
    ours, _ = qwen
    block = "Tokenizers must never go quadratic: 3.14 ÷ 2 = 1.57 — 日本 🚀\n"
    count = 10_000_000 // len(block.encode())
    assert ours.encode(block * count) == ours.encode(block) * count


def test_half_megabyte_word_without_any_split(qwen):
    ours, _ = qwen
    word = "x" * 500_000
    ids = ours.encode(word)
    assert ours.decode(ids) == word


@pytest.mark.parametrize("bad", [-1, -(2**40), 151_669, 2**63, "5", 1.0, None, True])
def test_decode_bad_ids_raise_value_error_naming_the_id(qwen, bad):
    ours, _ = qwen
    with pytest.raises(ValueError, match=repr(bad) if not isinstance(bad, int) or isinstance(bad, bool) else str(bad)):
        ours.decode([0, bad])
    with pytest.raises(ValueError):
        ours.token_bytes(bad)


def test_non_text_input_is_a_type_error(qwen):
    ours, _ = qwen
    for bad in (None, b"bytes", 12, ["list"]):
        with pytest.raises(TypeError):
            ours.encode(bad)


@pytest.mark.parametrize("spans", [[(5, 2)], [(-1, 3)], [(0, 10**6)], [("a", "b")]])
def test_bad_literal_spans(qwen, spans):
    ours, _ = qwen
    with pytest.raises(ValueError, match="span"):
        ours.encode_with_literal_spans("hello <|im_end|>", spans)


def test_malformed_files_are_value_errors(tmp_path):
    bad_json = tmp_path / "tokenizer.json"
    bad_json.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        Tokenizer.from_file(bad_json)
    with pytest.raises(ValueError, match="no tokenizer.json"):
        Tokenizer.from_dir(tmp_path / "missing")
    bad_json.write_text('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "b"]]}}')
    with pytest.raises(ValueError, match="'b'"):
        Tokenizer.from_file(bad_json)
    merges = tmp_path / "merges.txt"
    merges.write_text("#version: 0.2\na b c\n")
    vocab = tmp_path / "vocab.json"
    vocab.write_text('{"a": 0, "b": 1}')
    with pytest.raises(ValueError, match="merges.txt:2"):
        Tokenizer.from_vocab_merges(vocab, merges)


def test_vocab_merges_equals_tokenizer_json():
    """Qwen3's vocab.json + merges.txt with its pattern and NFC give tokenizer.json's ids."""
    directory = vocabulary("qwen3_dir")
    from tokworker.tokenizer import normalizers
    from tests.tokenizer_corpus import CORPUS
    full = shared.ours("qwen3_dir")
    plain = Tokenizer.from_vocab_merges(directory / "vocab.json", directory / "merges.txt",
                                        pattern=loaders.QWEN_PATTERN, normalizer=normalizers.from_spec({"type": "NFC"}),
                                        added_tokens=[{"id": i, "content": c, "special": i in full.special_ids,
                                                       "normalized": False} for c, i in full.added_tokens.items()])
    for text in CORPUS:
        assert plain.encode(text) == full.encode(text), text
