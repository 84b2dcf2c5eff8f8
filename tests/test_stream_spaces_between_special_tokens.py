"""spaces_between_special_tokens=True (OpenAI's and vLLM's request default) streams exactly what
transformers' fast tokenizers decode with it: no space is written around added tokens, on every real
vocabulary and every split of the ids, with and without skip_special_tokens."""

from __future__ import annotations

import functools

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.cuts import cut_at
from tests.test_detokenizer import VOCABS, load, stream
from tokworker.protocol.deltas import StreamParams
from tokworker.stream.state import TextStream

transformers = pytest.importorskip("transformers")

TEXT = ('<think>\nplan\n</think>\n\n<tool_call>\n{"a": 1}\n</tool_call> 日本 <|im_end|>x<|endoftext|>'
        "<｜Assistant｜>y[INST]z</s>w[SEP] v")


@functools.lru_cache(maxsize=None)
def fast(name):
    """transformers' fast tokenizer on the very pipeline the reference `tokenizers` object holds."""
    return transformers.PreTrainedTokenizerFast(tokenizer_object=load(name)[1])


@pytest.mark.slow  # a sweep of several seconds
@pytest.mark.parametrize("name", VOCABS)
def test_streamed_text_is_transformers_decode_with_the_flag(name):
    tok, ref = load(name)
    oracle = fast(name)
    base = ref.encode(TEXT, add_special_tokens=False).ids
    added = sorted(set(tok.added_tokens.values()))[:24]

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.one_of(st.sampled_from(base), st.sampled_from(added)), max_size=24),
           st.lists(st.integers(0, 100), max_size=6), st.booleans())
    def check(ids, cuts, skip):
        expected = oracle.decode(ids, skip_special_tokens=skip, spaces_between_special_tokens=True)
        assert expected == oracle.decode(ids, skip_special_tokens=skip, spaces_between_special_tokens=False)
        for steps in (cut_at(ids, cuts), [[i] for i in ids]):
            text, _ = stream(tok, steps, skip_special_tokens=skip, spaces_between_special_tokens=True)
            assert text == expected

    check()


def test_the_default_request_streams_what_transformers_decodes():
    """StreamParams' default is vLLM's (True), and a whole stream through TextStream keeps the one-lookup
    path: the same text as decode, with parsers' marker tokens kept."""
    tok, ref = load("qwen3_dir")
    assert StreamParams().spaces_between_special_tokens is True
    ids = ref.encode("<think>\nplan\n</think>\n\nanswer<tool_call>", add_special_tokens=False).ids
    stream_ = TextStream(tok, StreamParams())
    assert stream_._detok.texts is not None  # the flag does not force the slow windowed path
    text = "".join(d.content for step in ids for d in stream_.push([step]).deltas)
    assert text == fast("qwen3_dir").decode(ids, spaces_between_special_tokens=True)
