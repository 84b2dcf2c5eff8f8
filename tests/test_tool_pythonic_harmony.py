"""The pythonic format (a Python list of calls) and openai (gpt-oss harmony channels): whole and
streamed results agree however the text is split, on text rendered the way the templates write it.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.tool_formats import (SETTINGS, WS, arguments, assert_every_prefix, assert_split_invariant, cuts, dumps,
                                json_scalars, json_values, names, nasty_text)


# ---- pythonic: Python call syntax, converted per argument ----

def pythonic(calls, before="", after="", literal=repr):
    # vLLM's pythonic format (Llama 3.2/4 pythonic templates): '[' NAME '(' K '=' VALUE, ... ')' ', ' ... ']'
    return "[" + ", ".join("%s(%s)" % (name, ", ".join("%s=%s" % (k, literal(v)) for k, v in args.items()))
                           for name, args in calls) + "]" + after


@SETTINGS
@given(calls=st.lists(st.tuples(names, st.dictionaries(names, json_values, max_size=3)), min_size=1, max_size=3),
       after=nasty_text, chunking=cuts, literal=st.sampled_from([repr, dumps]))
def test_pythonic_round_trip(calls, after, chunking, literal):
    if literal is dumps:  # JSON spellings of the values, as some models write them
        calls = [(n, {k: v for k, v in a.items() if not _has_float(v)}) for n, a in calls]
    assume(not after.lstrip(WS).startswith((",", "]", "<|python_end|>")))
    text = pythonic(calls, after=after, literal=literal)
    result = assert_split_invariant("pythonic", text, cuts=chunking)
    assert result["calls"] == [(name, dumps(args)) for name, args in calls]
    assert result["content"] == (after.lstrip(WS) or None)


def _has_float(value):
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_has_float(v) for v in value.values())
    return isinstance(value, list) and any(_has_float(v) for v in value)


@settings(max_examples=8, deadline=None)
@given(calls=st.lists(st.tuples(names, st.dictionaries(names, json_scalars, max_size=2)), min_size=1, max_size=2))
def test_pythonic_every_split_and_every_prefix(calls):
    text = "<|python_start|>" + pythonic(calls) + "<|python_end|>"
    full = assert_split_invariant("pythonic", text, every_split=True)
    assert full == {"content": None, "reasoning_content": None, "calls": [(n, dumps(a)) for n, a in calls]}
    for part in assert_every_prefix("pythonic", text):
        complete = max(len(part["calls"]) - 1, 0)
        assert part["calls"][:complete] == full["calls"][:complete]


@pytest.mark.parametrize("text,calls,content", [
    ("Sure: [f(a=1)]", [], "Sure: [f(a=1)]"),  # calls only open the output
    ("[f(a=1 + 2)] tail", [("f", "{}")], "a=1 + 2)] tail"),  # not a literal: call ends, text kept
    ("[f(a=1), g(b=2)] done", [("f", '{"a": 1}'), ("g", '{"b": 2}')], "done"),
    ("[f(a={1, 2})]", [("f", "{}")], "a={1, 2})]"),  # a set has no JSON form
    ("[f(a=float('nan'))]", [("f", "{}")], "a=float('nan'))]"),
    ("[f(s='''a\"b''', t=r'\\d', u=(1,), v=null)]", [("f", '{"s": "a\\"b", "t": "\\\\d", "u": [1], "v": null}')], None),
    ("[]", [], "[]"),
    ("[f(a=1, b=\"cut off", [("f", '{"a": 1}')], 'b="cut off'),  # a value never sent is content
])
def test_pythonic_cases(text, calls, content):
    result = assert_split_invariant("pythonic", text, every_split=True)
    assert result["calls"] == calls and result["content"] == content


# ---- openai (gpt-oss harmony): channels, with calls as messages to functions.NAME ----

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
    text = harmony(thinking, calls, "ok")
    full = assert_split_invariant("openai", text, every_split=True)
    for part in assert_every_prefix("openai", text):
        complete = max(len(part["calls"]) - 1, 0)
        assert part["calls"][:complete] == full["calls"][:complete]


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
