"""Encoding in parts (Tokenizer.encode_parts / encode_run): runs cut where the pipeline cuts, encoded apart,
give exactly the ids of one encode, on every real vocabulary here and the bundled one, on the parity corpus.
Covers tokworker.tokenizer.parts."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

import tokworker
from tests.realdata import vocabulary
from tests.test_template_injection import load as load_real
from tests.tokenizer_corpus import CORPUS
from tokworker import Tokenizer

VOCABULARIES = ["bundled", "qwen3_dir", "deepseek", "llama3_tiktoken", "qwen_tiktoken", "cl100k_tiktoken",
                "mistral_v3_sp", "mistral_tekken", "bert_wordpiece"]


@functools.lru_cache(maxsize=None)
def load(name: str) -> Tokenizer:
    if name == "bundled":
        return Tokenizer.from_dir(Path(tokworker.__file__).parent / "data" / "default")
    if name == "mistral_tekken":
        return Tokenizer.from_tekken(vocabulary(name))
    if name == "bert_wordpiece":
        return Tokenizer.from_file(vocabulary(name))
    return load_real(name)


def _joined(tok: Tokenizer, runs) -> list[int]:
    tok._cache.clear()                # each run as a worker that never saw the others' words encodes it
    return [token_id for run in runs for token_id in tok.encode_run(run)]


@pytest.mark.parametrize("name", VOCABULARIES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(picks=st.lists(st.sampled_from(range(len(CORPUS))), min_size=1, max_size=6),
       glue=st.sampled_from(["", " ", "\n", "  ", "\n\n"]), parts=st.integers(1, 9))
@example(picks=list(range(len(CORPUS))), glue="\n", parts=7)
def test_runs_encoded_apart_give_the_ids_of_one_encode(name, picks, glue, parts):
    tok = load(name)
    text = glue.join(CORPUS[i] for i in picks)
    runs = tok.encode_parts(text, parts)
    assert 1 <= len(runs) <= parts
    assert _joined(tok, runs) == tok.encode(text)


@pytest.mark.parametrize("name", VOCABULARIES)
def test_added_tokens_and_literal_spans_cut_as_one_encode_does(name):
    """A prompt's control tokens are items of their own; with literal spans, control-token text inside a
    span stays ordinary text, as encode_with_literal_spans reads it."""
    tok = load(name)
    controls = [content for content in tok.added_tokens if not content.isspace()][:3]
    text = "".join(f"{control}{CORPUS[i % len(CORPUS)]} {control}" for i, control in enumerate(controls * 3))
    for parts in (1, 2, 5, 50):
        assert _joined(tok, tok.encode_parts(text, parts)) == tok.encode(text)
        spans = [(0, len(text) // 2)]
        assert _joined(tok, tok.encode_parts(text, parts, spans=spans)) == tok.encode_with_literal_spans(text, spans)


def test_parts_must_be_a_positive_count():
    tok = load("bundled")
    for parts in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="parts must be a positive int"):
            tok.encode_parts("text", parts)
    assert tok.encode_parts("", 4) == [[]]
