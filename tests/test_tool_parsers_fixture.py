"""The tool-call formats of the fixture models that had no parser (seed_oss, minimax_m2, cohere_command,
cohere_command2, nemotron_json, firefunction_v2, granite, functionary_v31, functionary_v32, apriel,
apertus), the call ids each format issues, and the fixes to kimi_k2, openai and the text values.

Model text is rendered the way each real template writes calls (format literals next to each renderer,
from ../shared/fixtures/chat_templates); whole-text parse and streamed parse agree however it is split.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.test_tool_text_values import tools_for, typed_calls
from tests.tool_formats import (EXAMPLES, assert_every_prefix, assert_soup_streams_like_whole,
                                assert_split_invariant, calls_lists, cuts, dumps, expected_content, nasty_text,
                                small_calls, stream, summary, whole)
from tokworker.parsers.tools import TOOL_PARSERS, get_tool_parser

# A third of the examples of the older files per test: this file runs a dozen formats through each property.
SETTINGS = settings(max_examples=max(EXAMPLES // 3, 10), deadline=None, suppress_health_check=[HealthCheck.too_slow])
NEW_PARSERS = ["seed_oss", "minimax_m2", "cohere_command", "cohere_command2", "cohere_command3", "nemotron_json",
               "firefunction_v2", "granite", "functionary_v31", "functionary_v32", "apriel", "apertus"]


# ---- renderers for the JSON formats, from the templates' literals ----

def nemotron_json(calls, before="", after=""):
    # NVIDIA-Nemotron-Nano-v2.jinja: content.strip() + '\n' (when content) + '<TOOLCALL>[' + '{"name": "' NAME
    # '", "arguments": ' ARGS '}' joined by ', ' + ']</TOOLCALL>'
    body = ", ".join('{"name": "%s", "arguments": %s}' % (n, dumps(a)) for n, a in calls)
    return (before + "\n" if before else "") + "<TOOLCALL>[" + body + "]</TOOLCALL>" + after


def granite(calls, before="", after=""):
    # ibm-granite-granite-3.3-2B-Instruct.jinja asks for "<|tool_call|> followed by a JSON list of tools used"
    return before + "<|tool_call|>" + json.dumps([{"name": n, "arguments": a} for n, a in calls], ensure_ascii=False) + after


def firefunction_v2(calls, before="", after=""):
    # fireworks-ai-llama-3-firefunction-v2.jinja: content|trim + ' functools[' + '{"name": "' NAME '", "arguments": '
    # ARGS '}' joined by ', ' + ']'
    body = ", ".join('{"name": "%s", "arguments": %s}' % (n, dumps(a)) for n, a in calls)
    return before + " functools[" + body + "]" + after


def apriel(calls, before="", after=""):
    # unsloth-Apriel-1.5.jinja: content + '\n<tool_calls>[' + '{"name": "' NAME '", "arguments": ' ARGS
    # (+ ', "id": "' ID '"' before the last turn) + '}' joined by ', ' + ']</tool_calls>'
    body = ", ".join('{"name": "%s", "arguments": %s, "id": "call%d"}' % (n, dumps(a), i) for i, (n, a) in enumerate(calls))
    return before + "\n<tool_calls>[" + body + "]</tool_calls>" + after


def cohere_command(calls, before="", after=""):
    # CohereForAI-c4ai-command-r-plus-tool_use.jinja: content|trim + '\nAction:\n```json\n[\n' + per call
    # '    {\n        "tool_name": "' NAME '",\n        "parameters": ' ARGS|tojson(indent=4)|indent(8) '\n    }'
    # joined by ',\n' + '\n]```\n'
    def one(name, args):
        text = json.dumps(args, ensure_ascii=False, indent=4).replace("\n", "\n        ") if args else "{}"
        return '    {\n        "tool_name": "%s",\n        "parameters": %s\n    }' % (name, text)
    return before + "\nAction:\n```json\n[\n" + ",\n".join(one(n, a) for n, a in calls) + "\n]```\n" + after


def cohere_command2(calls, before="", after=""):
    # CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja: '<|START_THINKING|>' PLAN '<|END_THINKING|><|START_ACTION|>[\n'
    # + per call '    {"tool_call_id": "' IDX '", "tool_name": "' NAME '", "parameters": ' ARGS '}' (',' between) '\n'
    # + ']<|END_ACTION|>'
    body = ",\n".join('    {"tool_call_id": "%d", "tool_name": "%s", "parameters": %s}' % (i, n, dumps(a))
                      for i, (n, a) in enumerate(calls))
    return "<|START_THINKING|>" + before + "<|END_THINKING|><|START_ACTION|>[\n" + body + "\n]<|END_ACTION|>" + after


def apertus(calls, before="", after=""):
    # Apertus-8B-Instruct.jinja: content + '<|tools_prefix|>[' + '{"' NAME '": ' ARGS '}' joined by ', ' + ']<|tools_suffix|>'
    body = ", ".join('{"%s": %s}' % (n, dumps(a)) for n, a in calls)
    return before + "<|tools_prefix|>[" + body + "]<|tools_suffix|>" + after


def functionary_v31(calls, before="", after=""):
    # meetkai-functionary-medium-v3.1.jinja: content + '<function=' NAME '>' ARGS '</function>' per call
    return before + "".join("<function=%s>%s</function>" % (n, dumps(a)) for n, a in calls) + after


def functionary_v32(calls, before="", after=""):
    # meetkai-functionary-medium-v3.2.jinja: ('>>>all\n' + content) + '>>>' NAME '\n' ARGS per call; the
    # generation prompt ends with '>>>', so the model's text starts after it
    text = ("all\n" + before if before else "") + "".join(">>>%s\n%s" % (n, dumps(a)) for n, a in calls)
    text = text[3:] if text.startswith(">>>") else text
    return text + (">>>all\n" + after if after else "")


# name, renderer, markers content may not hold, reasoning the renderer puts before the calls
JSON_FORMATS = [
    ("nemotron_json", nemotron_json, ["<TOOLCALL>"]),
    ("granite", granite, ["<|tool_call|>", "<tool_call>"]),
    ("firefunction_v2", firefunction_v2, ["functools["]),
    ("apriel", apriel, ["<tool_calls>"]),
    ("cohere_command", cohere_command, ["Action:"]),
    ("cohere_command2", cohere_command2, ["<|START_", "<|END_"]),
    ("apertus", apertus, ["<|tools_prefix|>"]),
    ("functionary_v31", functionary_v31, ["<function=", "<|python_tag|>"]),
    ("functionary_v32", functionary_v32, [">>>", "all\n"]),
]
JSON_IDS = [f[0] for f in JSON_FORMATS]


def expected_message(name, before, after):
    """(content, reasoning) the renderer's text should parse to."""
    if name == "cohere_command2":  # `before` is the tool plan: reasoning
        return (after.lstrip(" \t\n\r") or None) if after.strip(" \t\n\r") else None, before or None
    if name == "cohere_command":  # the template ends the action block with a newline
        after = "\n" + after
    return expected_content(before, after), None


@pytest.mark.parametrize("name,render,markers", JSON_FORMATS, ids=JSON_IDS)
@SETTINGS
@given(calls=calls_lists, before=nasty_text, after=nasty_text, chunking=cuts)
def test_json_formats_round_trip(name, render, markers, calls, before, after, chunking):
    assume(not any(m in before + after for m in markers))
    if name == "functionary_v32":
        assume(">" not in before[-2:] + after[-2:] and not after.startswith(">"))
    text = render(calls, before, after)
    result = assert_split_invariant(name, text, cuts=chunking)
    assert [n for n, _ in result["calls"]] == [n for n, _ in calls]
    for (_, streamed), (_, args) in zip(result["calls"], calls):
        assert json.loads(streamed) == args
        if name not in ("cohere_command", "granite"):
            assert streamed == dumps(args)  # verbatim: exactly the JSON text the model wrote
    content, reasoning = expected_message(name, before, after)
    assert (result["content"], result["reasoning_content"]) == (content, reasoning), text


@pytest.mark.parametrize("name,render,markers", JSON_FORMATS, ids=JSON_IDS)
@settings(max_examples=8, deadline=None)
@given(calls=small_calls, before=nasty_text)
def test_json_formats_every_split_and_every_prefix(name, render, markers, calls, before):
    assume(not any(m in before for m in markers))
    assume(">" not in before[-2:])
    text = render(calls, before)
    full = assert_split_invariant(name, text, every_split=True)
    for part in assert_every_prefix(name, text):
        assert len(part["calls"]) <= len(full["calls"])
        for (name_p, args_p), (name_f, args_f) in zip(part["calls"], full["calls"]):
            assert name_p == name_f and args_f.startswith(args_p)
        complete = max(len(part["calls"]) - 1, 0)
        assert part["calls"][:complete] == full["calls"][:complete]


@pytest.mark.parametrize("name,render,markers", JSON_FORMATS, ids=JSON_IDS)
@SETTINGS
@given(text=nasty_text, chunking=cuts)
def test_text_without_calls_is_content_intact(name, render, markers, text, chunking):
    assume(not any(m in text for m in markers + ["<seed:", "<minimax:"]))
    if name == "functionary_v32":
        text = "all\n" + text  # the model's text for the user: a recipient of "all" first
    result = assert_split_invariant(name, text, cuts=chunking)
    body = text[4:] if name == "functionary_v32" else text
    assert result == {"content": body or None, "reasoning_content": None, "calls": []}


# ---- text-valued formats: Seed-OSS and MiniMax-M2 ----

def seed_oss(calls, before="", after=""):
    # ByteDance-Seed-OSS.jinja: '\n' + content|trim + '\n' (when content), then per call '\n<seed:tool_call>\n<function='
    # NAME '>\n', per argument '<parameter=' K '>' V '</parameter>\n' (V: strings as they are, else |string;
    # objects written as JSON here, as the model is told), then '</function>\n</seed:tool_call>'
    def text(v):
        return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) if isinstance(v, (dict, list)) else str(v)
    body = "".join("\n<seed:tool_call>\n<function=%s>\n%s</function>\n</seed:tool_call>"
                   % (n, "".join("<parameter=%s>%s</parameter>\n" % (k, text(v)) for k, (_, v) in p.items()))
                   for n, p in calls)
    return ("\n" + before.strip() + "\n" if before.strip() else "") + body + after


def minimax_m2(calls, before="", after=""):
    # MiniMax-M2.jinja: content + '\n<minimax:tool_call>\n' + per call '<invoke name="' NAME '">\n' + per argument
    # '<parameter name="' K '">' V '</parameter>\n' (V: strings as they are, else tojson) + '</invoke>\n', then
    # '</minimax:tool_call>'
    def text(v):
        return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
    body = "".join('<invoke name="%s">\n%s</invoke>\n'
                   % (n, "".join('<parameter name="%s">%s</parameter>\n' % (k, text(v)) for k, (_, v) in p.items()))
                   for n, p in calls)
    return before + "\n<minimax:tool_call>\n" + body + "</minimax:tool_call>" + after


# One "\n" after a value's tag and one before its closing tag are formatting (vLLM reads them so too),
# so string values here neither start nor end with one.
no_edge_newlines = nasty_text.filter(lambda s: not s.startswith("\n") and not s.endswith("\n"))
TEXT_FORMATS = [
    ("seed_oss", seed_oss, ("</parameter>", "<parameter=", "</function>"), ["<seed:tool_call>", "<function="]),
    ("minimax_m2", minimax_m2, ("</parameter>", "<parameter name=", "</invoke>"), ["<minimax:tool_call>"]),
]


@pytest.mark.parametrize("name,render,forbidden,markers", TEXT_FORMATS, ids=[f[0] for f in TEXT_FORMATS])
@SETTINGS
@given(data=st.data(), before=nasty_text, after=nasty_text, chunking=cuts)
def test_text_valued_formats_round_trip(name, render, forbidden, markers, data, before, after, chunking):
    calls = data.draw(typed_calls(forbidden, st.integers() if name == "minimax_m2" else no_edge_newlines))
    assume(all(not (isinstance(v, str) and (v[:1] == "\n" or v[-1:] == "\n")) for _, p in calls for _, v in p.values()))
    assume(not any(m in before + after for m in markers))
    tools = tools_for(calls)
    text = render(calls, before, after)
    result = assert_split_invariant(name, text, tools, cuts=chunking)
    assert [n for n, _ in result["calls"]] == [n for n, _ in calls]
    for (_, streamed), (_, params) in zip(result["calls"], calls):
        assert json.loads(streamed) == {k: v for k, (_, v) in params.items()}
    expected_before = ("\n" + before.strip() if before.strip() else "") if name == "seed_oss" else before
    assert result["content"] == expected_content(expected_before, after)


@pytest.mark.parametrize("name,render,forbidden,markers", TEXT_FORMATS, ids=[f[0] for f in TEXT_FORMATS])
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_text_valued_formats_every_split_and_every_prefix(name, render, forbidden, markers, data):
    calls = data.draw(typed_calls(forbidden, st.integers()))
    assume(all(not (isinstance(v, str) and (v[:1] == "\n" or v[-1:] == "\n")) for _, p in calls for _, v in p.values()))
    tools = tools_for(calls)
    text = render(calls)
    full = assert_split_invariant(name, text, tools, every_split=True)
    for part in assert_every_prefix(name, text, tools):
        complete = max(len(part["calls"]) - 1, 0)
        assert part["calls"][:complete] == full["calls"][:complete]


# ---- cases: malformed openings, formats' own edges ----

CASES = [
    # (format, text, calls, content, reasoning)
    ("nemotron_json", "<TOOLCALL>not a list</TOOLCALL>", [], "<TOOLCALL>not a list</TOOLCALL>", None),
    ("nemotron_json", '<TOOLCALL>[{"name": "f", "arguments": {"a": 1}}]', [("f", '{"a": 1}')], None, None),  # no closing
    ("nemotron_json", '<TOOLCALL>[{"arguments": {"a": 1}, "name": "f"}]</TOOLCALL>', [("f", '{"a": 1}')], None, None),
    ("granite", '<tool_call>[{"name": "f", "arguments": {}}]', [("f", "{}")], None, None),  # Granite 3.1's marker
    ("granite", "<|tool_call|>oops", [], "oops", None),  # a control token that opens no call is dropped
    ("firefunction_v2", "use functools[ carefully", [], "use functools[ carefully", None),
    ("firefunction_v2", ' functools[{"name": "f", "arguments": {"a": 1}}] done', [("f", '{"a": 1}')], "done", None),
    ("cohere_command", "Action: none needed", [], "Action: none needed", None),
    ("cohere_command", 'Action:\n```json\n[\n    {"parameters": {"x": 2}, "tool_name": "f"}\n]```',
     [("f", '{"x": 2}')], None, None),
    ("cohere_command2", "<|START_RESPONSE|>Hi <b>there</b><|END_RESPONSE|>", [], "Hi <b>there</b>", None),
    ("cohere_command2", "<|START_THINKING|>cut off <|END_THINK", [], None, "cut off <|END_THINK"),
    ("cohere_command2", '<|START_ACTION|>[{"tool_name": "f", "parameters": {}}]<|END_ACTION|>', [("f", "{}")], None, None),
    ("cohere_command2", "<|START_ACTION|>no list<|END_ACTION|>", [], "no list", None),
    ("apertus", '<|tools_prefix|>[{"f": {"a": [1, {"b": null}]}}, {"g": {}}]<|tools_suffix|>',
     [("f", '{"a": [1, {"b": null}]}'), ("g", "{}")], None, None),
    # an entry that is no call is skipped, its JSON with it (vLLM skips it too); the markers are control tokens
    ("apertus", '<|tools_prefix|>[{"f": 3}]<|tools_suffix|>', [], None, None),
    ("apertus", '<|tools_prefix|>[{"f": {"a": 1}, "extra": 2}]<|tools_suffix|>', [("f", '{"a": 1}')], None, None),
    ("apriel", '<tool_calls>[{"name": "f", "arguments": {"a": "x"}, "id": "abc123"}]</tool_calls>',
     [("f", '{"a": "x"}')], None, None),
    ("functionary_v31", '<function=f>{"a": 1}</function><function=g>{}</function>', [("f", '{"a": 1}'), ("g", "{}")],
     None, None),
    ("functionary_v31", "<|python_tag|>import os\nprint(os.getcwd())", [("python", '{"code": "import os\\nprint(os.getcwd())"}')],
     None, None),
    ("functionary_v31", "x <function=f>no json</function>", [], "x <function=f>no json</function>", None),
    ("functionary_v32", "all\nHello.", [], "Hello.", None),
    ("functionary_v32", "Hello there, no recipient", [], "Hello there, no recipient", None),
    ("functionary_v32", 'all\nChecking.>>>f\n{"a": 1}>>>all\nDone.', [("f", '{"a": 1}')], "Checking.Done.", None),
    ("functionary_v32", "all\nin python: >>> print(1)", [], "in python: >>> print(1)", None),
    ("seed_oss", "<seed:tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</seed:tool_call>",
     [("f", '{"a": "1"}')], None, None),
    ("minimax_m2", '<minimax:tool_call>\n<invoke name="f">\n<parameter name="n">[1, 2]</parameter>\n</invoke>\n'
                   '</minimax:tool_call> ok', [("f", '{"n": [1, 2]}')], "ok", None),
    ("minimax_m2", "<minimax:tool_call>\n<oops>", [], "<minimax:tool_call>\n<oops>", None),
    # shapes from vLLM's own parser tests (our examples), including where vLLM marks its parser xfail:
    # granite with text on both sides of the call (vLLM's granite drops or garbles the text after it; we keep
    # it, as content), and the arguments before the name (held whole, then decoded)
    ("granite", "Let me check.\n<|tool_call|> [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]\nOne moment.",
     [("get_weather", '{"city": "Oslo"}')], "Let me check.\nOne moment.", None),
    ("granite", '<|tool_call|>[{"arguments": {"city": "Oslo"}, "name": "get_weather"}, '
                '{"arguments": {"tz": "CET"}, "name": "get_time"}]',
     [("get_weather", '{"city": "Oslo"}'), ("get_time", '{"tz": "CET"}')], None, None),
    # apertus cut off inside the list, or without its suffix: the calls written so far stand
    ("apertus", '<|tools_prefix|>[{"get_weather": {"location": "Oslo"}', [("get_weather", '{"location": "Oslo"}')], None, None),
    ("apertus", 'Sure. <|tools_prefix|>[{"f": {"a": 1}}]', [("f", '{"a": 1}')], "Sure.", None),
    # Seed-OSS writes call examples while it thinks: a think block left to the tool parser is content
    ("seed_oss", "<seed:think>the format is <seed:tool_call>\n<function=f>\n<parameter=a>0</parameter>\n</function>\n"
                 "</seed:tool_call></seed:think><seed:tool_call>\n<function=f>\n<parameter=a>1</parameter>\n</function>\n"
                 "</seed:tool_call>", [("f", '{"a": "1"}')],
     "<seed:think>the format is <seed:tool_call>\n<function=f>\n<parameter=a>0</parameter>\n</function>\n"
     "</seed:tool_call></seed:think>", None),
]


@pytest.mark.parametrize("name,text,calls,content,reasoning", CASES)
def test_format_cases(name, text, calls, content, reasoning):
    result = assert_split_invariant(name, text, every_split=True)
    assert result == {"content": content, "reasoning_content": reasoning, "calls": calls}


# ---- marker soup: no hang, no crash, streamed == whole for every parser ----

SOUP = ["<seed:think>", "</seed:think>", "<TOOLCALL>", "</TOOLCALL>", "[", "]", "{", "}", '{"name": "f", "arguments": ', '{"a": [1, "x"]}', ", ",
        "<|tool_call|>", " functools[", "<tool_calls>", "</tool_calls>", '"id": "x"', "Action:", "\n```json\n", "```",
        '{"tool_name": "f", "parameters": ', '"tool_call_id": "0", ', "<|START_THINKING|>", "<|END_THINKING|>",
        "<|START_ACTION|>", "<|END_ACTION|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|tools_prefix|>",
        "<|tools_suffix|>", '{"f": ', "<function=f>", "</function>", "<|python_tag|>", ">>>", "all\n", "f\n", "<seed:tool_call>",
        "</seed:tool_call>", "<parameter=a>", "</parameter>", "<minimax:tool_call>", "</minimax:tool_call>",
        '<invoke name="f">', "</invoke>", '<parameter name="a">', "1", "x", " ", "\n", "<", "<|", '"', "\\", "é"]


@pytest.mark.parametrize("name", NEW_PARSERS)
@SETTINGS
@given(pieces=st.lists(st.sampled_from(SOUP), max_size=14), chunking=cuts)
def test_marker_soup_streams_like_whole_text(name, pieces, chunking):
    assert_soup_streams_like_whole(name, "".join(pieces), chunking)


# ---- a long argument streamed one character at a time stays linear ----

LONG_CALLS = {
    "nemotron_json": lambda body: '<TOOLCALL>[{"name": "write", "arguments": {"body": %s}}]</TOOLCALL>' % dumps(body),
    "granite": lambda body: '<|tool_call|>[{"name": "write", "arguments": {"body": %s}}]' % dumps(body),
    "firefunction_v2": lambda body: ' functools[{"name": "write", "arguments": {"body": %s}}]' % dumps(body),
    "apriel": lambda body: '<tool_calls>[{"name": "write", "arguments": {"body": %s}}]</tool_calls>' % dumps(body),
    "cohere_command": lambda body: 'Action:\n```json\n[{"tool_name": "write", "parameters": {"body": %s}}]```' % dumps(body),
    "cohere_command2": lambda body: '<|START_THINKING|>%s<|END_THINKING|><|START_ACTION|>[{"tool_name": "write", '
                                    '"parameters": {"body": %s}}]<|END_ACTION|>' % (body, dumps(body)),
    "apertus": lambda body: '<|tools_prefix|>[{"write": {"body": %s}}]<|tools_suffix|>' % dumps(body),
    "functionary_v31": lambda body: '<function=write>{"body": %s}</function><|python_tag|>%s' % (dumps(body), body),
    "functionary_v32": lambda body: 'all\n%s>>>write\n{"body": %s}' % (body, dumps(body)),
    "seed_oss": lambda body: "<seed:tool_call>\n<function=write>\n<parameter=body>%s</parameter>\n</function>\n"
                             "</seed:tool_call>" % body,
    "minimax_m2": lambda body: '<minimax:tool_call>\n<invoke name="write">\n<parameter name="body">%s</parameter>\n'
                               "</invoke>\n</minimax:tool_call>" % body,
}
WRITE_TOOLS = [{"type": "function", "function": {"name": "write", "parameters": {"type": "object", "properties": {
    "body": {"type": "string"}}}}}]


def _char_by_char_seconds(name, text):
    parser = get_tool_parser(name, WRITE_TOOLS)
    start = time.perf_counter()
    for ch in text:
        parser.feed(ch)
    parser.finish()
    return time.perf_counter() - start


@pytest.mark.parametrize("name", sorted(LONG_CALLS))
def test_long_argument_one_character_at_a_time_is_linear(name):
    """Quadratic work (re-scanning the buffer per character) shows as 16x the time for 4x the text; linear
    work as ~4x. The bound leaves room for noise on a shared machine; it is a complexity check, not a
    speed assertion. (Sizes of 8k and 34k characters: below that, warm-up dominates the small run.)"""
    body = "def f(x):\n    return x < 2 and 'ok' or \"no\"\n" * 200
    small, large = LONG_CALLS[name](body), LONG_CALLS[name](body * 4)
    assert summary(stream(name, list(large), WRITE_TOOLS))["calls"]
    t_small = min(_char_by_char_seconds(name, small) for _ in range(3))
    t_large = min(_char_by_char_seconds(name, large) for _ in range(3))
    assert t_large < 9 * t_small, (t_small, t_large)


# ---- call ids the templates accept ----

def _ids(name, text, tools=None):
    deltas = stream(name, list(text), tools)
    return [part.id for d in deltas for part in d.tool_calls or () if part.id is not None]


def test_mistral_ids_are_nine_alphanumerics_and_unique():
    ids = _ids("mistral", "[TOOL_CALLS]f[ARGS]{}[TOOL_CALLS]g[ARGS]{}") + _ids("mistral", '[TOOL_CALLS][{"name": "f", "arguments": {}}]')
    ids += [get_tool_parser("mistral").parse("[TOOL_CALLS]f[ARGS]{}")[1][0]["id"] for _ in range(200)]
    assert all(re.fullmatch(r"[A-Za-z0-9]{9}", i) for i in ids), ids
    assert len(set(ids)) == len(ids)


def test_mistral_keeps_a_call_id_the_model_wrote_when_the_templates_take_it():
    assert _ids("mistral", '[TOOL_CALLS]f[CALL_ID]a1B2c3D4e[ARGS]{"x": 1}') == ["a1B2c3D4e"]
    other = _ids("mistral", "[TOOL_CALLS]f[CALL_ID]call_1[ARGS]{}")  # not 9 alphanumerics: ours instead
    assert len(other) == 1 and re.fullmatch(r"[A-Za-z0-9]{9}", other[0]) and other[0] != "call_1"


def test_kimi_ids_are_the_ones_the_model_wrote():
    text = ("<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:3<|tool_call_argument_begin|>{}"
            "<|tool_call_end|><|tool_call_begin|>now<|tool_call_argument_begin|>{}<|tool_call_end|>"
            "<|tool_calls_section_end|>")
    assert _ids("kimi_k2", text) == ["functions.get_weather:3", "functions.now:1"]
    assert [c["id"] for c in get_tool_parser("kimi_k2").parse(text)[1]] == ["functions.get_weather:3", "functions.now:1"]


@pytest.mark.parametrize("name", sorted(set(TOOL_PARSERS) - {"mistral", "kimi_k2"}))
def test_other_formats_issue_openai_ids(name):
    from tokworker.parsers.tools.core.callids import call_id
    assert re.fullmatch(r"call_[0-9a-f]{24}", call_id(get_tool_parser(name).id_style, "f", 0))


# ---- the fixes ----

@pytest.mark.parametrize("text,content", [
    # the arguments broke off: the call keeps what was sent, the rest is content without the markers
    ("<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"a\": yes}"
     "<|tool_call_end|><|tool_calls_section_end|> after", "yes} after"),
    ("<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0 {}", "functions.f:0 {}"),  # no call opened
    ("text<|tool_call_end|> more<|tool_call_argument_begin|>", "text more"),
])
def test_kimi_markers_never_reach_content(text, content):
    result = assert_split_invariant("kimi_k2", text, every_split=True)
    assert result["content"] == content
    assert "<|" not in (result["content"] or "")


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


def test_float_typed_text_values_are_numbers():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "float"}, "y": {"type": "float"}}}}}]
    text = "<tool_call>\n<function=f>\n<parameter=x>\n2.5\n</parameter>\n<parameter=y>\nabout 3\n</parameter>\n</function>\n</tool_call>"
    assert json.loads(assert_split_invariant("qwen3_coder", text, tools)["calls"][0][1]) == {"x": 2.5, "y": "about 3"}
    glm = "<tool_call>f\n<arg_key>x</arg_key>\n<arg_value>-1e3</arg_value>\n</tool_call>"
    assert json.loads(assert_split_invariant("glm45", glm, tools)["calls"][0][1]) == {"x": -1000.0}


def test_aliases_and_registry():
    assert set(NEW_PARSERS) <= set(TOOL_PARSERS)
    assert type(get_tool_parser("cohere_command3")) is type(get_tool_parser("cohere_command2"))
