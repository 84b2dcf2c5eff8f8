"""Tool-call parsers whose calls carry JSON arguments (hermes, llama3_json, mistral, deepseek_v3,
deepseek_v31, kimi_k2), and every format against marker soup: whole-text parse and streamed parse
agree however the text is split; calls come out in OpenAI's streaming shape (validated by the openai
client's own types); content keeps every character that is not part of a call.

Model text is rendered the way the real chat templates write calls (format literals next to each
renderer), from calls and content that hypothesis generates with the characters that break parsers:
"<", partial tags, quotes, backslashes, newlines, non-ASCII.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.tool_formats import (EXAMPLES, NASTY, SETTINGS, assert_every_prefix, assert_soup_streams_like_whole,
                                assert_split_invariant, calls_lists, cuts, dumps, expected_content, nasty_text,
                                small_calls, stream, summary, whole)
from tokworker.parsers.tools import TOOL_PARSERS, get_tool_parser


# ---- renderers, one per format, from the templates' literals ----

def hermes(calls, before="", after="", separators=(", ", ": ")):
    # Qwen-Qwen3-0.6B.jinja: '<tool_call>\n{"name": "' NAME '", "arguments": ' ARGS '}\n</tool_call>', '\n' between
    body = "\n".join('<tool_call>\n{"name": "%s", "arguments": %s}\n</tool_call>'
                     % (name, json.dumps(args, ensure_ascii=False, separators=separators))
                     for name, args in calls)
    return before + ("\n" if before else "") + body + after


def llama3_json(calls, before="", after="", python_tag=False):
    # Llama-3.3-70B-Instruct.jinja: '{"name": "' NAME '", ' '"parameters": ' ARGS '}'; vLLM joins several with ";"
    body = "; ".join('{"name": "%s", "parameters": %s}' % (name, dumps(args)) for name, args in calls)
    return ("<|python_tag|>" if python_tag else "") + body + after


def mistral_array(calls, before="", after=""):
    # Mistral-Nemo-Instruct-2407.jinja: "[TOOL_CALLS][" + function|tojson minus "}" + ', "id": "' ID '"}', ", " between, "]"
    items = ", ".join('{"name": "%s", "arguments": %s, "id": "a1b2c3d4e"}' % (name, dumps(args))
                      for name, args in calls)
    return before + "[TOOL_CALLS][" + items + "]" + after


def mistral_named(calls, before="", after=""):
    # Ministral-3-14B-Reasoning-2512.jinja / Devstral: '[TOOL_CALLS]' NAME '[ARGS]' ARGS, per call
    return before + "".join("[TOOL_CALLS]%s[ARGS]%s" % (name, dumps(args)) for name, args in calls) + after


def deepseek_v3(calls, before="", after=""):
    # vllm-examples-tool_chat_template_deepseekv3.jinja: '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' TYPE
    # '<｜tool▁sep｜>' NAME '\n```json\n' ARGS '\n```<｜tool▁call▁end｜>', later calls after '\n', then '<｜tool▁calls▁end｜>'
    body = "\n".join("<｜tool▁call▁begin｜>function<｜tool▁sep｜>%s\n```json\n%s\n```<｜tool▁call▁end｜>"
                     % (name, dumps(args)) for name, args in calls)
    return before + "<｜tool▁calls▁begin｜>" + body + "<｜tool▁calls▁end｜>" + after


def deepseek_v31(calls, before="", after=""):
    # deepseek-ai-DeepSeek-V3.1.jinja: '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' NAME '<｜tool▁sep｜>' ARGS
    # '<｜tool▁call▁end｜>', later calls directly, then '<｜tool▁calls▁end｜>'
    body = "".join("<｜tool▁call▁begin｜>%s<｜tool▁sep｜>%s<｜tool▁call▁end｜>" % (name, dumps(args))
                   for name, args in calls)
    return before + "<｜tool▁calls▁begin｜>" + body + "<｜tool▁calls▁end｜>" + after


def kimi_k2(calls, before="", after=""):
    # moonshotai-Kimi-K2.jinja: '<|tool_calls_section_begin|>' then per call '<|tool_call_begin|>'
    # 'functions.' NAME ':' IDX '<|tool_call_argument_begin|>' ARGS '<|tool_call_end|>', then '<|tool_calls_section_end|>'
    body = "".join("<|tool_call_begin|>functions.%s:%d<|tool_call_argument_begin|>%s<|tool_call_end|>"
                   % (name, i, dumps(args)) for i, (name, args) in enumerate(calls))
    return before + "<|tool_calls_section_begin|>" + body + "<|tool_calls_section_end|>" + after


DEEPSEEK_MARKERS = ["<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁calls▁end｜>"]
KIMI_MARKERS = ["<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_calls_section_end|>",
                "<|tool_call_argument_begin|>", "<|tool_call_end|>"]

# format name, renderer, whether content may precede the calls, markers that content must not contain
JSON_FORMATS = [
    ("hermes", hermes, True, ["<tool_call>"]),
    ("llama3_json", llama3_json, False, []),
    ("mistral", mistral_array, True, ["[TOOL_CALLS]"]),
    ("mistral", mistral_named, True, ["[TOOL_CALLS]"]),
    ("deepseek_v3", deepseek_v3, True, DEEPSEEK_MARKERS),
    ("deepseek_v31", deepseek_v31, True, DEEPSEEK_MARKERS),
    ("kimi_k2", kimi_k2, True, KIMI_MARKERS),
]
JSON_IDS = ["hermes", "llama3_json", "mistral_array", "mistral_named", "deepseek_v3", "deepseek_v31", "kimi_k2"]
MARKERS = {name: markers for name, _, _, markers in JSON_FORMATS}


def test_registry_names_and_unknown_name():
    for name in ("hermes", "llama3_json", "mistral"):
        assert name in TOOL_PARSERS
        assert not get_tool_parser(name).called
    with pytest.raises(ValueError, match="hermes"):
        get_tool_parser("no_such_format")
    with pytest.raises(ValueError):
        get_tool_parser("hermes", tools={"not": "a list"})
    with pytest.raises(ValueError, match="string name"):
        get_tool_parser("qwen3_coder", tools=[{"type": "function", "function": {"parameters": {}}}])


def test_held_text_is_bounded():
    """An opening that never completes is released once it is longer than any real call header."""
    parser = get_tool_parser("kimi_k2")
    sent = summary(parser.feed("<|tool_call_begin|>functions." + "x" * 5000), validate=False)
    assert sent["content"] and len(sent["content"]) > 4000 and not sent["calls"]


def test_unfinished_header_streamed_in_word_pieces_is_still_bounded():
    """Word-only pieces skip the header re-match; the length limit still releases the held text,
    and the set of known unfinished headers stays bounded."""
    from tokworker.parsers.tools.core.jsoncalls import _UNDECIDED, UNDECIDED_LIMIT
    parser = get_tool_parser("hermes")
    sent = parser.feed("<tool_call>")
    for _ in range(600):
        sent += parser.feed("ab")
    released = summary(sent, validate=False)
    assert released["content"] and len(released["content"]) > 1000 and not released["calls"]
    assert summary(sent + parser.feed(" x") + parser.finish(), validate=False)["content"] == \
        "<tool_call>" + "ab" * 600 + " x"
    for i in range(UNDECIDED_LIMIT + 10):
        get_tool_parser("hermes").feed(f'<tool_call>{{"name": "tool_{i}')
    assert len(_UNDECIDED) <= UNDECIDED_LIMIT


def test_call_ids_differ_across_streams():
    text = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    ids = {get_tool_parser("hermes").feed(text)[0].tool_calls[0].id for _ in range(50)}
    assert len(ids) == 50 and all(i.startswith("call_") and len(i) == 29 for i in ids)


def test_llama3_calls_may_say_their_type_first():
    text = '{"type": "function", "name": "f", "parameters": {"a": 1}}'
    assert assert_split_invariant("llama3_json", text, every_split=True)["calls"] == [("f", '{"a": 1}')]


@pytest.mark.parametrize("name,render,content_first,markers", JSON_FORMATS, ids=JSON_IDS)
@SETTINGS
@given(calls=calls_lists, before=nasty_text, after=nasty_text, chunking=cuts)
def test_json_formats_round_trip(name, render, content_first, markers, calls, before, after, chunking):
    if not content_first:
        before = ""
        assume(not after.lstrip().startswith(";"))
    assume(not any(m in before + after for m in markers))
    text = render(calls, before, after)
    result = assert_split_invariant(name, text, cuts=chunking)
    assert [n for n, _ in result["calls"]] == [n for n, _ in calls]
    for (_, streamed), (_, args) in zip(result["calls"], calls):
        assert streamed == dumps(args)  # verbatim: exactly the JSON text the model wrote
    assert result["content"] == expected_content(before, after)


@pytest.mark.parametrize("name,render,content_first,markers", JSON_FORMATS, ids=JSON_IDS)
@settings(max_examples=10, deadline=None)
@given(calls=small_calls, before=nasty_text)
def test_json_formats_every_split_and_every_prefix(name, render, content_first, markers, calls, before):
    """Cut the text at every position (two pieces), and end the stream at every position: streamed and
    whole always agree, complete calls never change, a cut-off call keeps a prefix of its arguments."""
    before = before if content_first else ""
    assume(not any(m in before for m in markers))
    text = render(calls, before)
    full = assert_split_invariant(name, text, every_split=True)
    for part in assert_every_prefix(name, text):
        assert len(part["calls"]) <= len(full["calls"])
        for (name_p, args_p), (name_f, args_f) in zip(part["calls"], full["calls"]):
            assert name_p == name_f and args_f.startswith(args_p)
        complete = max(len(part["calls"]) - 1, 0)
        assert part["calls"][:complete] == full["calls"][:complete]


@pytest.mark.parametrize("name", ["hermes", "mistral", "deepseek_v3", "deepseek_v31", "kimi_k2"])
@SETTINGS
@given(text=nasty_text, chunking=cuts)
def test_text_without_calls_is_content_intact(name, text, chunking):
    assume(not any(m in text for m in MARKERS[name]))
    result = assert_split_invariant(name, text, cuts=chunking)
    assert result == {"content": text or None, "reasoning_content": None, "calls": []}


@SETTINGS
@given(text=nasty_text, chunking=cuts)
def test_llama3_output_not_opening_with_a_call_is_content(text, chunking):
    assume(not text.lstrip().startswith(("{", "<|python_tag|>")))
    result = assert_split_invariant("llama3_json", text, cuts=chunking)
    assert result == {"content": text or None, "reasoning_content": None, "calls": []}


MALFORMED = [
    ("hermes", 'Look: <tool_call>\n{"name": 42}\n</tool_call>'),
    ("hermes", "<tool_call>not json</tool_call> and more"),
    ("hermes", '<tool_call>\n{"nam": "f", "arguments": {}}\n</tool_call>'),
    ("hermes", '<tool_call>\n{"name": "f", "arguments": '),  # cut before the arguments begin
    ("hermes", '<tool_call>\n{"name": "f", "arguments": [1]}\n</tool_call>'),
    ("hermes", '<tool_call>\n{"arguments": {"a": 1}, "name": '),  # held whole, never completed
    ("llama3_json", '{"name": "f", "parameters": 3}'),
    ("llama3_json", '{"answer": {"name": "f"}}'),
    ("llama3_json", "<|python_tag|>brave_search.call(query=\"x\")"),
    ("mistral", "[TOOL_CALLS]{not a call}"),
    ("mistral", '[TOOL_CALLS]get weather[ARGS]{"a": 1}'),
    ("mistral", "x[TOOL_CALLS]"),
    ("deepseek_v3", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n{\"a\": 1}<｜tool▁call▁end｜>"),
    ("deepseek_v31", "<｜tool▁calls▁begin｜>plain words"),
    ("deepseek_v31", "<｜tool▁call▁begin｜><｜tool▁sep｜>{}<｜tool▁call▁end｜>"),
]  # kimi_k2's markers are control tokens and never content: tests/test_tool_parsers_fixture.py


@pytest.mark.parametrize("name,text", MALFORMED)
def test_malformed_or_unterminated_openings_come_back_as_content(name, text):
    result = assert_split_invariant(name, text, every_split=True)
    assert result == {"content": text, "reasoning_content": None, "calls": []}


def test_broken_arguments_keep_what_was_sent_and_the_rest_is_content():
    text = '<tool_call>\n{"name": "f", "arguments": {"a": 1, "b": tru}}\n</tool_call>'
    result = assert_split_invariant("hermes", text, every_split=True)
    assert result["calls"] == [("f", '{"a": 1, "b": tru')]
    assert result["content"] == "}}\n</tool_call>"


def test_key_order_and_string_arguments_are_decoded_whole():
    text = ('<tool_call>\n{"arguments": {"city": "Paris"}, "name": "get_weather"}\n</tool_call>\n'
            '<tool_call>\n{"name": "f", "arguments": "{\\"x\\": [1, 2]}"}\n</tool_call>')
    result = assert_split_invariant("hermes", text, every_split=True)
    assert result["calls"] == [("get_weather", '{"city": "Paris"}'), ("f", '{"x": [1, 2]}')]
    assert result["content"] is None


def test_tool_without_parameters_streams_empty_object():
    for name, text in [("hermes", '<tool_call>\n{"name": "now"}\n</tool_call>'),
                       ("hermes", '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>'),
                       ("llama3_json", '{"name": "now", "parameters": {}}'),
                       ("mistral", "[TOOL_CALLS]now[ARGS]{}"),
                       ("deepseek_v3", deepseek_v3([("now", {})])),
                       ("deepseek_v31", deepseek_v31([("now", {})])),
                       ("kimi_k2", kimi_k2([("now", {})]))]:
        deltas = stream(name, [text])
        assert summary(deltas)["calls"] == [("now", "{}")], name


def test_closing_brace_survives_many_tokens_per_step():
    """Speculative decoding hands over several tokens at once: the end of the arguments, the closing
    tag and the next call's start can all arrive together."""
    text = ('<tool_call>\n{"name": "a", "arguments": {"x": {"y": [1]}}}\n</tool_call>\n'
            '<tool_call>\n{"name": "b", "arguments": {"z": "}"}}\n</tool_call>')
    cut = text.index('[1]') + 2
    for pieces in ([text[:cut], text[cut:]], [text]):
        assert summary(stream("hermes", pieces))["calls"] == [("a", '{"x": {"y": [1]}}'), ("b", '{"z": "}"}')]


def test_arguments_stream_before_the_call_ends():
    parser = get_tool_parser("hermes")
    first = summary(parser.feed('Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par'))
    assert first == {"content": "Sure.", "reasoning_content": None, "calls": [("get_weather", '{"city": "Par')]}
    assert parser.called
    rest = parser.feed('is"}}\n</tool_call>') + parser.finish()
    assert "".join(d.tool_calls[0].function.arguments for d in rest) == 'is"}'


def test_content_holds_back_only_a_possible_tag_start():
    parser = get_tool_parser("hermes")
    assert summary(parser.feed("a <tool"))["content"] == "a"  # " <tool" might open a call
    assert summary(parser.feed("box> b <"))["content"] == " <toolbox> b"
    assert summary(parser.finish())["content"] == " <"


@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")])
def test_arguments_are_streamed_verbatim(separators):
    args = {"q": "a \"quoted\" \\ path", "n": [1, -2.5e-3, None, True], "nested": {"日本": "🙂"}}
    text = hermes([("search", args)], separators=separators)
    result = assert_split_invariant("hermes", text, every_split=True)
    assert result["calls"] == [("search", json.dumps(args, ensure_ascii=False, separators=separators))]
    indented = '<tool_call>\n{"name": "s", "arguments": %s}\n</tool_call>' % json.dumps(args, indent=2)
    assert json.loads(whole("hermes", indented)["calls"][0][1]) == args


# ---- every format against marker soup: no hang, no crash, streamed == whole ----

SOUP = NASTY + [
    "<tool_call>", "</tool_call>", '{"name": "f", "arguments": ', '{"name": "f"}', '{"a": [1, "x"]}', "}", "\n",
    "<|python_tag|>", '{"name": "g", "parameters": {}}', "; ", "[TOOL_CALLS]", "f[ARGS]", "[CALL_ID]", "[{", "}, ",
    "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "function<｜tool▁sep｜>f\n```json\n", "\n```",
    "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", "<|tool_calls_section_begin|>",
    "<|tool_call_begin|>functions.f:0", "<|tool_call_argument_begin|>", "<|tool_call_end|>",
    "<|tool_calls_section_end|>", "<function=f>", "<parameter=a>", "</parameter>", "</function>", "<arg_key>a",
    "</arg_key>", "<arg_value>", "</arg_value>", "[f(", "a=", "1", "'s'", ")", "]", "<|python_start|>",
    "<|python_end|>", "<|start|>assistant", "<|channel|>analysis", "<|channel|>final", " to=functions.f",
    "<|constrain|>json", "<|message|>", "<|end|>", "<|call|>", "<|return|>",
]


@pytest.mark.parametrize("name", TOOL_PARSERS)
@settings(max_examples=EXAMPLES, deadline=None)
@given(pieces=st.lists(st.sampled_from(SOUP), max_size=14), chunking=cuts)
def test_marker_soup_streams_like_whole_text(name, pieces, chunking):
    assert_soup_streams_like_whole(name, "".join(pieces), chunking, every_prefix_below=120)


@pytest.mark.parametrize("name", TOOL_PARSERS)
def test_finished_parser_is_freed_without_the_cycle_collector(name):
    import gc
    import weakref
    parser = get_tool_parser(name)
    parser.feed('<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call> [TOOL_CALLS] x')
    parser.finish()
    assert parser.finish() == []
    with pytest.raises(ValueError, match="finished"):
        parser.feed("more")
    ref = weakref.ref(parser)
    gc.disable()
    try:
        del parser
        assert ref() is None
    finally:
        gc.enable()


@pytest.mark.parametrize("name_text", ["f" * 256, "f" * 257, "g" * 300, "\\n" * 200, "\\u00e9" * 60 + "x"])
def test_long_and_escaped_names_stream_as_whole_text_parses(name_text):
    """A name of up to 256 characters or escapes is read by the header fast path; longer ones are held
    whole and decoded once complete. Either way, however the text is split, the same call comes out."""
    text = f'<tool_call>\n{{"name": "{name_text}", "arguments": {{"a": [1, "x"]}}}}\n</tool_call>'
    result = assert_split_invariant("hermes", text, cuts=[13, 20, 200, 280, 300])
    assert result["calls"] == [(json.loads(f'"{name_text}"'), '{"a": [1, "x"]}')]
