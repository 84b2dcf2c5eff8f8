"""Helpers for the tool-parser tests, which are grouped by the shape of the format they check (JSON calls,
text-valued arguments, invokes, pythonic, harmony): stream text through a parser in arbitrary pieces,
check every delta against OpenAI's client types, and the properties every format of a shape must hold
(one body each, here): its renderer's calls round-trip with the text around them, whole, streamed at
every split and ended at every prefix.

The format strings each shape file renders with are small literals taken from the real templates in
../shared/fixtures/chat_templates (named next to each renderer); the templates themselves are not copied.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
from dataclasses import dataclass
from typing import Any, Callable

import msgspec
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionChunk

from tokworker.parsers.tools import get_tool_parser


# TOOL_PARSER_EXAMPLES=1000 for a deep run; the default keeps the files well under a minute.
EXAMPLES = int(os.environ.get("TOOL_PARSER_EXAMPLES", 60))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text that looks like markup without being a call: tag prefixes, lone brackets, marker fragments.
NASTY = ["<", ">", "</", "<tool", "<tool_call", "tool_call>", "</tool_call>", "<function", "<function=x",
         "<parameter", "</parameter>", "<arg_key>", "<|", "<|python_tag", "<|tool_call", "<|channel|",
         "<|message", "[", "]", "[TOOL", "[TOOL_CALLS", "[ARGS", "{", "}", "(", ")", '"', "'", "\\", ";",
         ",", ":", "=", "```", "json", "\n", " ", "  ", "\t", "é", "日本", "🙂", "<｜tool▁call", "<｜tool▁calls",
         "｜>", "a", "the weather", "x < y", "if a<b:", "null", "None", "true", "functions.f"]

fragments = st.sampled_from(NASTY) | st.text(max_size=4)
nasty_text = st.lists(fragments, max_size=12).map("".join)
names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,15}", fullmatch=True)
json_scalars = (st.none() | st.booleans() | st.integers(-10**12, 10**12)
                | st.floats(allow_nan=False, allow_infinity=False) | nasty_text)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(nasty_text, inner, max_size=3), max_leaves=8)
arguments = st.dictionaries(nasty_text, json_values, max_size=4)
calls_lists = st.lists(st.tuples(names, arguments), min_size=1, max_size=3)
small_calls = st.lists(st.tuples(names, st.dictionaries(nasty_text, json_scalars, max_size=2)),
                      min_size=1, max_size=2)
cuts = st.lists(st.integers(1, 12), min_size=1, max_size=6)


WS = " \t\n\r"  # JSON's whitespace: what the parsers treat as formatting around calls


def expected_content(before: str, after: str) -> str | None:
    """Whitespace next to a call is formatting: the content a client should see around calls."""
    head = before.rstrip(WS)
    tail = (after if head else after.lstrip(WS)) if after.strip(WS) else ""
    return (head + tail) or None



def dumps(value) -> str:
    """transformers' tojson: json.dumps keeping non-ASCII text."""
    return json.dumps(value, ensure_ascii=False)


def stream(name: str, chunks: list[str], tools=None) -> list:
    parser = get_tool_parser(name, tools)
    deltas = []
    for chunk in chunks:
        deltas += parser.feed(chunk)
    return deltas + parser.finish()


def summary(deltas: list, validate: bool = True) -> dict:
    """Deltas -> what a client assembles: content, reasoning, [(name, arguments)], checking OpenAI's
    streaming rules on the way: one kind per delta, the first delta of call i carries id, type, name and
    the arguments so far ("" or a first fragment), later ones only argument fragments, and indexes go
    0, 1, 2, ..."""
    content, reasoning, calls = [], [], []
    for delta in deltas:
        chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
                 "choices": [{"index": 0, "delta": msgspec.to_builtins(delta), "finish_reason": None}]}
        if validate:
            ChatCompletionChunk.model_validate(chunk)
        kinds = [delta.content is not None, delta.reasoning_content is not None, delta.tool_calls is not None]
        assert sum(kinds) == 1, delta
        if delta.content is not None:
            assert delta.content, "empty content delta"
            content.append(delta.content)
        elif delta.reasoning_content is not None:
            assert delta.reasoning_content, "empty reasoning delta"
            reasoning.append(delta.reasoning_content)
        else:
            assert len(delta.tool_calls) == 1
            part = delta.tool_calls[0]
            if part.id is not None:
                assert part.index == len(calls), (part.index, len(calls))
                assert isinstance(part.id, str) and part.id  # each format's own shape: test_tool_call_ids.py
                assert part.type == "function" and part.function.name and part.function.arguments is not None
                calls.append([part.function.name, part.function.arguments])
            else:
                assert part.index == len(calls) - 1 and part.type is None
                assert part.function.name is None and part.function.arguments
                calls[-1][1] += part.function.arguments
    return {"content": "".join(content) or None, "reasoning_content": "".join(reasoning) or None,
            "calls": [tuple(call) for call in calls]}


def whole(name: str, text: str, tools=None) -> dict:
    message = get_tool_parser(name, tools).parse_message(text)
    content, calls = get_tool_parser(name, tools).parse(text)
    assert content == message["content"]
    assert [c["function"] for c in calls] == [c["function"] for c in message["tool_calls"]]
    for call in calls:
        assert call["type"] == "function" and isinstance(call["id"], str) and call["id"]
    return {"content": message["content"], "reasoning_content": message["reasoning_content"],
            "calls": [(c["function"]["name"], c["function"]["arguments"]) for c in calls]}


def split_at(text: str, cuts) -> list[str]:
    """text cut at the given sizes (cycled), the last piece taking the rest."""
    pieces, i, sizes = [], 0, list(cuts) or [len(text) or 1]
    k = 0
    while i < len(text):
        size = max(1, sizes[k % len(sizes)])
        pieces.append(text[i:i + size])
        i += size
        k += 1
    return pieces


def assert_split_invariant(name: str, text: str, tools=None, cuts=(), every_split=False) -> dict:
    """Whole-text parse == streamed in one piece == one character at a time == cut at `cuts`
    (== cut at every single position when every_split). Returns the whole-text result."""
    expected = whole(name, text, tools)
    assert summary(stream(name, [text], tools)) == expected
    assert summary(stream(name, list(text), tools)) == expected
    if cuts:
        assert summary(stream(name, split_at(text, cuts), tools)) == expected
    if every_split:
        for i in range(1, len(text)):
            assert summary(stream(name, [text[:i], text[i:]], tools)) == expected, i
    return expected


def assert_every_split_and_prefix(name: str, text: str, tools=None, arguments_grow: bool = True) -> dict:
    """Cut the text at every position (two pieces), and end the stream at every position: streamed and
    whole always agree and complete calls never change; with arguments_grow (JSON arguments, streamed as
    written) a cut-off call keeps a prefix of its arguments. Returns the whole-text result."""
    full = assert_split_invariant(name, text, tools, every_split=True)
    for part in assert_every_prefix(name, text, tools):
        assert len(part["calls"]) <= len(full["calls"])
        for (name_p, args_p), (name_f, args_f) in zip(part["calls"], full["calls"]):
            assert name_p == name_f and (args_f.startswith(args_p) or not arguments_grow)
        complete = max(len(part["calls"]) - 1, 0)
        assert part["calls"][:complete] == full["calls"][:complete]
    return full


def assert_every_prefix(name: str, text: str, tools=None) -> list[dict]:
    """Feed text one character at a time and, at every position, end the stream there (on a copy of
    the parser): the result equals the whole-text parse of that prefix. Returns the results."""
    parser = get_tool_parser(name, tools)
    deltas, results = [], []
    for i in range(len(text) + 1):
        if i:
            deltas += parser.feed(text[i - 1])
        ended = copy.deepcopy(parser)
        got = summary(deltas + ended.finish(), validate=False)
        assert got == whole(name, text[:i], tools), (i, text[:i])
        results.append(got)
    return results


@contextlib.contextmanager
def time_limit(seconds: int):
    """Fail (rather than hang the suite) if a parser stops making progress."""
    def expire(*_):
        raise TimeoutError(f"parser took over {seconds} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


SOUP_TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
    "a": {"type": "integer"}}}}}]


def assert_soup_streams_like_whole(name: str, text: str, chunking, every_prefix_below: int = 100) -> dict:
    """Marker soup: no hang, no crash, streamed == whole at every cut (and every prefix of a short text),
    every call named. Returns the whole-text result."""
    with time_limit(10):
        result = assert_split_invariant(name, text, SOUP_TOOLS, cuts=chunking)
        if len(text) < every_prefix_below:
            assert_every_prefix(name, text, SOUP_TOOLS)
    for call_name, _ in result["calls"]:
        assert call_name
    return result


# ---- the properties of every format of a shape ----

@dataclass(frozen=True)
class Format:
    """How a format's model writes calls, for the shape properties below. render(calls, before="", after="")
    -> the model's text; calls are [(name, arguments)] for JSON formats, [(name, {key: (type, value)})]
    (typed_calls) for text-valued ones."""
    name: str
    render: Callable[..., str]
    markers: tuple[str, ...] = ()  # text around the calls may not hold these
    before: bool = True  # text may come before the calls (else the calls open the output)
    verbatim: bool = True  # JSON arguments stream as the text the model wrote (else they are equal as JSON)
    most: int = 3  # the calls one answer holds
    fits: Callable[[str, str], bool] | None = None  # (before, after) -> whether that text around suits it
    message: Callable[[str, str], tuple] | None = None  # (before, after) -> (content, reasoning), when not
    forbidden: tuple[str, ...] = ()  # text-valued: strings a value may not hold
    untyped: Any = None  # text-valued: a strategy for values of parameters the schema leaves untyped
    edges: bool = False  # text-valued: one newline at a value's edges is formatting
    id: str = ""  # the test id, when one format has two renderers

    def __str__(self):
        return self.id or self.name


def _around(fmt: Format, before: str, after: str) -> str:
    before = before if fmt.before else ""
    assume(not any(m in before + after for m in fmt.markers))
    assume(fmt.fits is None or fmt.fits(before, after))
    return before


def _message(fmt: Format, before: str, after: str) -> tuple:
    return fmt.message(before, after) if fmt.message else (expected_content(before, after), None)


def check_json_round_trip(fmt: Format, calls, before: str, after: str, chunking) -> None:
    """The calls come back (as written when verbatim) and the text around them is the content."""
    before = _around(fmt, before, after)
    text = fmt.render(calls, before, after)
    result = assert_split_invariant(fmt.name, text, cuts=chunking)
    calls = calls[:fmt.most]
    assert [n for n, _ in result["calls"]] == [n for n, _ in calls], text
    for (_, streamed), (_, args) in zip(result["calls"], calls):
        assert streamed == dumps(args) if fmt.verbatim else json.loads(streamed) == args
    assert (result["content"], result["reasoning_content"]) == _message(fmt, before, after), text


def check_json_every_split(fmt: Format, calls, before: str, arguments_grow: bool = True) -> None:
    before = _around(fmt, before, "")
    full = assert_every_split_and_prefix(fmt.name, fmt.render(calls, before), arguments_grow=arguments_grow)
    assert [(n, json.loads(a)) for n, a in full["calls"]] == list(calls[:fmt.most])


def _text_calls(fmt: Format, data):
    calls = data.draw(typed_calls(fmt.forbidden, fmt.untyped))
    assume(not fmt.edges or all(not (isinstance(v, str) and (v[:1] == "\n" or v[-1:] == "\n"))
                                for _, params in calls for _, v in params.values()))
    return calls, tools_for(calls)


def check_text_round_trip(fmt: Format, data, before: str, after: str, chunking) -> None:
    """The typed values come back as json.dumps writes them, and the text around the calls is the content."""
    calls, tools = _text_calls(fmt, data)
    before = _around(fmt, before, after)
    text = fmt.render(calls, before, after)
    result = assert_split_invariant(fmt.name, text, tools, cuts=chunking)
    assert [n for n, _ in result["calls"]] == [n for n, _ in calls], text
    for (_, streamed), (_, params) in zip(result["calls"], calls):
        assert streamed == dumps({k: v for k, (_, v) in params.items()})
    assert (result["content"], result["reasoning_content"]) == _message(fmt, before, after), text


def check_text_every_split(fmt: Format, data, before: str) -> None:
    calls, tools = _text_calls(fmt, data)
    before = _around(fmt, before, "")
    full = assert_every_split_and_prefix(fmt.name, fmt.render(calls, before), tools, arguments_grow=False)
    assert [(n, json.loads(a)) for n, a in full["calls"]] == [(n, {k: v for k, (_, v) in p.items()}) for n, p in calls]


def json_shape_tests(formats: list[Format], calls=None, split_calls=None, arguments_grow: bool = True) -> tuple:
    """The two property tests of a JSON shape's formats (round trip with the text around, every split and
    prefix), for its test file to bind: `test_round_trip, test_every_split = json_shape_tests(FORMATS)`."""
    @pytest.mark.parametrize("fmt", formats, ids=str)
    @SETTINGS
    @given(calls=calls_lists if calls is None else calls, before=nasty_text, after=nasty_text, chunking=cuts)
    def round_trip(fmt, calls, before, after, chunking):
        check_json_round_trip(fmt, calls, before, after, chunking)

    @pytest.mark.parametrize("fmt", formats, ids=str)
    @settings(max_examples=8, deadline=None)
    @given(calls=small_calls if split_calls is None else split_calls, before=nasty_text)
    def every_split(fmt, calls, before):
        check_json_every_split(fmt, calls, before, arguments_grow)
    return round_trip, every_split


def text_shape_tests(formats: list[Format]) -> tuple:
    """The two property tests of a text-valued shape's formats, as json_shape_tests."""
    @pytest.mark.parametrize("fmt", formats, ids=str)
    @SETTINGS
    @given(data=st.data(), before=nasty_text, after=nasty_text, chunking=cuts)
    def round_trip(fmt, data, before, after, chunking):
        check_text_round_trip(fmt, data, before, after, chunking)

    @pytest.mark.parametrize("fmt", formats, ids=str)
    @settings(max_examples=6, deadline=None)
    @given(data=st.data(), before=nasty_text)
    def every_split(fmt, data, before):
        check_text_every_split(fmt, data, before)
    return round_trip, every_split


# ---- text-valued arguments: calls whose values fit the schema the request declares ----

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


def as_json_text(value) -> str:
    """How templates write a text value: a string as it is, anything else as JSON."""
    return value if isinstance(value, str) else dumps(value)


# ---- a real vocabulary: the model's text as token ids, pushed through TextStream ----

def assert_ids_stream_like_whole(tokenizer, name: str, text: str, tools=None) -> dict:
    """The text as the tokenizer's ids, through TextStream (detokenizer, special-token keeping, the tool
    parser) one id per engine step, in two steps cut at every id, and in one step: each gives the calls
    and content of the whole-text parse. Returns that parse."""
    from tests.test_stream_state import streams_alike
    from tokworker.protocol.deltas import StreamParams
    ids = tokenizer.encode(text)
    content, reasoning, calls, _ = streams_alike(tokenizer, StreamParams(tool_parser=name, tools=tools), ids)
    expected = whole(name, tokenizer.decode(ids), tools)
    assert (content or None, reasoning or None) == (expected["content"], expected["reasoning_content"])
    assert [(c["name"], c["arguments"]) for c in calls.values()] == expected["calls"]
    return expected


# the tools the format cases' calls are typed by
WEATHER_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "location": {"type": "string"}, "date": {"type": "string"}, "days": {"type": "integer"},
    "unit": {"type": "string", "enum": ["c", "f"]}}}}},
    {"type": "function", "function": {"name": "calculate_area", "parameters": {"type": "object", "properties": {
        "shape": {"type": "string"}, "dimensions": {"type": "object"}, "precision": {"type": "integer"}}}}}]
