"""The UnicodeScripts pre-tokenizer against `tokenizers` itself: splits on every code point (each one after a
Latin letter, a space and a Han character, in code point order, and beside its script's first character),
hypothesis text mixing scripts, and tokenizers trained here with UnicodeScripts in their pipeline, loaded
from their tokenizer.json and compared on ids and decoded text."""

from __future__ import annotations

import importlib.util
import itertools
import json
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from tokenizers import Tokenizer as ReferenceTokenizer, decoders as D, models as M, normalizers as N
from tokenizers import pre_tokenizers as P, trainers as T

from tests.tokenizer_corpus import CORPUS
from tests.tokenizer_refs import trained
from tokworker.tokenizer import Tokenizer, unicode
from tokworker.tokenizer import pre_tokenizers as ours

SCALARS = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
CHUNK = 1 << 15  # tokenizers' cost per character grows with the length of the text it is given


def reference_split(pieces: list[str], stage=None) -> list[str]:
    stage = stage or P.UnicodeScripts()
    return [word for piece in pieces for word, _ in stage.pre_tokenize_str(piece)]


def chunks(text_per_scalar) -> list[str]:
    """One text per CHUNK scalars, each scalar contributing text_per_scalar(chr(c))."""
    return ["".join(map(text_per_scalar, map(chr, SCALARS[i:i + CHUNK]))) for i in range(0, len(SCALARS), CHUNK)]


# -- tokenizers' own unit examples --------------------------------------------------------------------
def test_tokenizers_examples():
    splitter = ours.UnicodeScripts()
    text = "どこで生れ。Yes"
    assert splitter.split([text]) == ["どこで生れ", "。", "Yes"] == reference_split([text])
    text = "Apples are りんご 林檎"
    assert splitter.split([text]) == ["Apples are ", "りんご 林檎"] == reference_split([text])
    scripts = {"京": "HAN", "太": "HAN", "い": "HAN", "グ": "HAN", "ー": "HAN", "a": "LATIN", "A": "LATIN",
               "0": "COMMON", "$": "COMMON", "@": "COMMON", "-": "COMMON", " ": "ANY", "\u0378": "ANY"}
    assert {c: unicode.script(c) for c in scripts} == scripts


@pytest.mark.parametrize("text", [" abc", "   ", "\u0378", " 日", "\u3000 a", "a \u0378 b", "e\u0301", "\U000e0100x",
                                  "12 ab", "a1b", "日本 abc", "Ж ж α", "", "\t\n x \n"])
def test_leading_any_characters_are_dropped_like_tokenizers(text):
    assert ours.UnicodeScripts().split([text]) == reference_split([text])


# -- every code point ---------------------------------------------------------------------------------
def test_every_ascii_pair_alone_and_joined():
    """ASCII pieces take their own path (one findall, no translation)."""
    pairs = [a + b for a in map(chr, range(128)) for b in map(chr, range(128))]
    splitter = ours.UnicodeScripts()
    assert splitter.split(pairs) == reference_split(pairs)
    triples = ["".join(pair) for pair in itertools.product(pairs[::61], map(chr, range(128)))]
    assert splitter.split(["".join(triples)]) == reference_split(["".join(triples)])
    assert splitter.split(triples) == reference_split(triples)


@pytest.mark.parametrize("left", ["a", " ", "\u4e00"])
def test_every_code_point_after_latin_space_and_han(left):
    """After "a" or Han, a character splits unless it is ANY or of that script: together these two find
    ANY exactly; after a space (ANY) only the previous character's script counts."""
    texts = chunks(lambda ch: left + ch)
    assert ours.UnicodeScripts().split(texts) == reference_split(texts)


def test_every_code_point_in_order_and_beside_its_scripts_first_character():
    """In code point order, runs break where the script changes; each scripted character placed after
    the first character of the script it has here must not split, and the first characters of two
    different scripts must: together with ANY, that is the whole partition."""
    splitter, table = ours.UnicodeScripts(), unicode.script_table()
    texts = chunks(lambda ch: ch)
    assert splitter.split(texts) == reference_split(texts)
    first: dict[int, str] = {}
    for c in SCALARS:
        first.setdefault(table[c], chr(c))
    del first[0]
    beside = "".join(first[table[c]] + chr(c) for c in SCALARS if table[c])
    assert splitter.split([beside]) == reference_split([beside])
    assert len(reference_split([beside])) == 1 + sum(
        1 for a, b in itertools.pairwise(c for c in SCALARS if table[c]) if table[a] != table[b])
    pairs = "".join(a + b for a, b in itertools.permutations(first.values(), 2))
    assert splitter.split([pairs]) == reference_split([pairs])
    assert len(reference_split([pairs])) == 1 + sum(1 for a, b in itertools.pairwise(pairs) if a != b)
    assert len(unicode.script_names()) == len(first) + 1


# -- mixed-script text --------------------------------------------------------------------------------
SAMPLES = {
    "latin": "abcXYZéÑßſ", "cyrillic": "жЖёЁщ", "greek": "αβΩάϊ", "han": "日本語中文林檎", "hiragana": "どこでりんご",
    "katakana": "テキストグー", "hangul": "한국어문장", "thai": "ภาษาไทย", "arabic": "مرحبا،؟", "hebrew": "שלום",
    "devanagari": "हिन्दी", "digits": "0123٣۴१", "punctuation": ".,!?-—。，！「」()",
    "emoji": "😀🙏👍🏽🧑\u200d🚀🇫🇷", "marks": "\u0301\u0308\u0334\u093c\u3099\u20dd",
    "spaces": " \t\n\u00a0\u3000\u2009", "unassigned": "\u0378\U000e01f0\U0010fffd",
    "other": "\U00011de0\u0558\U0001fae8\U00016fe4\u2e5d\U00018b00\U00011f00",  # newer than tokenizers' table
}
RUN = st.tuples(st.sampled_from(sorted(SAMPLES)), st.integers(1, 6)).flatmap(
    lambda kind: st.text(alphabet=SAMPLES[kind[0]], min_size=1, max_size=kind[1]))
MIXED = st.lists(st.one_of(RUN, st.characters(codec="utf-8")), max_size=12).map("".join)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(text=MIXED)
def test_mixed_script_text_splits_like_tokenizers(text):
    assert ours.UnicodeScripts().split([text]) == reference_split([text])


@SETTINGS
@given(text=MIXED)
def test_in_a_sequence_each_piece_is_split_on_its_own(text):
    reference = P.Sequence([P.WhitespaceSplit(), P.UnicodeScripts(), P.Digits(individual_digits=True)])
    stage = ours.from_spec({"type": "Sequence", "pretokenizers": [
        {"type": "WhitespaceSplit"}, {"type": "UnicodeScripts"}, {"type": "Digits", "individual_digits": True}]})
    assert stage.split([text]) == reference_split([text], reference)


# -- trained pipelines, end to end --------------------------------------------------------------------
MULTILINGUAL = [
    "Apples are りんご 林檎, and 東京は日本の首都です。Tokyo is the capital.",
    "Москва — столица России; Athens is Αθήνα; 서울은 한국의 수도입니다.",
    "ภาษาไทย mixed with English and ٣ Arabic digits: مرحبا بالعالم 123",
    "emoji 😀 between words👍🏽 and e\u0301 combining é, テキストー、カタカナ",
    "  leading spaces, trailing spaces   \n new lines\tand tabs",
] * 4
TRAINING = CORPUS * 2 + MULTILINGUAL * 3


def _train(model, trainer, pre_tokenizer, decoder=None, normalizer=None):
    return trained(model, trainer, TRAINING, normalizer, pre_tokenizer, decoder)


PIPELINES = {
    "bpe_digits": lambda: _train(
        M.BPE(unk_token="<unk>"), T.BpeTrainer(vocab_size=500, special_tokens=["<unk>"], show_progress=False),
        P.Sequence([P.UnicodeScripts(), P.Digits(individual_digits=True)])),
    "byte_level_bpe": lambda: _train(
        M.BPE(), T.BpeTrainer(vocab_size=600, initial_alphabet=P.ByteLevel.alphabet(), show_progress=False),
        P.Sequence([P.UnicodeScripts(), P.ByteLevel(add_prefix_space=False, use_regex=True)]), D.ByteLevel()),
    "unigram_metaspace": lambda: _train(
        M.Unigram(), T.UnigramTrainer(vocab_size=300, special_tokens=["<unk>"], unk_token="<unk>",
                                      show_progress=False),
        P.Sequence([P.WhitespaceSplit(), P.UnicodeScripts(), P.Metaspace()]), D.Metaspace(), N.NFKC()),
}


@pytest.fixture(scope="module", params=sorted(PIPELINES))
def pair(request, tmp_path_factory):
    reference = PIPELINES[request.param]()
    path = tmp_path_factory.mktemp(request.param) / "tokenizer.json"
    reference.save(str(path))
    return Tokenizer.from_file(path), ReferenceTokenizer.from_file(str(path))


def test_trained_pipelines_encode_and_decode_like_tokenizers(pair):
    ours_tokenizer, reference = pair
    for text in CORPUS + MULTILINGUAL[:5] + ["", " ", "   x", "日本 abc"]:
        ids = reference.encode(text, add_special_tokens=False).ids
        assert ours_tokenizer.encode(text) == ids, text
        assert ours_tokenizer.decode(ids) == reference.decode(ids, skip_special_tokens=False), text


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(text=MIXED)
def test_trained_pipelines_on_mixed_script_text(pair, text):
    ours_tokenizer, reference = pair
    ids = reference.encode(text, add_special_tokens=False).ids
    assert ours_tokenizer.encode(text) == ids
    assert ours_tokenizer.decode(ids) == reference.decode(ids, skip_special_tokens=False)


@pytest.mark.slow  # a sweep of several seconds
def test_committed_table_is_what_the_probe_measures():
    tools = Path(__file__).resolve().parents[1] / "tools"
    for name in ("probe_unicode", "probe_scripts"):           # probe_scripts imports probe_unicode by name
        spec = importlib.util.spec_from_file_location(name, tools / f"{name}.py")
        probe = importlib.util.module_from_spec(spec)
        sys.modules[name] = probe
        spec.loader.exec_module(probe)
    fresh = json.loads(zlib.decompress(probe.render_scripts(probe.probe_scripts())))
    committed = json.loads(zlib.decompress(unicode.SCRIPTS.read_bytes()))
    # The classes' names come from the installed `regex` module's Unicode (a reading aid, never matched on):
    # they and its version may differ; tokenizers' version, the runs and the class of each run may not.
    assert len(fresh.pop("names")) == len(committed.pop("names"))
    assert fresh.pop("probed_with")["tokenizers"] == committed.pop("probed_with")["tokenizers"]
    assert fresh == committed


def test_table_loads_only_for_a_tokenizer_that_uses_it():
    """The script table is its own file, read on first use: a fresh process that imports the tokenizer
    package and builds other pre-tokenizers has not read it."""
    program = (
        "from tokworker.tokenizer import unicode, pre_tokenizers as p\n"
        "p.from_spec({'type': 'Sequence', 'pretokenizers': [{'type': 'WhitespaceSplit'}, {'type': 'Digits'}]})\n"
        "print(unicode._scripts.cache_info().currsize)\n"
        "p.from_spec({'type': 'UnicodeScripts'})\n"
        "print(unicode._scripts.cache_info().currsize, len(unicode.script_table()))\n")
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
                            cwd=Path(__file__).resolve().parents[1], check=True)
    assert result.stdout.split() == ["0", "1", str(0x110000)]
    assert set(unicode.script_table()) == set(range(len(unicode.script_names())))
