"""Every pipeline component against `tokenizers`: tokenizers trained here with the library's own trainers,
then loaded from their tokenizer.json by both sides and compared on ids and decoded text.
Covers tokworker.tokenizer.decoders and tokworker.tokenizer.processors."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import AddedToken, decoders as D, models as M, normalizers as N  # noqa: E402
from tokenizers import pre_tokenizers as P, processors as PP, trainers as T  # noqa: E402

from tests.tokenizer_corpus import CORPUS  # noqa: E402
from tests.tokenizer_refs import trained, trained_ids  # noqa: E402
from tokworker.tokenizer import Tokenizer, UnsupportedComponent  # noqa: E402

TRAINING = CORPUS * 3 + [
    "Byte pair encoding merges the most frequent pair of symbols, again and again, until the vocabulary is full.",
    "Les tokenizers découpent le texte en morceaux; 東京は日本の首都です。 Москва — столица России.",
    "numbers 0123456789 and 3.14159 and 2,718 and 1e10; code: x = [i**2 for i in range(10)]",
] * 5

QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")

TEXTS = CORPUS + [
    "A <mask> in <mask>the middle and <mask>, <mask>-x", "  <pad>  spaced <pad>\n<pad>",
    "[CLS] bert style [SEP] tokens [MASK]", "Ünïcödé ÀÉÎÕÜ ﬁ ligature ①②③ Ⅻ", "zzzz qqqq never seen ☃☃",
    "▁already▁has▁metaspace ▁", "<0x41> literal byte token text",
]


def _train(model, trainer, normalizer=None, pre_tokenizer=None, decoder=None, post_processor=None, added=()):
    tok = trained(model, trainer, TRAINING, normalizer, pre_tokenizer, decoder)
    if added:
        tok.add_tokens([t for t in added if not t.special])
        tok.add_special_tokens([t for t in added if t.special])
    if post_processor is not None:
        tok.post_processor = post_processor
    return tok


def _bpe_trainer(size=600, **kwargs):
    return T.BpeTrainer(vocab_size=size, show_progress=False, **kwargs)


ADDED = [AddedToken("<mask>", lstrip=True, rstrip=False, single_word=True, special=True),
         AddedToken("<pad>", lstrip=True, rstrip=True, special=True, normalized=False),
         AddedToken("ligature", normalized=True, special=False), AddedToken("[SEP]", special=True)]


def _qwen_style():
    return _train(M.BPE(), _bpe_trainer(initial_alphabet=P.ByteLevel.alphabet(), special_tokens=["<|endoftext|>"]),
                  N.NFC(), P.Sequence([P.Split(tokenizers.Regex(QWEN_PATTERN), "isolated"),
                                       P.ByteLevel(add_prefix_space=False, use_regex=False)]),
                  D.ByteLevel(), PP.ByteLevel(trim_offsets=False), ADDED)


def _gpt2_style():
    return _train(M.BPE(), _bpe_trainer(initial_alphabet=P.ByteLevel.alphabet()), None,
                  P.ByteLevel(add_prefix_space=True), D.ByteLevel(),
                  PP.TemplateProcessing(single="<|endoftext|> $A <|endoftext|>", special_tokens=[("<|endoftext|>", 0)]),
                  [AddedToken("<|endoftext|>", special=True)])


def _sentencepiece_bpe():
    tok = _train(M.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True),
                 _bpe_trainer(special_tokens=["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)], size=900),
                 N.Sequence([N.Prepend("▁"), N.Replace(" ", "▁")]), None,
                 D.Sequence([D.Replace("▁", " "), D.ByteFallback(), D.Fuse(), D.Strip(" ", 1, 0)]),
                 PP.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)]), ADDED)
    return tok


def _metaspace(scheme, split):
    return _train(M.BPE(unk_token="<unk>"), _bpe_trainer(special_tokens=["<unk>"]), N.NFKC(),
                  P.Metaspace(prepend_scheme=scheme, split=split), D.Metaspace(prepend_scheme=scheme),
                  PP.BertProcessing(("[SEP]", 1), ("<unk>", 0)), ADDED)


def _suffix_prefix():
    return _train(M.BPE(unk_token="[UNK]", continuing_subword_prefix="##", end_of_word_suffix="</w>"),
                  _bpe_trainer(special_tokens=["[UNK]", "[CLS]", "[SEP]"], continuing_subword_prefix="##",
                               end_of_word_suffix="</w>"),
                  N.Sequence([N.NFD(), N.Lowercase(), N.StripAccents()]), P.Whitespace(), D.BPEDecoder("</w>"),
                  PP.RobertaProcessing(("[SEP]", 2), ("[CLS]", 1)))


def _bert_pieces():
    return _train(M.BPE(unk_token="[UNK]"), _bpe_trainer(special_tokens=["[UNK]", "[CLS]", "[SEP]"]),
                  N.BertNormalizer(), P.BertPreTokenizer(), D.WordPiece(),
                  PP.Sequence([PP.ByteLevel(), PP.BertProcessing(("[SEP]", 2), ("[CLS]", 1))]), ADDED)


def _pre_tokenizer_zoo(pre_tokenizer, decoder=None):
    return _train(M.BPE(unk_token="<unk>"), _bpe_trainer(special_tokens=["<unk>"], size=400), None, pre_tokenizer,
                  decoder)


BUILDERS = {
    "qwen_style": _qwen_style,
    "gpt2_style": _gpt2_style,
    "sentencepiece_bpe": _sentencepiece_bpe,
    "metaspace_always": lambda: _metaspace("always", True),
    "metaspace_first": lambda: _metaspace("first", True),
    "metaspace_never_nosplit": lambda: _metaspace("never", False),
    "suffix_prefix": _suffix_prefix,
    "bert_pieces": _bert_pieces,
    "whitespace_split": lambda: _pre_tokenizer_zoo(P.WhitespaceSplit()),
    "punctuation_digits": lambda: _pre_tokenizer_zoo(P.Sequence([P.Punctuation("contiguous"), P.Digits(True)]),
                                                     D.CTC(pad_token="<unk>", word_delimiter_token="|")),
    "digits_grouped": lambda: _pre_tokenizer_zoo(P.Sequence([P.WhitespaceSplit(), P.Digits(False)])),
    "split_removed": lambda: _pre_tokenizer_zoo(P.Split(tokenizers.Regex(r"\s+"), "removed")),
    "split_prev": lambda: _pre_tokenizer_zoo(P.Split(tokenizers.Regex(r"[,.;:!?]"), "merged_with_previous")),
    "split_next": lambda: _pre_tokenizer_zoo(P.Split(" ", "merged_with_next")),
    "split_contiguous": lambda: _pre_tokenizer_zoo(P.Split(tokenizers.Regex(r"\p{L}"), "contiguous")),
    "split_invert": lambda: _pre_tokenizer_zoo(P.Split(tokenizers.Regex(r"[a-z]+"), "removed", invert=True)),
    "whitespace": lambda: _pre_tokenizer_zoo(P.Whitespace()),
    "split_isolated_invert": lambda: _pre_tokenizer_zoo(P.Split(tokenizers.Regex(r"\d+"), "isolated", invert=True)),
    "byte_level_after_split": lambda: _train(
        M.BPE(), _bpe_trainer(initial_alphabet=P.ByteLevel.alphabet()), None,
        P.Sequence([P.WhitespaceSplit(), P.ByteLevel(add_prefix_space=True, use_regex=False)]), D.ByteLevel()),
    "char_delimiter": lambda: _pre_tokenizer_zoo(P.CharDelimiterSplit("a")),
    "fixed_length": lambda: _pre_tokenizer_zoo(P.FixedLength(4)),
    "no_pre_tokenizer": lambda: _pre_tokenizer_zoo(None),
}


SPECS = {}


@pytest.fixture(scope="module", params=list(BUILDERS))
def pair(request):
    ref = BUILDERS[request.param]()
    spec = json.loads(ref.to_str())
    if spec.get("truncation") or spec.get("padding"):
        ref.no_truncation()
        ref.no_padding()
    ours = Tokenizer.from_spec(spec)
    SPECS[id(ours)] = spec
    return ours, ref


@pytest.mark.parametrize("add_special_tokens", [False, True])
def test_ids_match(pair, add_special_tokens):
    ours, ref = pair
    for text in TEXTS:
        assert ours.encode(text, add_special_tokens=add_special_tokens) == \
            trained_ids(ours, ref, text, add_special_tokens), text


@pytest.mark.parametrize("skip", [False, True])
def test_decode_matches(pair, skip):
    ours, ref = pair
    for text in TEXTS:
        ids = ref.encode(text, add_special_tokens=True).ids
        assert ours.decode(ids, skip_special_tokens=skip) == ref.decode(ids, skip_special_tokens=skip), text


def test_split_special_tokens(pair):
    ours, ref = pair
    ref.encode_special_tokens = True
    try:
        for text in TEXTS:
            assert ours.encode(text, split_special_tokens=True) == ref.encode(text, add_special_tokens=False).ids
    finally:
        ref.encode_special_tokens = False


def test_bytewise_streaming_when_claimed(pair):
    ours, ref = pair
    if not ours.decode_is_bytewise:
        return
    for text in TEXTS:
        ids = ref.encode(text, add_special_tokens=True).ids
        for skip in (False, True):
            joined = b"".join(ours.token_bytes(i, skip_special_tokens=skip) for i in ids).decode("utf-8", "replace")
            if ours.strip_leading_space and joined.startswith(" "):
                joined = joined[1:]
            assert joined == ref.decode(ids, skip_special_tokens=skip), text


def test_literal_spans_encode_as_if_added_tokens_did_not_exist(pair):
    ours, _ = pair
    spec = dict(SPECS[id(ours)], added_tokens=[])
    bare = tokenizers.Tokenizer.from_str(json.dumps(spec))
    for text in TEXTS:
        assert ours.encode_with_literal_spans(text, [(0, len(text))]) == \
            bare.encode(text, add_special_tokens=False).ids, text


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(st.characters(blacklist_categories=("Cs",), max_codepoint=0x2FFF), max_size=6) | st.sampled_from(
    ["<mask>", "<pad>", " ", "  ", "\n", "ligature", "[SEP]", "▁"]), max_size=10))
def test_hypothesis(pair, parts):
    ours, ref = pair
    text = "".join(parts)
    ids = ours.encode(text, add_special_tokens=True)
    assert ids == trained_ids(ours, ref, text, True)
    assert ours.decode(ids) == ref.decode(ids, skip_special_tokens=False)


def test_vocab_surface(pair):
    ours, ref = pair
    vocab = ref.get_vocab(with_added_tokens=True)
    assert ours.vocab_size == max(vocab.values()) + 1
    for token, token_id in vocab.items():
        assert ours.token_to_id(token) == token_id
    assert ours.special_ids == frozenset(i for i, t in ref.get_added_tokens_decoder().items() if t.special)


# ---------------------------------------------------------------------- load-time behaviour
def _base_spec():
    return json.loads(_pre_tokenizer_zoo(P.WhitespaceSplit()).to_str())


@pytest.mark.parametrize("stage,spec", [
    ("normalizer", {"type": "NoSuchNormalizer"}),
    ("pre_tokenizer", {"type": "NoSuchPreTokenizer"}),
    ("post_processor", {"type": "NoSuchProcessor"}),
    ("decoder", {"type": "NoSuchDecoder"}),
    ("model", {"type": "NoSuchModel", "vocab": {}}),
    ("pre_tokenizer", {"type": "Split", "pattern": {"String": "x"}, "behavior": "Sideways", "invert": False}),
])
def test_unknown_components_fail_at_load(stage, spec):
    full = _base_spec()
    full[stage] = spec
    with pytest.raises(UnsupportedComponent, match=spec.get("behavior", spec["type"])):
        Tokenizer.from_spec(full)


def test_added_token_json_id_is_ignored_when_content_is_new():
    """tokenizers numbers an added token whose content is not in the vocabulary after the vocabulary,
    whatever its JSON id says."""
    spec = _base_spec()
    size = len(spec["model"]["vocab"])
    spec["added_tokens"] = [
        {"id": size + 50, "content": "<gap>", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True},
        {"id": 3, "content": "<also>", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": False},
    ]
    ours = Tokenizer.from_spec(spec)
    ref = tokenizers.Tokenizer.from_str(json.dumps(spec))
    for text in ("a <gap> b <also>", "<gap><also>"):
        assert ours.encode(text) == ref.encode(text, add_special_tokens=False).ids
    assert ours.token_to_id("<gap>") == ref.token_to_id("<gap>") == size
    assert ours.token_to_id("<also>") == ref.token_to_id("<also>")
