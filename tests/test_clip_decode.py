"""CLIP's tokenizer.json against the original CLIP tokenizer (OpenAI's SimpleTokenizer and its bpe file, as
clip-anytorch ships them), `tokenizers` and transformers 5.24's CLIPTokenizer.

The folder is what transformers writes for CLIP (CLIPTokenizer from the original vocabulary and merges, then
save_pretrained): byte-level BPE whose word-final tokens end in "</w>", and a ByteLevel decoder.
- Encode: ours equals `tokenizers` and transformers on the file. The original also runs ftfy and
  html.unescape on the text first (a tokenizer.json cannot say so): there "&amp;" is "&". We follow the file.
- Decode: `tokenizers`' ByteLevel decoder leaves every "</w>" in the text ("a</w>photo</w>"); transformers 5
  rebuilds CLIPTokenizer's decode as replace("</w>", " ") then strip() ("a photo"); the original CLIP writes
  "</w>" as the space after each word and strips nothing ("a photo "). We follow the original (the training
  stack), token by token, so a stream gives the same text.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.realdata import vocabulary
from tests.tokenizer_corpus import CORPUS
from tokworker import TextStream, Tokenizer
from tokworker.protocol.deltas import StreamParams

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("ftfy")                       # the original tokenizer's text cleaning


@lru_cache(maxsize=1)
def _original():
    """OpenAI's SimpleTokenizer, loaded from its file (the clip package's __init__ imports torch)."""
    bpe = vocabulary("clip_bpe")
    spec = importlib.util.spec_from_file_location("clip_simple_tokenizer", bpe.parent / "simple_tokenizer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, module.SimpleTokenizer(str(bpe))


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    module, original = _original()
    merges = sorted(original.bpe_ranks, key=original.bpe_ranks.get)
    folder = tmp_path_factory.mktemp("clip")
    transformers.CLIPTokenizer(vocab=dict(original.encoder), merges=[tuple(m) for m in merges]).save_pretrained(str(folder))
    rust = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    return Tokenizer.from_dir(folder), rust, transformers.AutoTokenizer.from_pretrained(str(folder)), original, module


def _clean(module, text: str) -> str:
    return module.whitespace_clean(module.basic_clean(text)).lower()


def test_clip_encode_follows_the_file(clip):
    ours, rust, rebuilt, original, module = clip
    for text in CORPUS:
        ids = ours.encode(text, add_special_tokens=True)
        assert ids == rust.encode(text).ids == rebuilt.encode(text), text
        if ids[1:-1] != original.encode(text):           # only where ftfy / html.unescape changed the text
            assert _clean(module, text) != " ".join(text.split()).lower(), text
    assert ours.encode("fish &amp; chips") == [2759, 261, 6259, 282, 8855]          # "&", "amp", ";"
    assert original.encode("fish &amp; chips") == [2759, 261, 8855]


def test_clip_decode_follows_the_original_clip(clip):
    ours, rust, rebuilt, original, _ = clip
    for text in CORPUS:
        ids = ours.encode(text, add_special_tokens=True)
        assert ours.decode(ids) == original.decode(ids), text
        words = [i for i in ids if i not in ours.special_ids]
        assert ours.decode(ids, skip_special_tokens=True) == original.decode(words), text
        if words:
            assert rust.decode(words) == original.decode(words).replace(" ", "</w>"), text
            assert rebuilt.decode(words) == original.decode(words).strip(), text
    photo = ours.encode("A photo of a cat")
    assert photo == [320, 1125, 539, 320, 2368]
    assert ours.decode(photo) == original.decode(photo) == "a photo of a cat "
    assert rust.decode(photo) == "a</w>photo</w>of</w>a</w>cat</w>"
    assert rebuilt.decode(photo) == "a photo of a cat"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(st.characters(blacklist_categories=("Cs",)), max_size=40), cuts=st.lists(st.integers(1, 4)))
def test_clip_generated_text_decodes_and_streams_as_the_original(clip, text, cuts):
    ours, _, _, original, _ = clip
    ids = ours.encode(text, split_special_tokens=True)
    whole = ours.decode(ids)
    assert whole == original.decode(ids)
    stream, streamed, start = TextStream(ours, StreamParams()), [], 0
    for cut in cuts + [len(ids)]:
        streamed += [d.content or "" for d in stream.push(ids[start:start + cut]).deltas]
        start += cut
        if start >= len(ids):
            break
    streamed += [d.content or "" for d in stream.finish().deltas]
    assert "".join(streamed) == whole
