"""IncrementalDetokenizer on the real vocabularies: concatenated deltas == `tokenizers`' decode of all ids,
whatever the step sizes; nothing shown is ever taken back (never half a character); bad ids are typed errors
that leave the stream usable."""

from __future__ import annotations

import functools
import json

import pytest
import tokenizers
from hypothesis import HealthCheck, given, settings, strategies as st
from tokenizers.decoders import DecodeStream

from tests.cuts import cut_at
from tests.realdata import vocabulary
from tokworker.stream.detokenizer import DetokenizeError, IncrementalDetokenizer
from tokworker.tokenizer import Tokenizer

TEXTS = [
    "Hello wörld, the answer is 42.\n\n```python\nprint('hi')\n```",
    "🧑‍🚀 👩‍👩‍👧‍👦 🇫🇷 astronaut: a zero-width-joiner sequence",
    "日本語のテキストと中文文本，还有한국어 텍스트.",
    "  leading spaces,\ttabs and\u00a0nbsp  ",
    "𝔐𝔞𝔯𝔰 and ancient 𓀀 glyphs, ünïcödé",
]
VOCABS = ["qwen3_dir", "deepseek", "mistral_v3_sp", "bert_wordpiece"]


@functools.lru_cache(maxsize=None)
def load(name):
    path = vocabulary(name)
    if name == "mistral_v3_sp":
        from bench.sentencepiece_convert import convert
        spec = convert(path)
        return Tokenizer.from_spec(spec), tokenizers.Tokenizer.from_str(json.dumps(spec))
    file = path / "tokenizer.json" if path.is_dir() else path
    ref = tokenizers.Tokenizer.from_file(str(file))
    ref.no_truncation()
    ref.no_padding()
    return (Tokenizer.from_dir(path) if path.is_dir() else Tokenizer.from_file(path)), ref


@pytest.fixture(scope="module", params=VOCABS)
def pair(request):
    return (request.param, *load(request.param))


def stream(tok, steps, **options):
    detok = IncrementalDetokenizer(tok, **options)
    shown, snapshots = [], []
    for step in steps:
        shown.append(detok.add(step))
        snapshots.append("".join(shown))
    shown.append(detok.flush())
    return "".join(shown), snapshots


def id_sequences(tok, ref):
    text_ids = [i for text in TEXTS for i in ref.encode(text, add_special_tokens=False).ids]
    specials = sorted(tok.special_ids)[:20] or [0]
    pick = st.one_of(st.sampled_from(text_ids), st.integers(0, tok.vocab_size - 1), st.sampled_from(specials))
    runs = st.lists(st.sampled_from(TEXTS), min_size=1, max_size=2).map(
        lambda ts: [i for t in ts for i in ref.encode(t, add_special_tokens=False).ids])
    return st.tuples(runs, st.lists(pick, max_size=12), st.integers(0, 200)).map(
        lambda t: t[0][:t[2]] + t[1] + t[0][t[2]:])


def test_split_anywhere_equals_decode(pair):
    name, tok, ref = pair

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(id_sequences(tok, ref), st.lists(st.integers(0, 10_000), max_size=30), st.booleans())
    def check(ids, cuts, skip):
        expected = ref.decode(ids, skip_special_tokens=skip)
        for steps in (cut_at(ids, cuts), [[i] for i in ids], [ids]):
            text, snapshots = stream(tok, steps, skip_special_tokens=skip)
            assert text == expected
            assert all(expected.startswith(s) for s in snapshots)  # never half a character, never retracted

    check()


def test_matches_decode_stream_on_text(pair):
    """Per-token parity with `tokenizers.decoders.DecodeStream` where it works (valid text, no ids out of
    range): the same text, token by token, in total."""
    name, tok, ref = pair
    for text in TEXTS:
        ids = ref.encode(text, add_special_tokens=False).ids
        reference = DecodeStream(skip_special_tokens=True)
        theirs = "".join(reference.step(ref, i) or "" for i in ids)
        ours, _ = stream(tok, [[i] for i in ids])
        assert ours == theirs == ref.decode(ids)


def test_sentencepiece_first_space_is_stripped_once():
    tok, ref = load("mistral_v3_sp")
    ids = ref.encode("Hello world", add_special_tokens=False).ids
    assert tok.id_to_token(ids[0]).startswith("▁")
    deltas = [IncrementalDetokenizer(tok).add([i]) for i in ids[:1]]
    assert deltas == ["Hello"]
    detok = IncrementalDetokenizer(tok)
    assert [detok.add([i]) for i in ids] == ["Hello", " world"]
    bos = tok.token_to_id("<s>")
    detok = IncrementalDetokenizer(tok, skip_special_tokens=True)
    assert detok.add([bos]) + detok.add(ids[:1]) == "Hello" == ref.decode([bos] + ids[:1])


def test_byte_fallback_run_is_decoded_as_a_whole():
    """tokenizers turns an invalid run of <0xAB> tokens into one U+FFFD per byte, even its valid start."""
    tok, ref = load("mistral_v3_sp")
    byte = {b: tok.token_to_id(f"<0x{b:02X}>") for b in range(256)}
    run = [byte[b] for b in "日".encode()] + [byte[0xFF]]
    ids = run + ref.encode("x", add_special_tokens=False).ids
    assert ref.decode(ids) == "\ufffd" * 4 + " x"
    text, snapshots = stream(tok, [[i] for i in ids])
    assert text == ref.decode(ids) and snapshots[2] == ""


def test_bad_ids_are_typed_errors_and_the_stream_goes_on(pair):
    name, tok, ref = pair
    ids = ref.encode(TEXTS[1], add_special_tokens=False).ids
    detok = IncrementalDetokenizer(tok)
    out = [detok.add(ids[:3])]
    for bad in ([-1], [tok.vocab_size], [ids[3], -5], ["x"], [1.5], [None]):
        with pytest.raises(DetokenizeError):
            detok.add(bad)
    out += [detok.add(ids[3:]), detok.flush()]
    assert "".join(out) == ref.decode(ids)
    assert issubclass(DetokenizeError, ValueError)


def test_kept_specials_stay_while_others_are_skipped():
    tok, ref = load("qwen3_dir")
    keep = "<|im_start|>"
    ids = ref.encode("<|im_start|>assistant\nhi<|im_end|><|endoftext|>", add_special_tokens=False).ids
    text, _ = stream(tok, [[i] for i in ids], keep_special_tokens=(keep,))
    kept_id = tok.token_to_id(keep)
    expected = ref.decode([i for i in ids if i == kept_id or i not in tok.special_ids], skip_special_tokens=False)
    assert text == expected == "<|im_start|>assistant\nhi"
