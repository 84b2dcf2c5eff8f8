"""Every normalizer against `tokenizers`' own, built from the same tokenizer.json spec.

The reference is a tokenizers.Tokenizer whose only stage is the normalizer under test, so the spec's JSON
form (field names, defaults) is exercised too. Per-character normalizers are also swept over every code
point, which is where Unicode-version differences show.
Covers tokworker.tokenizer.unicode_data.normalization.
"""

from __future__ import annotations

import base64
import functools
import json

import pytest
import sentencepiece
from hypothesis import given, settings, strategies as st
from tokenizers import Tokenizer as RefTokenizer

from tokworker.tokenizer import normalizers
from tokworker.tokenizer.errors import UnsupportedComponent

from bench.sentencepiece_convert import load_proto

CORPUS = [
    "", " ", "  leading and trailing  ", "Hello, World!", "ÀÉÎÕÜ àéîõü Ǆǅǆ ﬁ ﬀ ẞ ß İ ı ΣΑΣ σας", "naïve café résumé",
    "東京都は日本の首都です。", "한국어 텍스트", "Ｆｕｌｌｗｉｄｔｈ ｶﾀｶﾅ ①②③ ㍿ ™ ½ x² Ⅻ", "עברית ومرحبا بالعالم",
    "emoji 👨\u200d👩\u200d👧 🇫🇷 👍🏽 ok", "tabs\tand\nnewlines\r\nand\x0bvertical\x0cfeed", "ctrl\x00\x01\x7f\x85\u200b\u200d\ufeff\ufffd",
    "combining e\u0301 a\u0308\u0301 \uff21\u0301 \u1100\u1161\u11a8 क्षि", "whitespace\u00a0\u2003\u3000\u2028\u2029end",
    "code: def f(x):\n    return x ** 2  # comment", "\U00020000\U0002b820\U0002b920\U0002ceaf\U0003134a", "\ue000 private \U000f0000",
    "▁already▁metaspace ▁", "``quotes'' and “curly” — dashes…",
]

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


def reference(spec: dict) -> RefTokenizer:
    return _reference(json.dumps(spec))


@functools.lru_cache(maxsize=None)
def _reference(spec_json: str) -> RefTokenizer:
    spec = json.loads(spec_json)
    return RefTokenizer.from_str(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": spec,
        "pre_tokenizer": None, "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": {"<unk>": 0}, "unk_token": "<unk>"},
    }))


def ours(spec: dict) -> normalizers.Normalizer:
    return _ours(json.dumps(spec))


@functools.lru_cache(maxsize=None)
def _ours(spec_json: str) -> normalizers.Normalizer:
    return normalizers.from_spec(json.loads(spec_json))


@pytest.fixture(scope="session")
def nmt_nfkc_charsmap(tmp_path_factory) -> str:
    """The base64 precompiled_charsmap of SentencePiece's nmt_nfkc rule (trained in a tmp dir)."""
    folder = tmp_path_factory.mktemp("spm_nfkc")
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(["hello world", "Ｆｕｌｌ ｗｉｄｔｈ", "café ﬁne ½"] * 200), encoding="utf-8")
    sentencepiece.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(folder / "m"), vocab_size=25,
                                             model_type="unigram", normalization_rule_name="nmt_nfkc",
                                             minloglevel=2)
    return base64.b64encode(load_proto(folder / "m.model").normalizer_spec.precompiled_charsmap).decode()


BERT_VARIANTS = [
    {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True, "strip_accents": None, "lowercase": True},
    {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True, "strip_accents": None, "lowercase": False},
    {"type": "BertNormalizer", "clean_text": False, "handle_chinese_chars": False, "strip_accents": True, "lowercase": False},
    {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": False, "strip_accents": False, "lowercase": True},
]

SPECS = [
    {"type": "NFC"}, {"type": "NFD"}, {"type": "NFKC"}, {"type": "NFKD"}, {"type": "Lowercase"},
    {"type": "Strip", "strip_left": True, "strip_right": True},
    {"type": "Strip", "strip_left": True, "strip_right": False},
    {"type": "Strip", "strip_left": False, "strip_right": True},
    {"type": "StripAccents"}, {"type": "Nmt"}, {"type": "ByteLevel"},
    {"type": "Prepend", "prepend": "▁"},
    {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
    {"type": "Replace", "pattern": {"String": "``"}, "content": "\""},
    {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "▁"},
    {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "},
    {"type": "Replace", "pattern": {"Regex": r"(\d)"}, "content": r"<\1>"},
    *BERT_VARIANTS,
    {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "StripAccents"}, {"type": "Lowercase"}]},
    {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                         {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: json.dumps(spec, ensure_ascii=False))
def test_matches_tokenizers_on_corpus(spec):
    ours, ref = normalizers.from_spec(spec), reference(spec).normalizer
    for line in CORPUS:
        assert ours.normalize(line) == ref.normalize_str(line), line


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec["type"])
@settings(max_examples=60, deadline=None)
@given(line=text)
def test_matches_tokenizers_on_generated_text(spec, line):
    assert ours(spec).normalize(line) == reference(spec).normalizer.normalize_str(line)


def test_precompiled_matches_tokenizers(nmt_nfkc_charsmap):
    spec = {"type": "Precompiled", "precompiled_charsmap": nmt_nfkc_charsmap}
    ours, ref = normalizers.from_spec(spec), reference(spec).normalizer
    # tokenizers replaces a short grapheme cluster by its SHORTEST matching prefix's replacement (so
    # "\uff21\u0301" loses its accent and "\r\n" becomes one space); long clusters go char by char.
    tricky = ["\uff21\u0301x", "\r\n", "e\u0301\u0302", "\uff21\u0301\u0301", "ｶﾞ", "ﬁ\u0301", "\u1100\u1161\u11a8",
              "\u1100\u1161", "a\u0308", "\U0001f1eb\U0001f1f7", "👨\u200d👩", "\x00\uff21"]
    for line in CORPUS + tricky:
        assert ours.normalize(line) == ref.normalize_str(line), line
    assert ours.normalize("\uff21\u0301x") == "Ax"


@settings(max_examples=300, deadline=None)
@given(line=st.text(st.sampled_from(
    list("aeAE \r\n\t\x00") + ["\u0301", "\u0308", "\u3099", "\uff21", "\uff76", "\uff9e", "\u1100", "\u1161", "\u11a8",
                                "\uac00", "\u200d", "\U0001f1eb", "\u0600", "\u0915", "\u094d", "ﬁ", "①", "\u2028"]),
    max_size=24))
def test_precompiled_on_cluster_heavy_text(nmt_nfkc_charsmap, line):
    spec = {"type": "Precompiled", "precompiled_charsmap": nmt_nfkc_charsmap}
    assert ours(spec).normalize(line) == reference(spec).normalizer.normalize_str(line)


def _differing_code_points(ours, ref, limit: int = 20) -> list[str]:
    """Code points (hex) where the two per-character normalizers disagree, found chunk by chunk."""
    points = [c for c in range(1, 0x110000) if not 0xD800 <= c < 0xE000]
    found = []
    for i in range(0, len(points), 8192):
        chunk = "a".join(map(chr, points[i:i + 8192]))
        if ours.normalize(chunk) != ref.normalize_str(chunk):
            found += [hex(c) for c in points[i:i + 8192] if ours.normalize(chr(c)) != ref.normalize_str(chr(c))]
            if len(found) >= limit:
                break
    return found[:limit]


@pytest.mark.parametrize("spec", [{"type": "Lowercase"}, {"type": "StripAccents"}, {"type": "NFC"}, {"type": "NFD"},
                                  {"type": "NFKC"}, {"type": "NFKD"}, {"type": "Nmt"},
                                  {"type": "Strip", "strip_left": True, "strip_right": True},
                                  BERT_VARIANTS[0], BERT_VARIANTS[2]], ids=lambda spec: json.dumps(spec))
def test_every_code_point_alone(spec):
    assert _differing_code_points(normalizers.from_spec(spec), reference(spec).normalizer) == []


def test_lowercase_has_no_final_sigma_rule():
    assert normalizers.from_spec({"type": "Lowercase"}).normalize("ΣΑΣ") == "σασ"


def test_unknown_type_is_named_at_load():
    with pytest.raises(UnsupportedComponent, match="Cyrillic"):
        normalizers.from_spec({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Cyrillic"}]})


@pytest.mark.parametrize("spec", [
    {"type": "Precompiled", "precompiled_charsmap": "not base64!"},
    {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(b"\xff\xff\xff\x7f").decode()},
    {"type": "Replace", "pattern": {"Glob": "*"}, "content": ""},
    {"type": "Prepend"},
    "NFC",
])
def test_bad_specs_raise_value_error(spec):
    with pytest.raises(ValueError):
        normalizers.from_spec(spec)


def test_none_is_no_normalizer():
    assert normalizers.from_spec(None) is None
