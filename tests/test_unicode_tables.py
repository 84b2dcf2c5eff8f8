"""tokworker.tokenizer.unicode against the references themselves: tokenizers' Split / normalizers /
pre-tokenizers and tiktoken's encoder, on targeted strings, on every code point, and on hypothesis strings
drawn from all of Unicode with the code points where the Unicode versions disagree weighted up.
Covers tokworker.tokenizer.unicode_data.pattern and tokworker.tokenizer.ascii_regex."""

from __future__ import annotations

import importlib.util
import random
import sys
import unicodedata
from pathlib import Path

import pytest
import regex
from hypothesis import HealthCheck, given, settings, strategies as st
from tokenizers import Regex, normalizers, pre_tokenizers

from tokworker.tokenizer import unicode
from tokworker.tokenizer.unicode_data import boundaries, charset, data

import realdata

REPO = Path(__file__).resolve().parent.parent

QWEN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
DEEPSEEK = ["\\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
            "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+"
            "[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"]
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
O200K = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CL100K = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
WHITESPACE = r"\w+|[^\w\s]+"
ODD_SYNTAX = [r"(?i)[a-z]+|(?i:[^k\d])|\W", r"[[:alpha:]]+|[[:punct:]]|[[:^space:]]|\h+", r"\b\w+\b|\B.",
              r"(?i)\p{Lu}|(?-i:[\p{Ll}&&[^a-f]])|\p{^N}", r"^\s|\S$|\A.|.\z|\R|a{1,2}+|b++|\x{41}|\u00e9|\101",
              r"(?m:.+)|(?i)'s|\p{Han}+|\p{Greek}|\p{Common}"]
TOKENIZERS_PATTERNS = [QWEN, LLAMA3, *DEEPSEEK, GPT2, O200K, WHITESPACE, *ODD_SYNTAX]
TIKTOKEN_PATTERNS = [CL100K, O200K, LLAMA3, QWEN, GPT2, r"\s++$|\S+"]


def _scalars(bounds):
    for a, b in zip(bounds[::2], bounds[1::2]):
        yield from (c for c in range(a, min(b, a + 64)) if not 0xD800 <= c < 0xE000)


def _disputed() -> list[str]:
    """Code points where the references and Python's Unicode disagree somewhere (first 64 of each run)."""
    points = set()
    for flavor in data()["flavors"].values():
        for deltas in flavor["regex_diff"].values():
            points.update(_scalars(boundaries(deltas)))
        for orbit in flavor["folds"]["orbits"]:
            points.update(orbit)
    points.update(_scalars(boundaries(data()["normalization"]["inert"])))
    points.update(int(cp) for cp in data()["predicates"]["lowercase"])
    return [chr(c) for c in sorted(points)]


DISPUTED = _disputed()
MARKS = [chr(c) for c in range(0x300, 0x370)] + list("\u0d3c\u07f3\u093c\u3099\u1ab0\u0334\U00011930")
SCALAR = st.integers(0, 0x10FFFF).filter(lambda c: not 0xD800 <= c < 0xE000).map(chr)
NEWER = st.integers(0x10000, 0x10FFFF).filter(lambda c: not 0xE000 <= c < 0xF900).map(chr)
TEXT = st.lists(st.one_of(st.sampled_from(list("aZ 's'S'ſ'K\u212a'LL 1234567 \n\r\t.,!?-\"\u00a0\u3000日本テ")),
                          st.sampled_from(DISPUTED), st.sampled_from(MARKS), SCALAR, NEWER),
                max_size=40).map("".join)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reference_pieces(pattern: str, text: str) -> list[str]:
    return [piece for piece, _ in pre_tokenizers.Split(Regex(pattern), "isolated").pre_tokenize_str(text)]


def our_pieces(pattern: str, text: str, flavor: str = "tokenizers") -> list[str]:
    pieces, cursor = [], 0
    for match in unicode.compile_pattern(pattern, flavor).finditer(text):
        start, end = match.span()
        if start == end:
            continue
        if start > cursor:
            pieces.append(text[cursor:start])
        pieces.append(match.group())
        cursor = end
    if cursor < len(text):
        pieces.append(text[cursor:])
    return pieces


# -- the measured traps ------------------------------------------------------------------------------
def test_traps_from_the_notes():
    assert our_pieces(LLAMA3, "the \U00011de0") == reference_pieces(LLAMA3, "the \U00011de0") == ["the", " \U00011de0"]
    assert regex.findall(LLAMA3, "the \U00011de0") != ["the", " \U00011de0"]  # what Python's Unicode gives
    for pattern in DEEPSEEK:
        assert our_pieces(pattern, "the \u0558") == reference_pieces(pattern, "the \u0558")
    reference = normalizers.NFC().normalize_str("\u07f3\u0d3c")
    assert unicode.normalize("NFC", "\u07f3\u0d3c") == reference != unicodedata.normalize("NFC", "\u07f3\u0d3c")


def test_oniguruma_case_folding_and_anchors():
    contractions = "'S 'ſ 'K 'K 'LL 'Ll"
    assert our_pieces(r"(?i:'s|'k|'ll)", contractions) == reference_pieces(r"(?i:'s|'k|'ll)", contractions)
    assert our_pieces(r"(?i)\p{Lu}", "aAbB") == reference_pieces(r"(?i)\p{Lu}", "aAbB")  # not case-closed
    assert our_pieces(r"(?i)[\p{Lu}]", "aAbB") == reference_pieces(r"(?i)[\p{Lu}]", "aAbB")  # case-closed
    for pattern, text in [(r"a$", "a\nb a\r\n"), (r"\n^", "a\n"), (r"\n^", "a\nb"), (r"a{2}+", "aaaaa"),
                          (r"a\Z", "a\n"), (r"(?m)a.b", "a\nb axb"), (r"\w+", "½³a"), (r"[\w]+", "½³a")]:
        assert our_pieces(pattern, text) == reference_pieces(pattern, text), pattern


# (?i)[\p{Ll}&&[^a-f]] holds U+FB00, and Oniguruma matches "ff" as one piece by its fold
@pytest.mark.parametrize("pattern", [r"(?i)ss", r"(?i:st)", r"\p{NoSuchProperty}", r"\X", r"(?x) a", r"a(?~b)",
                                     r"(?i)\p{Lu}|[\p{Ll}&&[^a-f]]|\p{^N}"])
def test_constructs_that_cannot_be_exact_are_errors(pattern):
    with pytest.raises(unicode.UnsupportedPattern):
        unicode.translate_pattern(pattern)
    with pytest.raises(ValueError):
        unicode.translate_pattern("a", flavor="pcre")


# -- every code point --------------------------------------------------------------------------------
ALL = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)


@pytest.mark.parametrize("expression", [r"\p{L}", r"\p{N}", r"\s", r"\w", r"[\w]", r"[^\s\p{L}\p{N}]",
                                        r"[\p{P}\p{S}]", r"[\p{L}\p{M}]", r"\p{Lo}", r"\d", r"\p{Han}"])
def test_classes_agree_on_every_code_point(expression):
    marker = "\U0010ffff"
    reference = normalizers.Replace(Regex(expression), marker).normalize_str(ALL)
    ours = unicode.compile_pattern(expression).sub(marker, ALL)
    assert ours == reference


# -- patterns on generated text ----------------------------------------------------------------------
@pytest.mark.slow  # a sweep of several seconds
@pytest.mark.parametrize("pattern", TOKENIZERS_PATTERNS)
@SETTINGS
@given(text=TEXT)
def test_patterns_split_like_tokenizers(pattern, text):
    assert our_pieces(pattern, text) == reference_pieces(pattern, text)


@pytest.fixture(scope="module")
def cl100k_ranks():
    import tiktoken.load
    return tiktoken.load.load_tiktoken_bpe(str(realdata.vocabulary("cl100k_tiktoken")))


@pytest.fixture(scope="module")
def encodings(cl100k_ranks):
    """cl100k's ranks under each pattern (tiktoken takes any pattern with any ranks), built once."""
    import tiktoken
    return {pattern: tiktoken.Encoding(f"cl100k-{index}", pat_str=pattern, mergeable_ranks=cl100k_ranks,
                                       special_tokens={}) for index, pattern in enumerate(TIKTOKEN_PATTERNS)}


def _bpe(piece: bytes, ranks: dict[bytes, int]) -> list[int]:
    parts = [piece[i:i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        ranked = [(ranks.get(parts[i] + parts[i + 1], 1 << 62), i) for i in range(len(parts) - 1)]
        rank, index = min(ranked)
        if rank == 1 << 62:
            break
        parts[index:index + 2] = [parts[index] + parts[index + 1]]
    return [ranks[p] for p in parts]


@pytest.mark.parametrize("pattern", TIKTOKEN_PATTERNS)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXT)
def test_tiktoken_patterns_encode_like_tiktoken(cl100k_ranks, encodings, pattern, text):
    compiled = unicode.compile_pattern(pattern, "tiktoken")
    ours = [i for m in compiled.finditer(text) for i in _bpe(m.group().encode(), cl100k_ranks)]
    assert ours == encodings[pattern].encode_ordinary(text)


# -- normalization -----------------------------------------------------------------------------------
@pytest.mark.parametrize("form", ["NFC", "NFD", "NFKC", "NFKD"])
@settings(max_examples=300, deadline=None)
@given(text=TEXT)
def test_normalize_matches_tokenizers(form, text):
    assert unicode.normalize(form, text) == getattr(normalizers, form)().normalize_str(text)


def test_normalize_long_text_with_inert_characters():
    rng = random.Random(7)
    text = "".join(rng.choice(DISPUTED + MARKS + list("ab 日本語")) for _ in range(20_000))
    for form in ("NFC", "NFKD"):
        assert unicode.normalize(form, text) == getattr(normalizers, form)().normalize_str(text)
    with pytest.raises(ValueError):
        unicode.normalize("NFX", "a")


# -- predicates and the per-character normalizers ---------------------------------------------------
@SETTINGS
@given(text=TEXT)
def test_lowercase_and_strip_accents_match_tokenizers(text):
    assert unicode.to_lowercase(text) == normalizers.Lowercase().normalize_str(text)
    stripped = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents()]).normalize_str(text)
    assert unicode.strip_accents(unicode.normalize("NFD", text)) == stripped
    bert = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True,
                                      lowercase=True).normalize_str(text)
    assert unicode.to_lowercase(unicode.bert_strip_accents(unicode.normalize("NFD", text))) == bert


@SETTINGS
@given(text=TEXT)
def test_bert_pieces_from_the_predicates(text):
    ws, punct = unicode.WHITESPACE_CLASS, unicode.PUNCTUATION_CLASS
    ours = regex.findall(f"[{punct}]|[^{punct}{ws}]+", text)
    assert ours == [p for p, _ in pre_tokenizers.BertPreTokenizer().pre_tokenize_str(text)]
    expected = [p for p, _ in pre_tokenizers.Whitespace().pre_tokenize_str(text)]
    assert regex.findall(f"[{unicode.WORD_CLASS}]+|[^{unicode.WORD_CLASS}{ws}]+", text) == expected
    assert regex.findall(unicode.translate_pattern(WHITESPACE, "tiktoken"), text) == expected  # Rust regex
    digits = regex.findall(f"[{unicode.NUMERIC_CLASS}]|[^{unicode.NUMERIC_CLASS}]+", text)
    assert digits == [p for p, _ in pre_tokenizers.Digits(individual_digits=True).pre_tokenize_str(text)]


@SETTINGS
@given(text=TEXT)
def test_bert_normalizer_from_the_predicates(text):
    cleaned = "".join("" if unicode.is_control(c) else " " if unicode.is_bert_whitespace(c)
                      else f" {c} " if unicode.is_chinese_char(c) else c for c in text)
    reference = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=False,
                                           lowercase=False).normalize_str(text)
    assert cleaned == reference
    assert all(unicode.is_whitespace(c) == bool(regex.fullmatch(f"[{unicode.WHITESPACE_CLASS}]", c)) for c in text)
    assert all(unicode.is_punctuation(c) == bool(regex.fullmatch(f"[{unicode.PUNCTUATION_CLASS}]", c))
               for c in text)


# -- the committed data is what the probe measures ---------------------------------------------------
def _probe_module():
    spec = importlib.util.spec_from_file_location("probe_unicode", REPO / "tools" / "probe_unicode.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["probe_unicode"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # a sweep of several seconds
def test_committed_tables_equal_a_fresh_probe_of_some_classes():
    probe = _probe_module()
    for flavor, atom, expression in [("tokenizers", "gc:L", r"\p{L}"), ("tokenizers", "perl:w", r"\w"),
                                     ("tokenizers", "perl:w:bracket", r"[\w]"), ("tokenizers", "gc:Mn", r"\p{Mn}"),
                                     ("tiktoken", "gc:N", r"\p{N}"), ("tiktoken", "perl:s", r"\s")]:
        measure = probe.EVERYTHING.tokenizers_class if flavor == "tokenizers" else probe.EVERYTHING.tiktoken_class
        assert tuple(measure(expression)) == unicode._atoms(flavor).members(atom), (flavor, atom)
    whitespace = probe.EVERYTHING.boundaries(
        probe.gaps(pre_tokenizers.WhitespaceSplit().pre_tokenize_str(probe.ALL), len(probe.ALL)))
    assert tuple(whitespace) == tuple(boundaries(data()["predicates"]["whitespace"]))
    lowered = {str(cp): out for cp, out in probe.per_character(normalizers.Lowercase()).items() if out != chr(cp)}
    assert lowered == data()["predicates"]["lowercase"]


def test_regex_diffs_are_right_for_the_installed_regex():
    atoms = unicode._atoms("tokenizers")
    for atom in ("gc:L", "gc:N", "perl:s", "sc:HANI"):
        assert atoms.regex_members(atom) == charset.measure_regex(atoms.regex_expression(atom))


# -- ASCII stand-ins: other text through the ASCII twin -------------------------------------------------
MOSTLY_ASCII = st.lists(st.one_of(st.sampled_from(["the", " cat", "'s", " 42", "\n", "  ", ".", "x1"]), TEXT),
                        max_size=12).map("".join)


@pytest.mark.parametrize("pattern", TOKENIZERS_PATTERNS + [CL100K])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=MOSTLY_ASCII)
def test_stand_ins_split_like_the_regex_module_and_tokenizers(pattern, text):
    """Text that is not all ASCII, through the twin with stand-ins (where every character has one): the
    pieces equal the `regex` pattern's and tokenizers' own; so does Split.split, whichever way it goes."""
    from tokworker.tokenizer.pre_tokenizers import Split
    split = Split.from_spec({"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated"})
    if split._fast is None:
        return
    expected = list(filter(None, split._fast(text)))
    if split._stand_ins is not None and not text.isascii():
        assert split._by_stand_ins(text) in (None, expected)
    assert split.split([text]) == expected
    if pattern != CL100K:                 # tokenizers' Oniguruma has no possessive quantifiers
        assert expected == reference_pieces(pattern, text)


def test_stand_ins_cover_accented_letters_and_emoji_and_refuse_what_a_class_singles_out():
    from tokworker.tokenizer.pre_tokenizers import Split
    qwen = Split.from_spec({"type": "Split", "pattern": {"Regex": QWEN}, "behavior": "Isolated"})
    assert qwen._by_stand_ins("naïve café 🚀 β's") == ["naïve", " café", " 🚀", " β", "'s"]
    text = "the naïve model reads 42 words, then one more line\n" * 3
    assert qwen.split([text]) == qwen._by_stand_ins(text) == list(filter(None, qwen._fast(text)))
    deepseek = Split.from_spec({"type": "Split", "pattern": {"Regex": DEEPSEEK[1]}, "behavior": "Isolated"})
    assert deepseek._stand_ins is not None and deepseek._stand_ins.ascii_text("ab日本") is None   # its own class
    assert deepseek.split(["ab日本cd"]) == ["ab", "日本", "cd"]
