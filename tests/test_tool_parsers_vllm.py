"""The rest of vLLM's tool-parser list (deepseek_v32, glm47, qwen3_xml, llama4_json, xlam, phi4_mini_json,
hunyuan_a13b, ernie45, internlm, jamba, step3, longcat, olmo3, lfm2, gigachat3, llama4_pythonic, minimax, deepseek_v4, granite-20b-fc, step3p5, functiongemma, kimi_k3, hy_v3).

Model text is rendered the way each model writes calls (the shapes in vLLM's parser tests and the models'
templates; format literals next to each renderer); whole-text parse and streamed parse agree however it is
split; markers never reach content; a long argument fed one character at a time stays linear. Where vLLM's
own parser gets a shape wrong, the case says which behaviour we chose and why.
"""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.test_tool_text_values import tools_for, typed_calls
from tests.tool_formats import (EXAMPLES, assert_every_prefix, assert_soup_streams_like_whole,
                                assert_split_invariant, calls_lists, cuts, dumps, expected_content, json_scalars,
                                json_values, names, nasty_text, small_calls, stream, summary)
from tokworker.parsers.tools import TOOL_PARSERS, get_tool_parser

SETTINGS = settings(max_examples=max(EXAMPLES // 3, 10), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def as_json_text(value) -> str:
    return value if isinstance(value, str) else dumps(value)


# ---- text-valued formats: renderers ----

def deepseek_v32(calls, before="", after=""):
    # DeepSeek-V3.2's encoding (encoding_dsv32.py, as vLLM's tests write it): content + '\n\n<｜DSML｜function_calls>\n'
    # + per call '<｜DSML｜invoke name="' NAME '">\n' + per argument '<｜DSML｜parameter name="' K '" string="' true|false
    # '">' V '</｜DSML｜parameter>\n' (V: strings as they are, else JSON) + '</｜DSML｜invoke>\n', then '</｜DSML｜function_calls>'
    def param(k, v):
        return '<｜DSML｜parameter name="%s" string="%s">%s</｜DSML｜parameter>\n' % (
            k, "true" if isinstance(v, str) else "false", as_json_text(v))
    body = "".join('<｜DSML｜invoke name="%s">\n%s</｜DSML｜invoke>\n' % (n, "".join(param(k, v) for k, (_, v) in p.items()))
                   for n, p in calls)
    return before + "\n\n<｜DSML｜function_calls>\n" + body + "</｜DSML｜function_calls>" + after


def deepseek_v4(calls, before="", after=""):
    # DeepSeek V4 (vLLM's parser): V3.2's invokes in <｜DSML｜tool_calls> instead of <｜DSML｜function_calls>
    return deepseek_v32(calls, before, after).replace("｜DSML｜function_calls>", "｜DSML｜tool_calls>")


def glm47(calls, before="", after=""):
    # GLM-4.7's template: content + '<tool_call>' NAME + per argument '<arg_key>' K '</arg_key><arg_value>' V
    # '</arg_value>' (V: strings as they are, else tojson) + '</tool_call>', nothing in between
    body = "".join("<tool_call>%s%s</tool_call>" % (n, "".join("<arg_key>%s</arg_key><arg_value>%s</arg_value>"
                                                            % (k, as_json_text(v)) for k, (_, v) in p.items()))
                   for n, p in calls)
    return before + body + after


def step3(calls, before="", after=""):
    # Step-3's template: content + '<｜tool_calls_begin｜>' + per call '<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke
    # name="' NAME '">' + per argument '<steptml:parameter name="' K '">' V '</steptml:parameter>' (V: strings as they
    # are, else tojson) + '</steptml:invoke><｜tool_call_end｜>', then '<｜tool_calls_end｜>'
    body = "".join('<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="%s">%s</steptml:invoke><｜tool_call_end｜>'
                   % (n, "".join('<steptml:parameter name="%s">%s</steptml:parameter>' % (k, as_json_text(v))
                                 for k, (_, v) in p.items())) for n, p in calls)
    return before + "<｜tool_calls_begin｜>" + body + "<｜tool_calls_end｜>" + after


def functiongemma(calls, before="", after=""):
    # FunctionGemma's template: '<start_function_call>call:' NAME '{' + 'K:<escape>V<escape>' joined by ',' + '}'
    # + '<end_function_call>' (V: strings as they are, else JSON)
    body = "".join("<start_function_call>call:%s{%s}<end_function_call>"
                   % (n, ",".join("%s:<escape>%s<escape>" % (k, as_json_text(v)) for k, (_, v) in p.items()))
                   for n, p in calls)
    return before + body + after


def kimi_k3(calls, before="", after=""):
    # Kimi K3's XTML (vLLM's parser docstring): the reply in '<|open|>response<|sep|>' ... '<|close|>response<|sep|>', then
    # '<|open|>tools<|sep|>' + per call '<|open|>call tool="' NAME '" index="' I '"<|sep|>' + per argument
    # '<|open|>argument key="' K '" type="' T '"<|sep|>' V '<|close|>argument<|sep|>' (V: strings raw, else JSON)
    # + '<|close|>call<|sep|>', then '<|close|>tools<|sep|>'
    def kind(v):
        return "string" if isinstance(v, str) else "object" if isinstance(v, dict) else "array" if isinstance(v, list) else "number"
    body = "".join('<|open|>call tool="%s" index="%d"<|sep|>%s<|close|>call<|sep|>'
                   % (n, i, "".join('<|open|>argument key="%s" type="%s"<|sep|>%s<|close|>argument<|sep|>'
                                    % (k, kind(v), as_json_text(v)) for k, (_, v) in p.items()))
                   for i, (n, p) in enumerate(calls))
    reply = "<|open|>response<|sep|>" + before + "<|close|>response<|sep|>" if before else ""
    return reply + "<|open|>tools<|sep|>" + body + "<|close|>tools<|sep|>" + after


def hy_v3(calls, before="", after=""):
    # Hunyuan v3 (vLLM's parser): content + '<tool_calls>' + per call '<tool_call>' NAME '<tool_sep>' + per argument
    # '<arg_key>' K '</arg_key><arg_value>' V '</arg_value>' (V: strings as they are, else JSON) + '</tool_call>',
    # then '</tool_calls>'
    body = "".join("<tool_call>%s<tool_sep>%s</tool_call>" % (n, "".join("<arg_key>%s</arg_key><arg_value>%s</arg_value>"
                                                                      % (k, as_json_text(v)) for k, (_, v) in p.items()))
                   for n, p in calls)
    return before + "<tool_calls>" + body + "</tool_calls>" + after


DSML_END = ("</｜DSML｜parameter>", "<｜DSML｜parameter name=", "</｜DSML｜invoke>")
no_edge_newlines = nasty_text.filter(lambda s: not s.startswith("\n") and not s.endswith("\n"))
TEXT_FORMATS = [
    # name, renderer, strings a value may not hold, untyped values, markers plain text may not hold,
    # whether one newline at a value's edges is formatting
    ("deepseek_v32", deepseek_v32, DSML_END, nasty_text | st.integers(), ["<｜DSML｜"], False),
    ("functiongemma", functiongemma, ("<escape>",), st.none() | st.integers() | st.lists(st.integers(), max_size=2),
     ["<start_function_call>"], False),
    ("kimi_k3", kimi_k3, ("<|close|>argument<|sep|>",), nasty_text | st.integers(), ["<|open|>", "<|close|>", "<|sep|>"],
     False),
    ("hy_v3", hy_v3, ("</arg_value>",), nasty_text, ["<tool_calls>"], False),
    ("deepseek_v4", deepseek_v4, DSML_END, nasty_text | st.integers(), ["<｜DSML｜"], False),
    ("step3", step3, ("</steptml:parameter>", "<steptml:parameter name=", "</steptml:invoke>"), no_edge_newlines,
     ["<｜tool_call"], True),
    ("glm47", glm47, ("</arg_value>",), st.none() | st.integers() | st.lists(st.integers(), max_size=2), ["<tool_call>"],
     False),
]
TEXT_IDS = [f[0] for f in TEXT_FORMATS]


def _edges_ok(calls, strips):
    return not strips or all(not (isinstance(v, str) and (v[:1] == "\n" or v[-1:] == "\n"))
                             for _, p in calls for _, v in p.values())


@pytest.mark.parametrize("name,render,forbidden,untyped,markers,strips", TEXT_FORMATS, ids=TEXT_IDS)
@SETTINGS
@given(data=st.data(), before=nasty_text, after=nasty_text, chunking=cuts)
def test_text_valued_round_trip(name, render, forbidden, untyped, markers, strips, data, before, after, chunking):
    calls = data.draw(typed_calls(forbidden, untyped))
    assume(_edges_ok(calls, strips))
    assume(not any(m in before + after for m in markers))
    tools = tools_for(calls)
    text = render(calls, before, after)
    result = assert_split_invariant(name, text, tools, cuts=chunking)
    assert [n for n, _ in result["calls"]] == [n for n, _ in calls]
    for (_, streamed), (_, params) in zip(result["calls"], calls):
        assert json.loads(streamed) == {k: v for k, (_, v) in params.items()}
    assert result["content"] == expected_content(before, after)


@pytest.mark.parametrize("name,render,forbidden,untyped,markers,strips", TEXT_FORMATS, ids=TEXT_IDS)
@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_text_valued_every_split_and_every_prefix(name, render, forbidden, untyped, markers, strips, data):
    calls = data.draw(typed_calls(forbidden, st.integers()))
    assume(_edges_ok(calls, strips))
    tools = tools_for(calls)
    text = render(calls)
    full = assert_split_invariant(name, text, tools, every_split=True)
    for part in assert_every_prefix(name, text, tools):
        complete = max(len(part["calls"]) - 1, 0)
        assert part["calls"][:complete] == full["calls"][:complete]


# ---- JSON formats: renderers ----

def _objects(calls, args_key="arguments", sep=", "):
    return sep.join('{"name": "%s", "%s": %s}' % (n, args_key, dumps(a)) for n, a in calls)


def xlam(calls, before="", after=""):
    # xLAM's answer is the JSON list itself (vLLM's tests: the bare list, or in a ```json block after prose)
    if before:
        return before + "\n```json\n[" + _objects(calls) + "]\n```" + after
    return "[" + _objects(calls) + "]" + after


def phi4_mini_json(calls, before="", after=""):
    # Phi-4-mini (vLLM's tool_chat_template_phi4_mini.jinja asks for it): 'functools[' + call objects + ']'
    return before + "functools[" + _objects(calls) + "]" + after


def hunyuan_a13b(calls, before="", after=""):
    # Hunyuan-A13B (vLLM's tests): '<tool_calls>[' + call objects + ']</tool_calls>'
    return before + "<tool_calls>[" + _objects(calls) + "]</tool_calls>" + after


def jamba(calls, before="", after=""):
    # Jamba 1.5/1.6 (vLLM's tests): '<tool_calls>[\n    ' + call objects + '\n]</tool_calls>'
    return before + "<tool_calls>[\n    " + _objects(calls, sep=",\n    ") + "\n]</tool_calls>" + after


def ernie45(calls, before="", after=""):
    # ERNIE 4.5 (vLLM's tests): content + '\n\n<tool_call>\n' + call object + '\n</tool_call>\n' per call
    return before + "".join("\n\n<tool_call>\n%s\n</tool_call>\n" % _objects([c]) for c in calls) + after


def internlm(calls, before="", after=""):
    # InternLM2.5 (its template): content + '<|action_start|><|plugin|>\n' + {"name", "parameters"} + '<|action_end|>'
    return before + "".join("<|action_start|><|plugin|>\n%s<|action_end|>" % _objects([c], "parameters")
                            for c in calls) + after


def longcat(calls, before="", after=""):
    # LongCat-Flash (vLLM's tests): '<longcat_tool_call>' + call object + '</longcat_tool_call>' per call
    return before + "".join("<longcat_tool_call>%s</longcat_tool_call>" % _objects([c]) for c in calls) + after


def granite_20b_fc(calls, before="", after=""):
    # Granite 20B FC (vLLM's tests): content + '\n<function_call> ' + call object, per call, one per line
    return before + "".join("\n<function_call> " + _objects([c]) for c in calls) + after


def minimax(calls, before="", after=""):
    # MiniMax-M1's template: content + '\n<tool_calls>\n' + one call object per line + '\n</tool_calls>'
    return before + "\n<tool_calls>\n" + _objects(calls, sep="\n") + "\n</tool_calls>" + after


def gigachat3(calls, before="", after=""):
    # GigaChat 3 (vLLM's tests): content + '<|message_sep|>\n\nfunction call<|role_sep|>\n' + call object + '</s>';
    # one call per answer
    return before + "<|message_sep|>\n\nfunction call<|role_sep|>\n" + _objects(calls[:1]) + "</s>" + after


JSON_FORMATS = [
    # name, renderer, markers text around the calls may not hold
    ("xlam", xlam, ["```", "<tool_call>", "[TOOL_CALLS]"]),
    ("phi4_mini_json", phi4_mini_json, ["functools["]),
    ("hunyuan_a13b", hunyuan_a13b, ["<tool_calls>", "<think>"]),
    ("jamba", jamba, ["<tool_calls>"]),
    ("ernie45", ernie45, ["<tool_call>", "<response>", "</response>"]),
    ("internlm", internlm, ["<|action_start|><|plugin|>"]),
    ("longcat", longcat, ["<longcat_tool_call>"]),
    ("gigachat3", gigachat3, ["<|message_sep|>", "<|function_call|>", "</s>"]),
    ("minimax", minimax, ["<tool_calls>", "<think>"]),
    ("granite-20b-fc", granite_20b_fc, ["<function_call>"]),
]
JSON_IDS = [f[0] for f in JSON_FORMATS]


@pytest.mark.parametrize("name,render,markers", JSON_FORMATS, ids=JSON_IDS)
@SETTINGS
@given(calls=calls_lists, before=nasty_text, after=nasty_text, chunking=cuts)
def test_json_formats_round_trip(name, render, markers, calls, before, after, chunking):
    assume(not any(m in before + after for m in markers))
    if name == "xlam":
        assume(before.strip() and not after.lstrip().startswith(("`", "<")))
    text = render(calls, before, after)
    if name == "gigachat3":
        calls = calls[:1]
    result = assert_split_invariant(name, text, cuts=chunking)
    assert result["calls"] == [(n, dumps(a)) for n, a in calls]
    if name == "ernie45":  # the template's newline after the last call separates it from text that follows
        after = "\n" + after
    assert result["content"] == expected_content(before, after), text


@pytest.mark.parametrize("name,render,markers", JSON_FORMATS, ids=JSON_IDS)
@settings(max_examples=6, deadline=None)
@given(calls=small_calls, before=nasty_text)
def test_json_formats_every_split_and_every_prefix(name, render, markers, calls, before):
    assume(not any(m in before for m in markers))
    text = render(calls, before if name != "xlam" else "")
    full = assert_split_invariant(name, text, every_split=True)
    assert full["calls"] == [(n, dumps(a)) for n, a in (calls[:1] if name == "gigachat3" else calls)]
    for part in assert_every_prefix(name, text):
        for (name_p, args_p), (name_f, args_f) in zip(part["calls"], full["calls"]):
            assert name_p == name_f and args_f.startswith(args_p)
        complete = max(len(part["calls"]) - 1, 0)
        assert part["calls"][:complete] == full["calls"][:complete]


# ---- pythonic formats: renderers ----

def _pythonic_calls(calls, sep=", "):
    return sep.join("%s(%s)" % (n, ", ".join("%s=%r" % (k, v) for k, v in a.items())) for n, a in calls)


def lfm2(calls, before="", after=""):
    # LFM2's template (vLLM's tests): content + '<|tool_call_start|>[' + calls + ']<|tool_call_end|>' + content
    return before + "<|tool_call_start|>[" + _pythonic_calls(calls) + "]<|tool_call_end|>" + after


def olmo3(calls, before="", after=""):
    # OLMo 3's template: '<function_calls>' + one call per line + '</function_calls>'
    return before + "<function_calls>" + _pythonic_calls(calls, "\n") + "</function_calls>" + after


def llama4_pythonic(calls, before="", after=""):
    # Llama 4's pythonic template (vLLM's tests): '<|python_start|>[' + calls + ']<|python_end|>' at the start
    return "<|python_start|>[" + _pythonic_calls(calls) + "]<|python_end|>" + after


PYTHONIC_FORMATS = [
    ("lfm2", lfm2, ["<|tool_call_start|>", "<|tool_call_end|>"]),
    ("olmo3", olmo3, ["<function_calls>"]),
    ("llama4_pythonic", llama4_pythonic, ["<|python_end|>"]),
]
python_calls = st.lists(st.tuples(names, st.dictionaries(names, json_values, max_size=3)), min_size=1, max_size=3)


@pytest.mark.parametrize("name,render,markers", PYTHONIC_FORMATS, ids=[f[0] for f in PYTHONIC_FORMATS])
@SETTINGS
@given(calls=python_calls, before=nasty_text, after=nasty_text, chunking=cuts)
def test_pythonic_formats_round_trip(name, render, markers, calls, before, after, chunking):
    assume(not any(m in before + after for m in markers))
    if name == "llama4_pythonic":
        before = ""
    text = render(calls, before, after)
    result = assert_split_invariant(name, text, cuts=chunking)
    assert result["calls"] == [(n, dumps(a)) for n, a in calls]
    assert result["content"] == expected_content(before, after), text


@pytest.mark.parametrize("name,render,markers", PYTHONIC_FORMATS, ids=[f[0] for f in PYTHONIC_FORMATS])
@settings(max_examples=6, deadline=None)
@given(calls=st.lists(st.tuples(names, st.dictionaries(names, json_scalars, max_size=2)), min_size=1, max_size=2))
def test_pythonic_formats_every_split_and_every_prefix(name, render, markers, calls):
    text = render(calls, "Sure." if name != "llama4_pythonic" else "")
    full = assert_split_invariant(name, text, every_split=True)
    assert full["calls"] == [(n, dumps(a)) for n, a in calls]
    for part in assert_every_prefix(name, text):
        complete = max(len(part["calls"]) - 1, 0)
        assert part["calls"][:complete] == full["calls"][:complete]


# ---- cases: real model-output shapes (from vLLM's tests and issues), malformed openings, vLLM's bugs ----

WEATHER_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "location": {"type": "string"}, "date": {"type": "string"}, "days": {"type": "integer"},
    "unit": {"type": "string", "enum": ["c", "f"]}}}}},
    {"type": "function", "function": {"name": "calculate_area", "parameters": {"type": "object", "properties": {
        "shape": {"type": "string"}, "dimensions": {"type": "object"}, "precision": {"type": "integer"}}}}}]

CASES = [
    # (format, text, calls, content)
    ("deepseek_v32", "I'll check both cities.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
                     "<｜DSML｜parameter name=\"location\" string=\"true\">杭州</｜DSML｜parameter>\n"
                     "<｜DSML｜parameter name=\"date\" string=\"true\">2024-01-16</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
                     "<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"location\" string=\"true\">北京"
                     "</｜DSML｜parameter>\n<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
                     "</｜DSML｜invoke>\n</｜DSML｜function_calls>",
     [("get_weather", '{"location": "杭州", "date": "2024-01-16"}'), ("get_weather", '{"location": "北京", "days": 3}')],
     "I'll check both cities."),
    # string="true" is text even where it looks like JSON; string="false" is JSON when no schema types it
    ("deepseek_v32", '<｜DSML｜function_calls><｜DSML｜invoke name="f"><｜DSML｜parameter name="a" string="true">[1]'
                     '</｜DSML｜parameter><｜DSML｜parameter name="b" string="false">{"x": [1, null]}</｜DSML｜parameter>'
                     '</｜DSML｜invoke></｜DSML｜function_calls>', [("f", '{"a": "[1]", "b": {"x": [1, null]}}')], None),
    ("deepseek_v32", '<｜DSML｜function_calls>\n<｜DSML｜invoke name="now">\n</｜DSML｜invoke>\n</｜DSML｜function_calls> Done.',
     [("now", "{}")], "Done."),
    ("deepseek_v32", "<｜DSML｜function_calls>\nno invoke here", [], "<｜DSML｜function_calls>\nno invoke here"),
    # GLM-4.7: no-argument calls inline or with a newline, arguments on one line, a literal backslash-n the model
    # wrote between key and value (formatting, as vLLM's glm47 reads it)
    ("glm47", "Checking.<tool_call>get_current_date</tool_call><tool_call>get_current_date\n</tool_call>",
     [("get_current_date", "{}"), ("get_current_date", "{}")], "Checking."),
    ("glm47", "<tool_call>get_weather<arg_key>location</arg_key><arg_value>Beijing</arg_value><arg_key>days</arg_key>"
              "\\n<arg_value>2</arg_value></tool_call>", [("get_weather", '{"location": "Beijing", "days": 2}')], None),
    ("glm47", "  \n  <tool_call>get_weather\n<arg_key>location</arg_key>\n<arg_value>Shanghai</arg_value>\n</tool_call>",
     [("get_weather", '{"location": "Shanghai"}')], None),
    # qwen3_xml is vLLM's second reader of qwen3_coder's XML (vLLM's tests run both parsers on one shared set)
    ("qwen3_xml", "Let me look.\n<tool_call>\n<function=get_weather>\n<parameter=location>\nParis, France\n"
                  "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
     [("get_weather", '{"location": "Paris, France", "days": 3}')], "Let me look."),
    # step3: the shapes of vLLM's tests, which leave out "function<｜tool_sep｜>" (vLLM's whole-text parser then finds
    # no call: its tests mark that xfail) and put <｜tool_sep｜> between parallel calls (xfail too); typed values
    ("step3", "Let me check the weather for you.\n\n<｜tool_calls_begin｜><｜tool_call_begin｜><steptml:invoke name="
              '"get_weather"><steptml:parameter name="location">Tokyo</steptml:parameter><steptml:parameter name="days">'
              "2</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_sep｜><｜tool_call_begin｜><steptml:invoke "
              'name="get_time"><steptml:parameter name="timezone">Asia/Tokyo</steptml:parameter></steptml:invoke>'
              "<｜tool_call_end｜><｜tool_calls_end｜>\n\nI'll get that information.",
     [("get_weather", '{"location": "Tokyo", "days": 2}'), ("get_time", '{"timezone": "Asia/Tokyo"}')],
     "Let me check the weather for you.\n\nI'll get that information."),
    ("step3", '<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="f"><steptml:parameter '
              'name="q">He said "hello" & 1 < 2</steptml:parameter><steptml:parameter name="path">C:\\Users\\a.txt'
              '</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>',
     [("f", '{"q": "He said \\"hello\\" & 1 < 2", "path": "C:\\\\Users\\\\a.txt"}')], None),  # vLLM: no "<" in a value
    ("step3", '<｜tool_call_begin｜><steptml:invoke name="refresh"></steptml:invoke><｜tool_call_end｜>', [("refresh", "{}")], None),
    ("step3", '<｜tool_calls_begin｜><｜tool_call_begin｜><steptml:invoke name="func">', [("func", "{}")], None),
    # Step-3's markers are control tokens: one that opens no call, or is left over, never reaches content
    ("step3", "<｜tool_calls_begin｜>no call here<｜tool_calls_end｜> done", [], "no call here done"),
    ("step3", '<｜tool_call_begin｜><steptml:invoke name="f"></steptml:invoke><｜tool_call_end｜><｜tool_call_end｜>'
              "<｜tool_calls_end｜>", [("f", "{}")], None),
    # lfm2: calls with content on both sides; the echo LFM2 sometimes writes after the call ends with a second
    # <|tool_call_end|>, dropped (vLLM drops the echoed call text too; we cannot tell it from prose, so it stays)
    ("lfm2", 'Let me check.<|tool_call_start|>[get_weather(location="Paris"), get_weather(location="Rome", days=2)]'
             "<|tool_call_end|>Both are sunny.",
     [("get_weather", '{"location": "Paris"}'), ("get_weather", '{"location": "Rome", "days": 2}')],
     "Let me check.Both are sunny."),
    ("lfm2", '<|tool_call_start|>[get_weather(location="Paris")]<|tool_call_end|>[get_weather(location="Paris")]'
             "<|tool_call_end|>", [("get_weather", '{"location": "Paris"}')], '[get_weather(location="Paris")]'),
    ("lfm2", "<|tool_call_start|>[get_weather(location='Par", [("get_weather", "{}")], "location='Par"),  # cut off
    # olmo3: a call per line, JSON spellings of values (vLLM's tests); text around the tags, which vLLM drops, is kept
    ("olmo3", '<function_calls>get_weather(location="San Francisco, CA", unit=null, verbose=true)\n'
              'get_weather(location="NYC", days=[1, 2])</function_calls>',
     [("get_weather", '{"location": "San Francisco, CA", "unit": null, "verbose": true}'),
      ("get_weather", '{"location": "NYC", "days": [1, 2]}')], None),
    ("olmo3", "I'll look.\n<function_calls>\nnow()\n</function_calls>", [("now", "{}")], "I'll look."),
    ("olmo3", "<function_calls>not a call</function_calls>", [], "<function_calls>not a call</function_calls>"),
    ("llama4_pythonic", '<|python_start|>[get_weather(location="Oslo"), now()]<|python_end|>',
     [("get_weather", '{"location": "Oslo"}'), ("now", "{}")], None),
    # xlam: the list alone, in a code block after prose, in tool_call tags; a list in the middle of prose is content
    ("xlam", '[{"name": "get_weather", "arguments": {"location": "Oslo", "days": 2}}]',
     [("get_weather", '{"location": "Oslo", "days": 2}')], None),
    ("xlam", 'Let me check.\n```json\n[{"name": "get_weather", "arguments": {"location": "Oslo"}}]\n```',
     [("get_weather", '{"location": "Oslo"}')], "Let me check."),
    ("xlam", '<tool_call>[{"name": "get_weather", "arguments": {"location": "Oslo"}}]</tool_call>',
     [("get_weather", '{"location": "Oslo"}')], None),
    ("xlam", 'The list [{"name": "x"}] is an example.', [], 'The list [{"name": "x"}] is an example.'),
    # phi4_mini_json: vLLM's parser returns no content at all once it finds calls; the text is the model's answer
    # to the user, so it stays content here
    ("phi4_mini_json", 'I will look it up. functools[{"name": "get_weather", "parameters": {"location": "Oslo"}}]',
     [("get_weather", '{"location": "Oslo"}')], "I will look it up."),
    # hunyuan_a13b: nested arguments (vLLM's streaming regex is marked "not support nested json object"; its streamed
    # and whole results then differ); a call list inside a think block is no call (as vLLM); the template's
    # "助手：" prefix, which vLLM cuts from call-free answers, is the model's text and stays
    ("hunyuan_a13b", '<tool_calls>[{"name": "get_weather", "arguments": {"location": {"city": "Beijing", "geo": [39.9, 116.4]}}}]'
                     "</tool_calls>", [("get_weather", '{"location": {"city": "Beijing", "geo": [39.9, 116.4]}}')], None),
    ("hunyuan_a13b", '<think>I could call <tool_calls>[{"name": "f", "arguments": {}}]</tool_calls></think>\n'
                     '<tool_calls>[{"name": "get_weather", "arguments": {}}]</tool_calls>', [("get_weather", "{}")],
     '<think>I could call <tool_calls>[{"name": "f", "arguments": {}}]</tool_calls></think>'),
    ("hunyuan_a13b", "助手：你好", [], "助手：你好"),
    # jamba: content around the list; the list written with newlines as the model writes it
    ("jamba", 'Checking.\n<tool_calls>[\n    {"name": "get_weather", "arguments": {"location": "Dallas", "unit": "f"}},\n'
              '    {"name": "get_weather", "arguments": {"location": "Orlando", "unit": "f"}}\n]</tool_calls>',
     [("get_weather", '{"location": "Dallas", "unit": "f"}'), ("get_weather", '{"location": "Orlando", "unit": "f"}')],
     "Checking."),
    # ernie45: the response tags of a call-free answer never reach content; calls after a think block's end
    ("ernie45", "<response>It is sunny in Beijing.</response>", [], "It is sunny in Beijing."),
    ("ernie45", '\n\n<tool_call>\n{"name": "get_weather", "arguments": {"location": "Beijing"}}\n</tool_call>\n'
                '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Shanghai"}}\n</tool_call>\n',
     [("get_weather", '{"location": "Beijing"}'), ("get_weather", '{"location": "Shanghai"}')], None),
    # internlm: vLLM reads only an answer's first action block (its parser splits on it once); every block is a call
    # here, as the template renders them; the code interpreter's block is content
    ("internlm", 'Sure.<|action_start|><|plugin|>\n{"name": "get_weather", "parameters": {"location": "Shanghai"}}'
                 '<|action_end|><|action_start|><|plugin|>\n{"name": "get_weather", "parameters": {"location": "Xian"}}'
                 "<|action_end|>", [("get_weather", '{"location": "Shanghai"}'), ("get_weather", '{"location": "Xian"}')],
     "Sure."),
    ("internlm", '<|action_start|><|plugin|>\n{"name": "f", "parameters": {"a": yes}}<|action_end|>', [("f", '{"a": ')],
     "yes}}"),  # the arguments broke: the call keeps what was sent; the leftover <|action_end|> is dropped
    ("internlm", "<|action_start|><|interpreter|>\nprint(1)<|action_end|>", [],
     "<|action_start|><|interpreter|>\nprint(1)<|action_end|>"),
    ("longcat", 'Sure.\n<longcat_tool_call>\n{"name": "get_weather", "arguments": {"location": "Oslo"}}\n'
                "</longcat_tool_call>", [("get_weather", '{"location": "Oslo"}')], "Sure."),
    ("longcat", '<longcat_tool_call>{"name": "get_weather", "arguments": {"location": "Os', [("get_weather", '{"location": "Os')],
     None),  # cut off: the call keeps what was streamed
    # gigachat3: GigaChat 3's role header and 3.1's <|function_call|> (vLLM's tests); the end-of-text </s> is dropped;
    # vLLM drops all text after a <|message_sep|> that opens no call, where we keep it (only the marker goes)
    ("gigachat3", "I'll check that for you.<|message_sep|>\n\nfunction call<|role_sep|>\n{\"name\": \"manage_user_memory\", "
                  '"arguments": {"action": "create", "content": {"short_answers": true, "english_ui": false}}}</s>',
     [("manage_user_memory", '{"action": "create", "content": {"short_answers": true, "english_ui": false}}')],
     "I'll check that for you."),
    ("gigachat3", '<|function_call|>{"name": "manage_user_memory", "arguments": {}}', [("manage_user_memory", "{}")], None),
    ("gigachat3", "Hello.<|message_sep|>\n\nHow can I help?", [], "Hello.\n\nHow can I help?"),
    # granite-20b-fc: vLLM's streaming reads a call only at the output's start (its tests mark text before it xfail)
    ("granite-20b-fc", 'Let me check the weather for you.\n<function_call> {"name": "get_weather", "arguments": '
                       '{"location": "Tokyo"}}\n<function_call> {"name": "get_time", "arguments": {"timezone": "Asia/Tokyo"}}',
     [("get_weather", '{"location": "Tokyo"}'), ("get_time", '{"timezone": "Asia/Tokyo"}')],
     "Let me check the weather for you."),
    ("granite-20b-fc", '<function_call> {\n  "name": "f",\n  "arguments": {\n    "a": [1, 2],\n    "b": {}\n  }\n}',
     [("f", '{\n    "a": [1, 2],\n    "b": {}\n  }')], None),  # the arguments as the model wrote them
    ("granite-20b-fc", '<function_call> [{"name": "func", "arguments": {}}]', [],
     '<function_call> [{"name": "func", "arguments": {}}]'),
    ("deepseek_v4", 'Ok.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="location" '
                    'string="true">杭州</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>',
     [("get_weather", '{"location": "杭州"}')], "Ok."),
    # minimax (M1): calls one per line; calls written while thinking are no calls (vLLM removes them from think
    # blocks before it parses; here the think block, calls and all, is content for the reasoning parser's side)
    ("minimax", '<think>I could use <tool_calls>\n{"name": "search", "arguments": {}}\n</tool_calls></think>\nSure.\n'
                '<tool_calls>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n{"name": "get_weather", '
                '"arguments": {"location": "Rome"}}\n</tool_calls>',
     [("get_weather", '{"location": "Paris"}'), ("get_weather", '{"location": "Rome"}')],
     '<think>I could use <tool_calls>\n{"name": "search", "arguments": {}}\n</tool_calls></think>\nSure.'),
    # functiongemma: vLLM reads every value as JSON when it parses; the schema types it here (a string stays one)
    ("functiongemma", "Sure.<start_function_call>call:get_weather{location:<escape>London<escape>,days:<escape>3<escape>,"
                      "date:<escape>2024<escape>}<end_function_call>",
     [("get_weather", '{"location": "London", "days": 3, "date": "2024"}')], "Sure."),
    ("functiongemma", "<start_function_call>call:now{}<end_function_call>", [("now", "{}")], None),
    # kimi_k3: the response channel's markers never reach content; type="string" is raw text even when it looks
    # like JSON, other types are JSON
    ("kimi_k3", '<|open|>response<|sep|>Let me run it.<|close|>response<|sep|><|open|>tools<|sep|>\n<|open|>call '
                'tool="python" index="1"<|sep|>\n<|open|>argument key="code" type="string"<|sep|>[1] < 2<|close|>argument'
                '<|sep|>\n<|open|>argument key="opts" type="object"<|sep|>{"a": 1}<|close|>argument<|sep|>\n<|close|>call'
                "<|sep|>\n<|close|>tools<|sep|><|close|>message<|sep|>",
     [("python", '{"code": "[1] < 2", "opts": {"a": 1}}')], "Let me run it."),
    ("kimi_k3", "Hi there.<|close|>response<|sep|><|close|>message<|sep|>", [], "Hi there."),  # prefix in the prompt
    ("hy_v3", "Checking.<tool_calls><tool_call>get_weather<tool_sep><arg_key>location</arg_key><arg_value>Beijing"
              "</arg_value><arg_key>days</arg_key><arg_value>3</arg_value></tool_call><tool_call>get_weather<tool_sep>"
              "</tool_call></tool_calls>", [("get_weather", '{"location": "Beijing", "days": 3}'), ("get_weather", "{}")],
     "Checking."),
    # step3p5: Step-3.5 writes qwen3_coder's XML (vLLM's tests: a multi-line object value, typed by the schema)
    ("step3p5", "Let me calculate that.<tool_call>\n<function=calculate_area>\n<parameter=shape>\nrectangle\n</parameter>\n"
                '<parameter=dimensions>\n{"width": 10, \n "height": 20}\n</parameter>\n<parameter=precision>\n2\n'
                "</parameter>\n</function>\n</tool_call>",
     [("calculate_area", '{"shape": "rectangle", "dimensions": {"width": 10, "height": 20}, "precision": 2}')],
     "Let me calculate that."),
    # llama4_json: vLLM registers llama3_json's class under this name too
    ("llama4_json", '{"name": "get_weather", "parameters": {"location": "Oslo"}}; {"name": "get_weather", "parameters": '
                    '{"location": "Bergen"}}', [("get_weather", '{"location": "Oslo"}'), ("get_weather", '{"location": "Bergen"}')],
     None),
]


@pytest.mark.parametrize("name,text,calls,content", CASES)
def test_format_cases(name, text, calls, content):
    result = assert_split_invariant(name, text, WEATHER_TOOLS, every_split=True)
    assert (result["calls"], result["content"]) == (calls, content)


# ---- marker soup: no hang, no crash, streamed == whole for every parser here ----

NEW_PARSERS = ["deepseek_v32", "glm47", "qwen3_xml", "llama4_json", "xlam", "phi4_mini_json", "hunyuan_a13b", "jamba",
               "ernie45", "internlm", "longcat", "step3", "lfm2", "olmo3", "llama4_pythonic",
               "gigachat3", "minimax", "deepseek_v4", "granite-20b-fc", "step3p5",
               "functiongemma", "kimi_k3", "hy_v3"]
SOUP = ["<tool_sep>", "<|open|>tools<|sep|>", '<|open|>call tool="f"<|sep|>', '<|open|>argument key="a" type="string"<|sep|>',
        "<|close|>argument<|sep|>", "<|close|>call<|sep|>", "<|close|>tools<|sep|>", "<|open|>response<|sep|>",
        "<|close|>response<|sep|>", "<｜tool_calls_end｜>", "<｜tool_sep｜>", "<start_function_call>call:f{", "a:<escape>", "<escape>", "}<end_function_call>", "<｜DSML｜tool_calls>", "</｜DSML｜tool_calls>", "<function_call> ", "<|message_sep|>", "\n\nfunction call<|role_sep|>\n", "<|function_call|>", "</s>", "<|tool_call_start|>[", "<|tool_call_end|>", "<function_calls>", "</function_calls>", "<|python_start|>[",
        "<|python_end|>", "f(a=1)", "g()", "\n", "<｜tool_calls_begin｜>", "<｜tool_call_begin｜>", "function<｜tool_sep｜>", '<steptml:invoke name="f">',
        '<steptml:parameter name="a">', "</steptml:parameter>", "</steptml:invoke>", "<｜tool_call_end｜>", "<tool_call>", "</tool_call>", "<arg_key>a</arg_key>", "<arg_value>", "</arg_value>", "\\n", "<function=f>",
        "<parameter=a>", "</parameter>", "</function>", "```json\n", "```", "[TOOL_CALLS]", "functools[",
        "<tool_calls>", "</tool_calls>", "<think>", "</think>", "<response>", "</response>", "<|action_start|><|plugin|>",
        "<|action_end|>", "<longcat_tool_call>", "</longcat_tool_call>", "<｜DSML｜function_calls>", "</｜DSML｜function_calls>", '<｜DSML｜invoke name="f">', "</｜DSML｜invoke>",
        '<｜DSML｜parameter name="a" string="true">', '<｜DSML｜parameter name="a" string="false">', "</｜DSML｜parameter>",
        "[", "]", "{", "}", '{"name": "f", "arguments": ', '{"a": [1, "x"]}', ", ", "(", ")", "f(", "a=1", "\n",
        "1", "x", " ", "<", "<|", '"', "\\", "é"]


@pytest.mark.parametrize("name", NEW_PARSERS)
@SETTINGS
@given(pieces=st.lists(st.sampled_from(SOUP), max_size=14), chunking=cuts)
def test_marker_soup_streams_like_whole_text(name, pieces, chunking):
    result = assert_soup_streams_like_whole(name, "".join(pieces), chunking)
    parser = get_tool_parser(name)
    if parser.drop_rejected_markers:  # the format's markers are control tokens: never content
        assert not any(m in (result["content"] or "") for m in parser.starts), result


@pytest.mark.parametrize("name", NEW_PARSERS)
@SETTINGS
@given(text=nasty_text, chunking=cuts)
def test_text_without_markers_is_content_intact(name, text, chunking):
    assume(not any(m in text for m in NO_CALL_MARKERS.get(name, ())))
    assume(not text.lstrip().startswith(PLAIN_OPENINGS.get(name, "\x00")))
    result = assert_split_invariant(name, text, cuts=chunking)
    assert result == {"content": text or None, "reasoning_content": None, "calls": []}


NO_CALL_MARKERS = {"deepseek_v32": ["<｜DSML｜"], "glm47": ["<tool_call>"], "qwen3_xml": ["<tool_call>", "<function="],
                   "xlam": ["```", "<tool_call>", "[TOOL_CALLS]"], "phi4_mini_json": ["functools["],
                   "hunyuan_a13b": ["<tool_calls>"], "jamba": ["<tool_calls>"], "ernie45": ["<tool_call>", "<response>", "</response>"],
                   "internlm": ["<|action_start|><|plugin|>"], "longcat": ["<longcat_tool_call>"],
                   "step3": ["<｜tool_call"], "lfm2": ["<|tool_call_start|>", "<|tool_call_end|>"],
                   "olmo3": ["<function_calls>"], "gigachat3": ["<|message_sep|>", "<|function_call|>"],
                   "minimax": ["<tool_calls>", "<think>"], "deepseek_v4": ["<｜DSML｜"],
                   "granite-20b-fc": ["<function_call>"], "step3p5": ["<tool_call>", "<function="],
                   "functiongemma": ["<start_function_call>"], "kimi_k3": ["<|open|>", "<|close|>"],
                   "hy_v3": ["<tool_calls>"]}
PLAIN_OPENINGS: dict[str, str | tuple] = {"llama4_json": ("{", "<|python_tag|>"), "xlam": "[", "llama4_pythonic": ("[", "<|python_start|>")}  # a call only opens the output


# ---- a long argument streamed one character at a time stays linear ----

LONG_CALLS = {
    "deepseek_v32": lambda body: '<｜DSML｜function_calls>\n<｜DSML｜invoke name="write">\n<｜DSML｜parameter name="body" '
                                 'string="true">%s</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>' % body,
    "xlam": lambda body: '[{"name": "write", "arguments": {"body": %s}}]' % dumps(body),
    "hunyuan_a13b": lambda body: '<tool_calls>[{"name": "write", "arguments": {"body": %s}}]</tool_calls>' % dumps(body),
    "ernie45": lambda body: '<tool_call>\n{"name": "write", "arguments": {"body": %s}}\n</tool_call>' % dumps(body),
    "internlm": lambda body: '<|action_start|><|plugin|>\n{"name": "write", "parameters": {"body": %s}}<|action_end|>' % dumps(body),
    "longcat": lambda body: '<longcat_tool_call>{"name": "write", "arguments": {"body": %s}}</longcat_tool_call>' % dumps(body),
    "step3": lambda body: '<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="write">'
                          '<steptml:parameter name="body">%s</steptml:parameter></steptml:invoke><｜tool_call_end｜>'
                          "<｜tool_calls_end｜>" % body,
    "lfm2": lambda body: "<|tool_call_start|>[write(body=%r)]<|tool_call_end|>" % body,
    "olmo3": lambda body: "<function_calls>\nwrite(body=%r)\n</function_calls>" % body,
    "gigachat3": lambda body: '<|function_call|>{"name": "write", "arguments": {"body": %s}}</s>' % dumps(body),
    "minimax": lambda body: '<tool_calls>\n{"name": "write", "arguments": {"body": %s}}\n</tool_calls>' % dumps(body),
    "granite-20b-fc": lambda body: '<function_call> {"name": "write", "arguments": {"body": %s}}' % dumps(body),
    "functiongemma": lambda body: "<start_function_call>call:write{body:<escape>%s<escape>}<end_function_call>" % body,
    "kimi_k3": lambda body: '<|open|>tools<|sep|><|open|>call tool="write" index="0"<|sep|><|open|>argument key="body" '
                            'type="string"<|sep|>%s<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>' % body,
    "hy_v3": lambda body: "<tool_calls><tool_call>write<tool_sep><arg_key>body</arg_key><arg_value>%s</arg_value>"
                          "</tool_call></tool_calls>" % body,
    "glm47": lambda body: "<tool_call>write<arg_key>body</arg_key><arg_value>%s</arg_value></tool_call>" % body,
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
    """4x the text costing 16x the time is quadratic work; linear work is ~4x. A complexity check with room
    for a shared machine's noise, not a speed assertion."""
    body = "def f(x):\n    return x < 2 and 'ok' or \"no\"\n" * 200
    small, large = LONG_CALLS[name](body), LONG_CALLS[name](body * 4)
    calls = summary(stream(name, list(large), WRITE_TOOLS))["calls"]
    assert len(calls) == 1 and json.loads(calls[0][1])["body"].strip() == (body * 4).strip()
    t_small = min(_char_by_char_seconds(name, small) for _ in range(3))
    t_large = min(_char_by_char_seconds(name, large) for _ in range(3))
    assert t_large < 9 * t_small, (t_small, t_large)


def test_registry_holds_every_name():
    assert set(NEW_PARSERS) <= set(TOOL_PARSERS)
