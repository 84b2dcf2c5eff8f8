"""Helpers for the tool-parser tests: render calls the way each model's chat template writes them,
stream text through a parser in arbitrary pieces, and check every delta against OpenAI's client types.

The format strings are small literals taken from the real templates in ../shared/fixtures/chat_templates
(named next to each renderer); the templates themselves are not copied.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal

import msgspec
from hypothesis import HealthCheck, settings
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
                assert isinstance(part.id, str) and part.id  # each format's own shape: test_tool_parsers_fixture.py
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
