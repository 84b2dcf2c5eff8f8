"""tiktoken rank files (Qwen, Llama 3, cl100k, o200k) against tiktoken itself, and Llama 3's BOS post-processor."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

tiktoken = pytest.importorskip("tiktoken")
from tiktoken.load import load_tiktoken_bpe  # noqa: E402

from tests.realdata import vocabulary  # noqa: E402
from tests.tokenizer_corpus import CORPUS  # noqa: E402
from tokworker.tokenizer import Tokenizer, loaders  # noqa: E402

CASES = {
    "qwen_tiktoken": (loaders.QWEN_PATTERN, loaders.qwen_special_tokens, None),
    "llama3_tiktoken": (loaders.LLAMA3_PATTERN, loaders.llama3_special_tokens, "<|begin_of_text|>"),
    "cl100k_tiktoken": (loaders.CL100K_PATTERN, lambda: dict(loaders.CL100K_SPECIAL_TOKENS), "<|endoftext|>"),
    "o200k_tiktoken": (loaders.O200K_PATTERN, lambda: dict(loaders.O200K_SPECIAL_TOKENS), None),
}

# Cyrillic and other scripts where replaying merges (one split per token) diverges from tiktoken on Llama 3.
EXTRA = [
    "Съешь же ещё этих мягких французских булок, да выпей чаю. Широкая электрификация южных губерний",
    "Здравствуйте, меня зовут Алексей; я программист из Новосибирска. Привет-привет!",
    "Ελληνικά: Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Türkçe: Pijamalı hasta yağız şoföre çabucak güvendi.",
    "Tiếng Việt có dấu: Nhân dân Việt Nam. Polski: Zażółć gęślą jaźń. Čeština: Příliš žluťoučký kůň",
]


@pytest.fixture(scope="module", params=list(CASES))
def pair(request):
    pattern, specials, bos = CASES[request.param]
    path = vocabulary(request.param)
    special_tokens = specials()
    ours = Tokenizer.from_tiktoken(path, pattern, special_tokens, bos_token=bos)
    ref = tiktoken.Encoding(request.param, pat_str=pattern, mergeable_ranks=load_tiktoken_bpe(str(path)),
                            special_tokens=special_tokens)
    return ours, ref


def test_corpus_ids_and_decode(pair):
    ours, ref = pair
    for text in CORPUS + EXTRA:
        ids = ref.encode(text, allowed_special="all")
        assert ours.encode(text) == ids, text
        assert ours.decode(ids) == ref.decode(ids), text


def test_one_long_document(pair):
    ours, ref = pair
    text = "\n\n".join(CORPUS + EXTRA) * 4
    assert ours.encode(text) == ref.encode(text, allowed_special="all")


def test_every_token_encodes_to_itself_or_like_tiktoken(pair):
    """Each vocabulary token's own text (sampled), the sharpest check of the merge table."""
    ours, ref = pair
    table = ours.vocab_bytes()
    for token_id in range(0, len(table), 97):
        data = table[token_id]
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        assert ours.encode(text, split_special_tokens=True) == ref.encode_ordinary(text), (token_id, text)


@settings(max_examples=120, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), max_codepoint=0x1FFFF), max_size=50))
def test_hypothesis_ordinary_text(pair, text):
    ours, ref = pair
    assert ours.encode(text, split_special_tokens=True) == ref.encode_ordinary(text)


def test_specials_and_bos(pair):
    ours, ref = pair
    for name, token_id in ref._special_tokens.items():
        assert ours.token_to_id(name) == token_id
        assert token_id in ours.special_ids
    text = "hi there"
    bos = [ours.bos_token_id] if ours.bos_token is not None else []    # Qwen has no BOS
    assert ours.encode(text, add_special_tokens=True) == bos + ref.encode_ordinary(text)
    assert ours.vocab_size == ref.max_token_value + 1


def test_cl100k_id_gaps_are_kept():
    """cl100k's special ids have gaps; tiktoken keeps them as given (tokenizer.json's renumbering does not apply)."""
    ours = Tokenizer.from_tiktoken(vocabulary("cl100k_tiktoken"), loaders.CL100K_PATTERN, loaders.CL100K_SPECIAL_TOKENS)
    assert ours.encode("<|endofprompt|>") == [100276]
    assert ours.id_to_token(100270) is None
    assert ours.decode([100270]) == ""
    assert ours.vocab_bytes()[100270] == b""


def test_malformed_rank_file(tmp_path):
    path = tmp_path / "bad.tiktoken"
    path.write_bytes(b"IQ== 0\nnot-base64!! 1\n")
    with pytest.raises(ValueError, match="bad.tiktoken:2"):
        Tokenizer.from_tiktoken(path, loaders.QWEN_PATTERN, {})
