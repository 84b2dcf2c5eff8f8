"""Formats whose calls are a JSON list of call objects after a marker: mistral's array, nemotron_json,
granite, firefunction_v2, phi4_mini_json, apriel, jamba, hunyuan_a13b, cohere_command (and 2, 3, 4),
apertus, xlam, and minimax's one-object-per-line list.

Model text is rendered the way each model writes calls (the templates' literals, or the shapes in vLLM's
parser tests); whole-text parse and streamed parse agree however it is split. One bad entry costs only
itself (as in vLLM, whose minimax tests list the shapes): the entries after it are read, and no JSON or
closing tag of the list reaches the content. A list after a think block written first counts (xlam).
Covers tokworker.parsers.tools.core.jsonlists.
"""

from __future__ import annotations

import json

import pytest

from tests.test_stream_state import qwen
from tests.tool_formats import (WEATHER_TOOLS, WS, Format, assert_ids_stream_like_whole, assert_split_invariant, dumps,
                                expected_content, json_shape_tests)


# ---- renderers, from the templates' literals ----

def _objects(calls, args_key="arguments", sep=", "):
    return sep.join('{"name": "%s", "%s": %s}' % (n, args_key, dumps(a)) for n, a in calls)


def mistral_array(calls, before="", after=""):
    # Mistral-Nemo-Instruct-2407.jinja: "[TOOL_CALLS][" + function|tojson minus "}" + ', "id": "' ID '"}', ", " between, "]"
    items = ", ".join('{"name": "%s", "arguments": %s, "id": "a1b2c3d4e"}' % (name, dumps(args)) for name, args in calls)
    return before + "[TOOL_CALLS][" + items + "]" + after


def nemotron_json(calls, before="", after=""):
    # NVIDIA-Nemotron-Nano-v2.jinja: content.strip() + '\n' (when content) + '<TOOLCALL>[' + '{"name": "' NAME
    # '", "arguments": ' ARGS '}' joined by ', ' + ']</TOOLCALL>'
    return (before + "\n" if before else "") + "<TOOLCALL>[" + _objects(calls) + "]</TOOLCALL>" + after


def granite(calls, before="", after=""):
    # ibm-granite-granite-3.3-2B-Instruct.jinja asks for "<|tool_call|> followed by a JSON list of tools used"
    return before + "<|tool_call|>" + json.dumps([{"name": n, "arguments": a} for n, a in calls], ensure_ascii=False) + after


def firefunction_v2(calls, before="", after=""):
    # fireworks-ai-llama-3-firefunction-v2.jinja: content|trim + ' functools[' + call objects joined by ', ' + ']'
    return before + " functools[" + _objects(calls) + "]" + after


def phi4_mini_json(calls, before="", after=""):
    # Phi-4-mini (vLLM's tool_chat_template_phi4_mini.jinja asks for it): 'functools[' + call objects + ']'
    return before + "functools[" + _objects(calls) + "]" + after


def apriel(calls, before="", after=""):
    # unsloth-Apriel-1.5.jinja: content + '\n<tool_calls>[' + '{"name": "' NAME '", "arguments": ' ARGS
    # (+ ', "id": "' ID '"' before the last turn) + '}' joined by ', ' + ']</tool_calls>'
    body = ", ".join('{"name": "%s", "arguments": %s, "id": "call%d"}' % (n, dumps(a), i) for i, (n, a) in enumerate(calls))
    return before + "\n<tool_calls>[" + body + "]</tool_calls>" + after


def hunyuan_a13b(calls, before="", after=""):
    # Hunyuan-A13B (vLLM's tests): '<tool_calls>[' + call objects + ']</tool_calls>'
    return before + "<tool_calls>[" + _objects(calls) + "]</tool_calls>" + after


def jamba(calls, before="", after=""):
    # Jamba 1.5/1.6 (vLLM's tests): '<tool_calls>[\n    ' + call objects + '\n]</tool_calls>'
    return before + "<tool_calls>[\n    " + _objects(calls, sep=",\n    ") + "\n]</tool_calls>" + after


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


def xlam(calls, before="", after=""):
    # xLAM's answer is the JSON list itself (vLLM's tests: the bare list, or in a ```json block after prose)
    if before:
        return before + "\n```json\n[" + _objects(calls) + "]\n```" + after
    return "[" + _objects(calls) + "]" + after


def minimax(calls, before="", after=""):
    # MiniMax-M1's template: content + '\n<tool_calls>\n' + one call object per line + '\n</tool_calls>'
    return before + "\n<tool_calls>\n" + _objects(calls, sep="\n") + "\n</tool_calls>" + after


def _plan_and_answer(before, after):
    """Command R7B: the text before the action is its plan (reasoning); after it, the answer."""
    return ((after.lstrip(WS) or None) if after.strip(WS) else None), before or None


COHERE2_MARKERS = ("<|START_", "<|END_")
FORMATS = [
    Format("mistral", mistral_array, ("[TOOL_CALLS]",), id="mistral_array"),
    Format("nemotron_json", nemotron_json, ("<TOOLCALL>",)),
    Format("granite", granite, ("<|tool_call|>", "<tool_call>"), verbatim=False),
    Format("firefunction_v2", firefunction_v2, ("functools[",)),
    Format("phi4_mini_json", phi4_mini_json, ("functools[",)),
    Format("apriel", apriel, ("<tool_calls>",)),
    Format("jamba", jamba, ("<tool_calls>",)),
    Format("hunyuan_a13b", hunyuan_a13b, ("<tool_calls>", "<think>")),
    # the template ends the action block with a newline
    Format("cohere_command", cohere_command, ("Action:",), verbatim=False,
           message=lambda before, after: (expected_content(before, "\n" + after), None)),
    Format("cohere_command2", cohere_command2, COHERE2_MARKERS, message=_plan_and_answer),
    Format("cohere_command4", cohere_command2, COHERE2_MARKERS, message=_plan_and_answer),
    Format("apertus", apertus, ("<|tools_prefix|>",)),
    Format("xlam", xlam, ("```", "<tool_call>", "[TOOL_CALLS]"),
           fits=lambda before, after: bool(before.strip()) and not after.lstrip().startswith(("`", "<"))),
    Format("minimax", minimax, ("<tool_calls>", "<think>")),
]


test_calls_round_trip_with_the_text_around_them, test_every_split_and_every_prefix = json_shape_tests(FORMATS)


# ---- cases: malformed openings, formats' own edges, real model-output shapes ----

CASES = [
    # (format, text, calls, content, reasoning)
    ("nemotron_json", "<TOOLCALL>not a list</TOOLCALL>", [], "<TOOLCALL>not a list</TOOLCALL>", None),
    ("nemotron_json", '<TOOLCALL>[{"name": "f", "arguments": {"a": 1}}]', [("f", '{"a": 1}')], None, None),  # no closing
    ("nemotron_json", '<TOOLCALL>[{"arguments": {"a": 1}, "name": "f"}]</TOOLCALL>', [("f", '{"a": 1}')], None, None),
    ("granite", '<tool_call>[{"name": "f", "arguments": {}}]', [("f", "{}")], None, None),  # Granite 3.1's marker
    ("granite", "<|tool_call|>oops", [], "oops", None),  # a control token that opens no call is dropped
    # vLLM's granite drops or garbles the text after the call (its tests mark that xfail); we keep it, as content
    ("granite", "Let me check.\n<|tool_call|> [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]\nOne moment.",
     [("get_weather", '{"city": "Oslo"}')], "Let me check.\nOne moment.", None),
    ("granite", '<|tool_call|>[{"arguments": {"city": "Oslo"}, "name": "get_weather"}, '
                '{"arguments": {"tz": "CET"}, "name": "get_time"}]',
     [("get_weather", '{"city": "Oslo"}'), ("get_time", '{"tz": "CET"}')], None, None),
    ("firefunction_v2", "use functools[ carefully", [], "use functools[ carefully", None),
    ("firefunction_v2", ' functools[{"name": "f", "arguments": {"a": 1}}] done', [("f", '{"a": 1}')], "done", None),
    # phi4_mini_json: vLLM's parser returns no content at all once it finds calls; the text is the model's answer
    ("phi4_mini_json", 'I will look it up. functools[{"name": "get_weather", "parameters": {"location": "Oslo"}}]',
     [("get_weather", '{"location": "Oslo"}')], "I will look it up.", None),
    ("cohere_command", "Action: none needed", [], "Action: none needed", None),
    ("cohere_command", 'Action:\n```json\n[\n    {"parameters": {"x": 2}, "tool_name": "f"}\n]```',
     [("f", '{"x": 2}')], None, None),
    ("cohere_command2", "<|START_RESPONSE|>Hi <b>there</b><|END_RESPONSE|>", [], "Hi <b>there</b>", None),
    ("cohere_command2", "<|START_THINKING|>cut off <|END_THINK", [], None, "cut off <|END_THINK"),
    ("cohere_command2", '<|START_ACTION|>[{"tool_name": "f", "parameters": {}}]<|END_ACTION|>', [("f", "{}")], None, None),
    ("cohere_command2", "<|START_ACTION|>no list<|END_ACTION|>", [], "no list", None),
    # Command A Reasoning (vLLM's cohere_command4 tests): the plan, then the action list on lines of its own
    ("cohere_command4", '<|START_THINKING|> i will call foo with query1<|END_THINKING|><|START_ACTION|>\n[\n    '
                        '{"tool_call_id": "0", "tool_name": "foo", "parameters": {"query": "query1"}},\n    '
                        '{"tool_call_id": "1", "tool_name": "bar", "parameters": {"x": 42}}\n]\n<|END_ACTION|>',
     [("foo", '{"query": "query1"}'), ("bar", '{"x": 42}')], None, " i will call foo with query1"),
    ("apertus", '<|tools_prefix|>[{"f": {"a": [1, {"b": null}]}}, {"g": {}}]<|tools_suffix|>',
     [("f", '{"a": [1, {"b": null}]}'), ("g", "{}")], None, None),
    ("apertus", '<|tools_prefix|>[{"f": {"a": 1}, "extra": 2}]<|tools_suffix|>', [("f", '{"a": 1}')], None, None),
    # apertus cut off inside the list, or without its suffix: the calls written so far stand
    ("apertus", '<|tools_prefix|>[{"get_weather": {"location": "Oslo"}', [("get_weather", '{"location": "Oslo"}')], None, None),
    ("apertus", 'Sure. <|tools_prefix|>[{"f": {"a": 1}}]', [("f", '{"a": 1}')], "Sure.", None),
    ("apriel", '<tool_calls>[{"name": "f", "arguments": {"a": "x"}, "id": "abc123"}]</tool_calls>',
     [("f", '{"a": "x"}')], None, None),
    # xlam: the list alone, in a code block after prose, in tool_call tags; a list in the middle of prose is content
    ("xlam", '[{"name": "get_weather", "arguments": {"location": "Oslo", "days": 2}}]',
     [("get_weather", '{"location": "Oslo", "days": 2}')], None, None),
    ("xlam", 'Let me check.\n```json\n[{"name": "get_weather", "arguments": {"location": "Oslo"}}]\n```',
     [("get_weather", '{"location": "Oslo"}')], "Let me check.", None),
    ("xlam", '<tool_call>[{"name": "get_weather", "arguments": {"location": "Oslo"}}]</tool_call>',
     [("get_weather", '{"location": "Oslo"}')], None, None),
    ("xlam", 'The list [{"name": "x"}] is an example.', [], 'The list [{"name": "x"}] is an example.', None),
    # hunyuan_a13b: nested arguments (vLLM's streaming regex is marked "not support nested json object"; its streamed
    # and whole results then differ); a call list inside a think block is no call (as vLLM); the template's
    # "助手：" prefix, which vLLM cuts from call-free answers, is the model's text and stays
    ("hunyuan_a13b", '<tool_calls>[{"name": "get_weather", "arguments": {"location": {"city": "Beijing", "geo": [39.9, 116.4]}}}]'
                     "</tool_calls>", [("get_weather", '{"location": {"city": "Beijing", "geo": [39.9, 116.4]}}')], None, None),
    ("hunyuan_a13b", '<think>I could call <tool_calls>[{"name": "f", "arguments": {}}]</tool_calls></think>\n'
                     '<tool_calls>[{"name": "get_weather", "arguments": {}}]</tool_calls>', [("get_weather", "{}")],
     '<think>I could call <tool_calls>[{"name": "f", "arguments": {}}]</tool_calls></think>', None),
    ("hunyuan_a13b", "助手：你好", [], "助手：你好", None),
    # jamba: content around the list; the list written with newlines as the model writes it
    ("jamba", 'Checking.\n<tool_calls>[\n    {"name": "get_weather", "arguments": {"location": "Dallas", "unit": "f"}},\n'
              '    {"name": "get_weather", "arguments": {"location": "Orlando", "unit": "f"}}\n]</tool_calls>',
     [("get_weather", '{"location": "Dallas", "unit": "f"}'), ("get_weather", '{"location": "Orlando", "unit": "f"}')],
     "Checking.", None),
    # minimax (M1): calls one per line; calls written while thinking are no calls (vLLM removes them from think
    # blocks before it parses; here the think block, calls and all, is content for the reasoning parser's side)
    ("minimax", '<think>I could use <tool_calls>\n{"name": "search", "arguments": {}}\n</tool_calls></think>\nSure.\n'
                '<tool_calls>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n{"name": "get_weather", '
                '"arguments": {"location": "Rome"}}\n</tool_calls>',
     [("get_weather", '{"location": "Paris"}'), ("get_weather", '{"location": "Rome"}')],
     '<think>I could use <tool_calls>\n{"name": "search", "arguments": {}}\n</tool_calls></think>\nSure.', None),
]


@pytest.mark.parametrize("name,text,calls,content,reasoning", CASES)
def test_format_cases(name, text, calls, content, reasoning):
    result = assert_split_invariant(name, text, WEATHER_TOOLS, every_split=True)
    assert result == {"content": content, "reasoning_content": reasoning, "calls": calls}


# ---- one bad entry costs only itself ----

BAD_ENTRIES = [
    # (format, text, calls, content). vLLM's minimax tests: an entry that is no JSON, or that names no function
    ("minimax", '<tool_calls>\n{"name": "valid_tool", "arguments": {"city": "Seattle"}}\n{invalid json here}\n'
                '{"name": "another_valid_tool", "arguments": {"param": "value"}}\n</tool_calls>',
     [("valid_tool", '{"city": "Seattle"}'), ("another_valid_tool", '{"param": "value"}')], None),
    ("minimax", '<tool_calls>\n{"name": "valid_tool", "arguments": {"city": "Seattle"}}\n{"arguments": {"city": '
                '"Portland"}}\n{"name": "another_valid_tool", "arguments": {"param": "value"}}\n</tool_calls> Done.',
     [("valid_tool", '{"city": "Seattle"}'), ("another_valid_tool", '{"param": "value"}')], "Done."),
    # arguments that break: the call keeps what streamed (a client saw it), the rest of its object is skipped
    ("minimax", '<tool_calls>\n{"name": "f", "arguments": {"a": yes}}\n{"name": "g", "arguments": {}}\n</tool_calls>',
     [("f", '{"a": '), ("g", "{}")], None),
    # an entry whose brackets never balance stops at the list's closing tag: the answer after it is kept
    ("minimax", '<tool_calls>\n{"name": "f", "arguments": {"a": 1}\n{"name": "g", "arguments": {}}\n</tool_calls> after',
     [("f", '{"a": 1}')], "after"),
    ("apriel", '<tool_calls>[{"bad": 1}, {"name": "f", "arguments": {"a": 1}}]</tool_calls> x', [("f", '{"a": 1}')], "x"),
    ("apriel", '<tool_calls>[{"name": "f", "arguments": {"a": 1}, {"name": "g", "arguments": {}}]</tool_calls> x',
     [("f", '{"a": 1}')], "x"),  # f's object never closes: its list's "]" ends it
    ("nemotron_json", '<TOOLCALL>[{"name": "f", "arguments": {"a": "x\ty"}}, {"name": "g", "arguments": {}}]</TOOLCALL>',
     [("f", '{"a": "x'), ("g", "{}")], None),  # a raw tab breaks f's string
    ("cohere_command2", '<|START_ACTION|>[{"tool_name": "f", "parameters": {"a": bad}}, {"tool_name": "g", '
                        '"parameters": {}}]<|END_ACTION|>', [("f", '{"a": '), ("g", "{}")], None),
    ("apertus", '<|tools_prefix|>[{"f": 3}, {"g": {"a": 1}}]<|tools_suffix|>ok', [("g", '{"a": 1}')], "ok"),
    # the markers are control tokens and the entry is no call: nothing of it reaches the content
    ("apertus", '<|tools_prefix|>[{"f": 3}]<|tools_suffix|>', [], None),
    # a list that only looks like one (a bare "[" in prose, a plain-text opener) must hold a call first
    ("xlam", '[{"x": 1}]', [], '[{"x": 1}]'),
    ("xlam", '[{"name": "f", "arguments": {}}, {"x": 1}, {"name": "g", "arguments": {}}] ok', [("f", "{}"), ("g", "{}")],
     "ok"),
    ("xlam", '[{"name": "f", "arguments": {"a": yes}}, {"name": "g", "arguments": {}}] ok', [("f", '{"a": '), ("g", "{}")],
     "ok"),
    ("firefunction_v2", 'see functools[{"x": 1}]', [], 'see functools[{"x": 1}]'),
]


@pytest.mark.parametrize("name,text,calls,content", BAD_ENTRIES)
def test_one_bad_entry_costs_only_itself(name, text, calls, content):
    result = assert_split_invariant(name, text, every_split=True)
    assert (result["calls"], result["content"]) == (calls, content)


# ---- arguments written as a Python literal: Apriel's template renders dict arguments with |string ----

def test_apriel_arguments_written_as_python_literals_parse_back():
    text = ("<tool_calls>[{\"name\": \"get_weather\", \"arguments\": {'location': 'São Paulo <centro>', 'days': 3}}, "
            "{\"name\": \"now\", \"arguments\": {}}]</tool_calls>")
    result = assert_split_invariant("apriel", text, every_split=True)
    assert result["calls"] == [("get_weather", '{"location": "São Paulo <centro>", "days": 3}'), ("now", "{}")]


# ---- xlam after a think block: the list opens the answer ----

@pytest.mark.parametrize("text,calls,content", [
    ('<think>The user wants the weather in Oslo; I will call the tool.</think>\n[{"name": "get_weather", "arguments": '
     '{"location": "Oslo"}}]', [("get_weather", '{"location": "Oslo"}')],
     "<think>The user wants the weather in Oslo; I will call the tool.</think>"),
    ("<think>No tool is needed.</think>\nIt is 4.", [], "<think>No tool is needed.</think>\nIt is 4."),
    ("<think>cut off", [], "<think>cut off"),
])
def test_xlam_reads_a_list_after_a_think_block(text, calls, content):
    result = assert_split_invariant("xlam", text, every_split=True)
    assert (result["calls"], result["content"]) == (calls, content)


# ---- token by token on the real Qwen3 vocabulary ----

@pytest.mark.parametrize("name,text", [(name, text) for name, text, _, _ in BAD_ENTRIES[:3]] + [
    ("apriel", "<tool_calls>[{\"name\": \"get_weather\", \"arguments\": {'location': 'Oslo'}}]</tool_calls>"),
    ("xlam", '<think>Call it.</think>\n[{"name": "get_weather", "arguments": {"location": "Oslo"}}]'),
])
def test_ids_of_the_real_vocabulary_stream_like_the_whole_text(name, text):
    assert assert_ids_stream_like_whole(qwen()[0], name, text, WEATHER_TOOLS)["calls"]
