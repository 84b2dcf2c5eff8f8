"""openai: gpt-oss's harmony channels, one grammar for reasoning, content and calls (messages to
functions.NAME); whole and streamed results agree however the text is split, on text rendered the way the
template writes it.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.tool_formats import (SETTINGS, WS, arguments, assert_every_split_and_prefix, assert_split_invariant, cuts,
                                dumps, json_scalars, names, nasty_text, whole)


def harmony(thinking, calls, final, recipient_in_role=False):
    # openai-gpt-oss-120b.jinja: '<|start|>assistant<|channel|>analysis<|message|>' T '<|end|>', calls as
    # '<|start|>assistant to=functions.' NAME '<|channel|>commentary json<|message|>' ARGS '<|call|>' (the
    # model also writes '<|channel|>commentary to=functions.NAME <|constrain|>json'), final as
    # '<|start|>assistant<|channel|>final<|message|>' C '<|return|>'. The prompt ends with '<|start|>assistant'.
    text = "<|channel|>analysis<|message|>%s<|end|>" % thinking
    for name, args in calls:
        if recipient_in_role:
            text += "<|start|>assistant to=functions.%s<|channel|>commentary json<|message|>%s<|call|>" % (name, dumps(args))
        else:
            text += "<|start|>assistant<|channel|>commentary to=functions.%s <|constrain|>json<|message|>%s<|call|>" % (name, dumps(args))
    return text + "<|start|>assistant<|channel|>final<|message|>%s<|return|>" % final


HARMONY_MARKERS = ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>", "<|constrain|>"]


@SETTINGS
@given(thinking=nasty_text, calls=st.lists(st.tuples(names, arguments), max_size=2), final=nasty_text,
       in_role=st.booleans(), chunking=cuts)
def test_harmony_round_trip(thinking, calls, final, in_role, chunking):
    assume(not any(m in thinking + final for m in HARMONY_MARKERS))
    text = harmony(thinking, calls, final, in_role)
    result = assert_split_invariant("openai", text, cuts=chunking)
    assert result["reasoning_content"] == (thinking or None)
    assert result["calls"] == [(name, dumps(args)) for name, args in calls]
    assert result["content"] == ((final if not calls else final.lstrip(WS)) or None if final.strip(WS) or not calls else None)


@settings(max_examples=8, deadline=None)
@given(thinking=nasty_text, calls=st.lists(st.tuples(names, st.dictionaries(names, json_scalars, max_size=2)),
                                            min_size=1, max_size=2))
def test_harmony_every_split_and_every_prefix(thinking, calls):
    assume(not any(m in thinking for m in HARMONY_MARKERS))
    assert_every_split_and_prefix("openai", harmony(thinking, calls, "ok"))


@pytest.mark.parametrize("text,expected", [
    ("plain answer, no channels", {"content": "plain answer, no channels"}),
    ("<|channel|>commentary<|message|>Checking now.<|end|>", {"content": "Checking now."}),
    ("<|channel|>analysis<|message|>think<|end|><|start|>assistant to=browser.search<|channel|>analysis"
     "<|message|>{\"q\": 1}<|call|>", {"reasoning_content": "think{\"q\": 1}"}),
    ("<|channel|>analysis<|message|>cut off <|chan", {"reasoning_content": "cut off <|chan"}),  # never a marker now
    ("<|channel|><|channel|>final<|message|>x", {"content": "<|channel|>x"}),
    ("<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": yes}<|call|>",
     {"calls": [("f", '{"a": ')], "content": "yes}"}),
    ("<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": tru",
     {"calls": [("f", '{"a": tru')]}),  # cut off: keeps the valid prefix
])
def test_harmony_cases(text, expected):
    result = assert_split_invariant("openai", text, every_split=True)
    assert result == {"content": None, "reasoning_content": None, "calls": [], **expected}


HARMONY_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


@pytest.mark.parametrize("header", ["<|channel|>commentary to=get_weather <|constrain|>json<|message|>",
                                    "<|start|>assistant to=get_weather<|channel|>commentary json<|message|>"])
def test_harmony_recipient_naming_a_declared_tool_is_a_call(header):
    text = "<|channel|>analysis<|message|>Need it.<|end|>" + header + '{"city": "Paris"}<|call|>'
    result = assert_split_invariant("openai", text, HARMONY_TOOLS, every_split=True)
    assert result == {"content": None, "reasoning_content": "Need it.", "calls": [("get_weather", '{"city": "Paris"}')]}
    # undeclared recipients stay the model's own work (built-in tools): reasoning, as before
    other = whole("openai", text.replace("get_weather", "browser.search"), HARMONY_TOOLS)
    assert other["calls"] == [] and other["reasoning_content"] == 'Need it.{"city": "Paris"}'
