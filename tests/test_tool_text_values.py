"""Tool-call formats whose arguments are tagged text values (qwen3_coder, glm45): the parser writes the
arguments JSON itself, typed by the request's tool schemas, and streams it as it goes; whole and
streamed results agree however the text is split.
"""

from __future__ import annotations

import gc
import json
import weakref

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.tool_formats import (SETTINGS, WS, assert_every_prefix, assert_split_invariant, cuts, dumps,
                                expected_content, json_values, names, nasty_text, summary)
from tokworker.parsers.tools import get_tool_parser


# ---- text-valued formats: the parser writes the JSON, typed by the tools' schemas ----

TYPED_VALUES = {
    "string": nasty_text,
    "integer": st.integers(-10**15, 10**15),
    "number": st.floats(allow_nan=False, allow_infinity=False),
    "boolean": st.booleans(),
    "object": st.dictionaries(nasty_text, json_values, max_size=3),
    "array": st.lists(json_values, max_size=3),
}


@st.composite
def typed_calls(draw, forbidden: tuple[str, ...], untyped=st.just(None)):
    """[(name, {key: (schema type or None, value)})] with values that fit the schema."""
    calls = []
    for function in draw(st.lists(names, min_size=1, max_size=3, unique=True)):  # one schema per name
        params = {}
        for key in draw(st.lists(names, max_size=4, unique=True)):
            kind = draw(st.sampled_from([*TYPED_VALUES, None]))
            value = draw(TYPED_VALUES[kind] if kind else untyped)
            if kind is None and value is None:
                continue
            assume(not any(f in json.dumps(value, ensure_ascii=False) or f in str(value) for f in forbidden))
            params[key] = (kind, value)
        calls.append((function, params))
    return calls


def tools_for(calls):
    """The OpenAI tools list describing the parameters' types (untyped ones left out)."""
    tools = {}
    for name, params in calls:
        properties = tools.setdefault(name, {})
        for key, (kind, _) in params.items():
            if kind:
                properties[key] = {"type": kind}
    return [{"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": props}}}
            for name, props in tools.items()]


def qwen3_coder(calls, before="", after=""):
    # Qwen3-Coder.jinja: '\n<tool_call>\n<function=' NAME '>\n', per argument '<parameter=' K '>\n' V '\n</parameter>\n'
    # (V: tojson for mappings and lists, else |string), then '</function>\n</tool_call>'
    def text(value):
        return json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) else str(value)
    body = "".join("\n<tool_call>\n<function=%s>\n%s</function>\n</tool_call>"
                   % (name, "".join("<parameter=%s>\n%s\n</parameter>\n" % (k, text(v)) for k, (_, v) in params.items()))
                   for name, params in calls)
    return (before.rstrip("\n") if before.strip(WS) else "") + body + after


def glm45(calls, before="", after=""):
    # GLM-4.6.jinja: '\n<tool_call>' NAME '\n', per argument '<arg_key>' K '</arg_key>\n<arg_value>' V
    # '</arg_value>\n' (V: strings as they are, else tojson), then '</tool_call>'
    def text(value):
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    body = "".join("\n<tool_call>%s\n%s</tool_call>"
                   % (name, "".join("<arg_key>%s</arg_key>\n<arg_value>%s</arg_value>\n" % (k, text(v))
                                    for k, (_, v) in params.items()))
                   for name, params in calls)
    return (before.rstrip("\n") if before.strip(WS) else "") + body + after


QWEN3_CODER_END = ("</parameter>", "<parameter=", "</function>")
TEXT_FORMATS = [
    # name, renderer, strings a value may not contain, strategy for values of parameters the schema omits
    ("qwen3_coder", qwen3_coder, QWEN3_CODER_END, nasty_text),
    ("glm45", glm45, ("</arg_value>",), st.none() | st.integers() | st.lists(st.integers(), max_size=2)),
]
TEXT_MARKERS = {"qwen3_coder": ["<tool_call>", "<function="], "glm45": ["<tool_call>"]}


@pytest.mark.parametrize("name,render,forbidden,untyped", TEXT_FORMATS, ids=[f[0] for f in TEXT_FORMATS])
@SETTINGS
@given(data=st.data(), before=nasty_text, after=nasty_text, chunking=cuts)
def test_text_valued_formats_round_trip(name, render, forbidden, untyped, data, before, after, chunking):
    calls = data.draw(typed_calls(forbidden, untyped))
    assume(not any(m in before + after for m in TEXT_MARKERS[name]))
    tools = tools_for(calls)
    text = render(calls, before, after)
    result = assert_split_invariant(name, text, tools, cuts=chunking)
    assert [n for n, _ in result["calls"]] == [n for n, _ in calls]
    for (_, streamed), (_, params) in zip(result["calls"], calls):
        expected = {k: v for k, (_, v) in params.items()}
        assert streamed == dumps(expected)  # exactly json.dumps of the typed values
    assert result["content"] == expected_content(before, after)


@pytest.mark.parametrize("name,render,forbidden,untyped", TEXT_FORMATS, ids=[f[0] for f in TEXT_FORMATS])
@settings(max_examples=8, deadline=None)
@given(data=st.data(), before=nasty_text)
def test_text_valued_formats_every_split_and_every_prefix(name, render, forbidden, untyped, data, before):
    calls = data.draw(typed_calls(forbidden, untyped))
    assume(not any(m in before for m in TEXT_MARKERS[name]))
    tools = tools_for(calls)
    text = render(calls, before)
    full = assert_split_invariant(name, text, tools, every_split=True)
    for part in assert_every_prefix(name, text, tools):
        assert len(part["calls"]) <= len(full["calls"])
        complete = max(len(part["calls"]) - 1, 0)
        assert part["calls"][:complete] == full["calls"][:complete]


@pytest.mark.parametrize("name", ["qwen3_coder", "glm45"])
@SETTINGS
@given(text=nasty_text, chunking=cuts)
def test_text_valued_formats_leave_other_text_intact(name, text, chunking):
    assume(not any(m in text for m in TEXT_MARKERS[name]))
    result = assert_split_invariant(name, text, cuts=chunking)
    assert result == {"content": text or None, "reasoning_content": None, "calls": []}


def test_string_values_stream_while_they_are_written():
    tools = [{"type": "function", "function": {"name": "write", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, "body": {"type": "string"}}}}}]
    parser = get_tool_parser("qwen3_coder", tools)
    head = summary(parser.feed("<tool_call>\n<function=write>\n<parameter=path>\na.py\n</parameter>\n"
                               "<parameter=body>\ndef f():\n    return 1 < 2\n"))
    assert head["calls"] == [("write", '{"path": "a.py", "body": "def f():\\n    return 1 < 2')]
    rest = parser.feed("</parameter>\n</function>\n</tool_call>") + parser.finish()
    assert all(d.content is None for d in rest)
    assert "".join(d.tool_calls[0].function.arguments for d in rest) == '"}'


def test_text_values_follow_the_schema():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "n": {"type": "integer"}, "x": {"type": ["number", "null"]}, "flag": {"type": "boolean"},
        "tags": {"type": "array"}, "opt": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "word": {"type": "string"}, "bad": {"type": "integer"}}}}}]
    text = ("<tool_call>\n<function=f>\n<parameter=n>\n42\n</parameter>\n<parameter=x>\nnull\n</parameter>\n"
            "<parameter=flag>\nTrue\n</parameter>\n<parameter=tags>\n[\"a\"]\n</parameter>\n<parameter=opt>\n"
            "None\n</parameter>\n<parameter=word>\n42\n</parameter>\n<parameter=bad>\nmany\n</parameter>\n"
            "<parameter=free>\n{\"k\": 1}\n</parameter>\n</function>\n</tool_call>")
    calls = assert_split_invariant("qwen3_coder", text, tools)["calls"]
    assert json.loads(calls[0][1]) == {"n": 42, "x": None, "flag": True, "tags": ["a"], "opt": None,
                                       "word": "42", "bad": "many", "free": '{"k": 1}'}
    glm = "<tool_call>f\n<arg_key>n</arg_key>\n<arg_value>7</arg_value>\n<arg_key>free</arg_key>\n<arg_value>{\"k\": 1}</arg_value>\n</tool_call>"
    assert json.loads(assert_split_invariant("glm45", glm, tools)["calls"][0][1]) == {"n": 7, "free": {"k": 1}}


TEXT_MALFORMED = [
    ("qwen3_coder", "<tool_call>\n<function=>\n</function>\n</tool_call>"),
    ("qwen3_coder", "<function=f no closing bracket"),
    ("qwen3_coder", "<tool_call>\nplain words\n</tool_call>"),
    ("glm45", "<tool_call> </tool_call>"),
    ("glm45", "<tool_call>"),
]


@pytest.mark.parametrize("name,text", TEXT_MALFORMED)
def test_text_valued_malformed_openings_are_content(name, text):
    result = assert_split_invariant(name, text, every_split=True)
    assert result == {"content": text, "reasoning_content": None, "calls": []}


def test_text_valued_junk_inside_a_call_ends_it_cleanly():
    text = "<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>1</arg_value>\nsurprise</tool_call>"
    result = assert_split_invariant("glm45", text, every_split=True)
    assert result["calls"] == [("f", '{"a": 1}')] and result["content"] == "surprise</tool_call>"
    cut = assert_split_invariant("qwen3_coder", "<function=f>\n<parameter=a>\n1\n</parameter>\n", every_split=True)
    assert cut["calls"] == [("f", '{"a": "1"}')]  # cut between parameters: the object closes there


def test_text_values_cut_off_keep_what_was_written():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "n": {"type": "integer"}, "s": {"type": "string"}}}}}]
    typed = assert_split_invariant("qwen3_coder", "<function=f>\n<parameter=n>\n4", tools, every_split=True)
    assert typed["calls"] == [("f", '{"n": 4')] and typed["content"] is None
    text = assert_split_invariant("glm45", "<tool_call>f\n<arg_key>s</arg_key>\n<arg_value>abc", tools, every_split=True)
    assert text["calls"] == [("f", '{"s": "abc')] and text["content"] is None


FREED_STREAMS = {
    # id: (format, text fed a character at a time), ending the stream in each of the text-valued modes
    "qwen3_coder-whole": ("qwen3_coder", "<tool_call>\n<function=f>\n<parameter=n>\n4\n</parameter>\n"
                                         "<parameter=s>\nab\n</parameter>\n</function>\n</tool_call> after"),
    "qwen3_coder-closing": ("qwen3_coder", "<tool_call>\n<function=f>\n<parameter=n>\n4\n</parameter>\n</function>\n"),
    "qwen3_coder-value": ("qwen3_coder", "<function=f>\n<parameter=s>\nhalf a val"),
    "qwen3_coder-params": ("qwen3_coder", "<function=f>\n<parameter=n>\n4\n</parameter>\n<param"),
    "glm45-whole": ("glm45", "<tool_call>f\n<arg_key>n</arg_key>\n<arg_value>4</arg_value>\n<arg_key>s</arg_key>\n"
                             "<arg_value>ab</arg_value>\n</tool_call> after"),
    "glm45-value": ("glm45", "<tool_call>f\n<arg_key>s</arg_key>\n<arg_value>half a val"),
    "glm45-params": ("glm45", "<tool_call>f\n<arg_key>n</arg_key>\n<arg_value>4</arg_value>\n<arg_k"),
}


@pytest.mark.parametrize("name,text", FREED_STREAMS.values(), ids=FREED_STREAMS)
def test_text_valued_parser_is_freed_without_the_cycle_collector(name, text):
    """The parameter loop keeps no bound method where finish() cannot drop it: a finished parser is
    freed by refcounting alone, whichever mode the stream ended in."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "n": {"type": "integer"}, "s": {"type": "string"}}}}}]
    gc.disable()
    try:
        parser = get_tool_parser(name, tools)
        ref = weakref.ref(parser)
        deltas = [d for piece in text for d in parser.feed(piece)] + parser.finish()
        assert summary(deltas)["calls"][0][0] == "f"
        del parser
        assert ref() is None
    finally:
        gc.enable()
