"""Reasoning ends where the model ends it, through TextStream on the real Qwen3 vocabulary: a tool call
opened inside a think block the model never closed becomes a tool call, in Qwen3.5's XML format (qwen3_coder)
and Qwen3's hermes JSON alike (tests/test_reasoning_tool_end.py has the real templates' shapes); a prompt
that ends inside an open block (a prefill) starts the stream in reasoning; every grouping of the ids gives
what the whole-text path (reasoning parser, then tool parser) gives."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.test_stream_state import qwen, run, splits, streams_alike
from tokworker.parsers.reasoning import get_reasoning_parser
from tokworker.parsers.tools import get_tool_parser
from tokworker.protocol.deltas import StreamParams

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
PROMPT = "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<think>\n"
QWEN35 = ("The user wants the weather.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
          "</parameter>\n</function>\n</tool_call><|im_end|>")


@pytest.fixture(scope="module")
def tok():
    return qwen()[0]


def whole(text: str, reasoning_name: str, tool_name: str, prompt: str | None = None):
    """The whole-text path: reasoning split first (with the tool parser's openings), then the calls."""
    tools = get_tool_parser(tool_name, TOOLS)
    reasoning, content = get_reasoning_parser(reasoning_name, prompt_text=prompt, tool_parser=tools).parse(text)
    content, calls = get_tool_parser(tool_name, TOOLS).parse(content or "")
    return reasoning, content, [(c["function"]["name"], c["function"]["arguments"]) for c in calls]


def test_a_qwen35_call_in_an_unclosed_think_block_is_a_call_in_every_grouping(tok):
    ids = tok.encode(QWEN35)
    params = StreamParams(reasoning_parser="qwen3", tool_parser="qwen3_coder", tools=TOOLS)
    content, reasoning, calls, end = streams_alike(tok, params, ids, prompt_ids=tok.encode(PROMPT))
    assert reasoning == "The user wants the weather." and content == ""
    assert calls == {"0": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    assert end == ["tool_calls", None, False]
    assert whole(tok.decode(ids, skip_special_tokens=True), "qwen3", "qwen3_coder", PROMPT) == \
        ("The user wants the weather.", None, [("get_weather", '{"city": "Paris"}')])


CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
QWEN3_TWICE = f"I could call {CALL} but the city comes first.\n</think>\n\nChecking.\n{CALL}<|im_end|>"


def test_a_qwen3_call_in_the_think_block_is_a_call_in_every_grouping(tok):
    """Qwen3's <tool_call> inside its open block ends the block there: that call is made, the text after it is
    content, the late </think> is dropped, and the call after it is made too."""
    ids = tok.encode(QWEN3_TWICE)
    params = StreamParams(reasoning_parser="qwen3", tool_parser="hermes", tools=TOOLS)
    content, reasoning, calls, end = streams_alike(tok, params, ids, prompt_ids=tok.encode(PROMPT))
    assert reasoning == "I could call" and content == "but the city comes first.\n\n\nChecking."
    assert calls == {str(i): {"name": "get_weather", "arguments": '{"city": "Paris"}'} for i in range(2)}
    assert end == ["tool_calls", None, False]
    assert whole(tok.decode(ids, skip_special_tokens=True), "qwen3", "hermes", PROMPT) == \
        (reasoning, content, [("get_weather", '{"city": "Paris"}')] * 2)


def test_a_prefill_inside_an_open_block_continues_the_reasoning(tok):
    prompt = PROMPT + "The user is asking for"
    ids = tok.encode(" the weather in Paris.\n</think>\n\nIt is sunny.<|im_end|>")
    for kwargs in ({"prompt_ids": tok.encode(prompt)}, {"prompt_text": prompt}):
        (content, reasoning, _, end), updates = run(tok, StreamParams(reasoning_parser="qwen3"), [[i] for i in ids],
                                                    **kwargs)
        assert (reasoning, content) == (" the weather in Paris.", "It is sunny.")
        assert all("</think>" not in (d.content or "") for u in updates for d in u.deltas)


PIECES = ["<think>\n", "plan it.\n", "</think>\n\n", "Sure. ", "\n",
          '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
          "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
          "<tool_call>", "</tool_call>", " 日本", "{"]


@pytest.mark.parametrize("tool_name", ["hermes", "qwen3_coder"])
def test_streams_agree_with_the_whole_text_path(tok, tool_name):
    ref = qwen()[1]
    eos = tok.token_to_id(tok.eos_token)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.sampled_from(PIECES), max_size=7), st.lists(st.integers(0, 1000), max_size=6),
           st.sampled_from([None, PROMPT, PROMPT[:-len("<think>\n")]]))
    def check(pieces, cuts, prompt):
        ids = ref.encode("".join(pieces), add_special_tokens=False).ids + [eos]
        params = StreamParams(reasoning_parser="qwen3", tool_parser=tool_name, tools=TOOLS)
        results = {json.dumps(run(tok, params, steps, prompt_text=prompt)[0]) for steps in splits(ids, cuts)}
        assert len(results) == 1
        content, reasoning, calls, _ = json.loads(results.pop())
        expected = whole(ref.decode(ids, skip_special_tokens=True), "qwen3", tool_name, prompt)
        assert (reasoning or None, content or None, [(c["name"], c["arguments"]) for c in calls.values()]) == \
            expected

    check()
