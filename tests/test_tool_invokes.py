"""Formats whose calls are named invokes with text parameters inside a section (invokes.py): deepseek_v32,
deepseek_v4, minimax_m2, step3, hy_v3, kimi_k3. Values are typed as textargs.py types them (the typing
itself: tests/test_tool_text_values.py). DeepSeek V3.2 and V4 sometimes wrap every argument in one
parameter named "arguments" or "input" the tool does not have: the wrapped object is the arguments.

Model text is rendered the way each model writes calls (format literals next to each renderer); whole and
streamed results agree however the text is split. Where vLLM's own parser gets a shape wrong, the case
says which behaviour we chose and why.
Covers tokworker.parsers.tools.core.invokes.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import strategies as st

from tests.realdata import vocabulary
from tests.tool_formats import (WEATHER_TOOLS, Format, as_json_text, assert_ids_stream_like_whole,
                                assert_split_invariant, nasty_text, text_shape_tests)


# ---- renderers, from the templates' literals ----

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


def step3(calls, before="", after=""):
    # Step-3's template: content + '<｜tool_calls_begin｜>' + per call '<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke
    # name="' NAME '">' + per argument '<steptml:parameter name="' K '">' V '</steptml:parameter>' (V: strings as they
    # are, else tojson) + '</steptml:invoke><｜tool_call_end｜>', then '<｜tool_calls_end｜>'
    body = "".join('<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="%s">%s</steptml:invoke><｜tool_call_end｜>'
                   % (n, "".join('<steptml:parameter name="%s">%s</steptml:parameter>' % (k, as_json_text(v))
                                 for k, (_, v) in p.items())) for n, p in calls)
    return before + "<｜tool_calls_begin｜>" + body + "<｜tool_calls_end｜>" + after


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

DSML_END = ("</｜DSML｜parameter>", "<｜DSML｜parameter name=", "</｜DSML｜invoke>")
STEP3_END = ("</steptml:parameter>", "<steptml:parameter name=", "</steptml:invoke>")
FORMATS = [
    Format("deepseek_v32", deepseek_v32, ("<｜DSML｜",), forbidden=DSML_END, untyped=nasty_text | st.integers()),
    Format("deepseek_v4", deepseek_v4, ("<｜DSML｜",), forbidden=DSML_END, untyped=nasty_text | st.integers()),
    # one "\n" after a value's tag and one before its closing tag are formatting (vLLM reads them so too)
    Format("minimax_m2", minimax_m2, ("<minimax:tool_call>",), forbidden=("</parameter>", "<parameter name=", "</invoke>"),
           untyped=st.integers(), edges=True),
    Format("step3", step3, ("<｜tool_call",), forbidden=STEP3_END, untyped=nasty_text, edges=True),
    Format("hy_v3", hy_v3, ("<tool_calls>",), forbidden=("</arg_value>",), untyped=nasty_text),
    Format("kimi_k3", kimi_k3, ("<|open|>", "<|close|>", "<|sep|>"), forbidden=("<|close|>argument<|sep|>",),
           untyped=nasty_text | st.integers()),
]


test_calls_round_trip_with_the_text_around_them, test_every_split_and_every_prefix = text_shape_tests(FORMATS)


# ---- cases: real model-output shapes (from vLLM's tests and issues), malformed openings, vLLM's bugs ----

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
    ("deepseek_v4", 'Ok.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="location" '
                    'string="true">杭州</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>',
     [("get_weather", '{"location": "杭州"}')], "Ok."),
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
    ("minimax_m2", '<minimax:tool_call>\n<invoke name="f">\n<parameter name="n">[1, 2]</parameter>\n</invoke>\n'
                   '</minimax:tool_call> ok', [("f", '{"n": [1, 2]}')], "ok"),
    ("minimax_m2", "<minimax:tool_call>\n<oops>", [], "<minimax:tool_call>\n<oops>"),
]


@pytest.mark.parametrize("name,text,calls,content", CASES)
def test_format_cases(name, text, calls, content):
    result = assert_split_invariant(name, text, WEATHER_TOOLS, every_split=True)
    assert (result["calls"], result["content"]) == (calls, content)


# ---- DeepSeek V3.2 / V4: every argument wrapped in one "arguments" or "input" parameter ----

def dsml(params: str, section: str = "function_calls") -> str:
    """One DSML call to get_weather with these parameter tags."""
    return (f"<｜DSML｜{section}>\n<｜DSML｜invoke name=\"get_weather\">\n{params}</｜DSML｜invoke>\n"
            f"</｜DSML｜{section}>")


def param(key: str, value: str, string: str = "false") -> str:
    return f'<｜DSML｜parameter name="{key}" string="{string}">{value}</｜DSML｜parameter>\n'


WRAPPED = [
    # (text, calls): the shapes of vLLM's fixed bug; the wrapper's object is the arguments when the tool has its keys
    (dsml(param("arguments", '{"location": "Beijing", "days": 3}')), '{"location": "Beijing", "days": 3}'),
    (dsml(param("input", '{"location": "Beijing"}')), '{"location": "Beijing"}'),
    (dsml(param("arguments", '{"location": "Beijing"}'), "tool_calls"), '{"location": "Beijing"}'),  # V4's section
    (dsml(param("arguments", '{"location": "Beijing"}', string="true")), '{"location": "Beijing"}'),  # marked text
    (dsml(param("arguments", "{'location': 'Beijing'}")), '{"location": "Beijing"}'),  # as a Python literal
    (dsml(param("arguments", "{}")), "{}"),
    # a parameter after the wrapper joins the unwrapped arguments (vLLM's stream does so too)
    (dsml(param("arguments", '{"location": "Beijing"}') + param("days", "2")), '{"location": "Beijing", "days": 2}'),
    # not a wrapper: keys the tool does not have, a value that is no object, or a later parameter of that name
    (dsml(param("arguments", '{"location": "Beijing", "other": 1}')), '{"arguments": {"location": "Beijing", "other": 1}}'),
    (dsml(param("arguments", "Beijing", string="true")), '{"arguments": "Beijing"}'),
    (dsml(param("location", "Oslo", string="true") + param("input", '{"days": 2}')),
     '{"location": "Oslo", "input": {"days": 2}}'),
]


@pytest.mark.parametrize("text,arguments", WRAPPED)
def test_deepseek_wrapped_arguments_are_unwrapped(text, arguments):
    name = "deepseek_v4" if "tool_calls>" in text else "deepseek_v32"
    result = assert_split_invariant(name, text, WEATHER_TOOLS, every_split=True)
    assert result["calls"] == [("get_weather", arguments)]
    # a tool that declares no parameters, or no tools at all: nothing says the wrapper is one
    assert json.loads(assert_split_invariant(name, text)["calls"][0][1]).keys() <= {"arguments", "input", "location",
                                                                                    "days"}


def test_deepseek_wrapped_arguments_on_the_real_deepseek_vocabulary():
    from tokworker.tokenizer import Tokenizer
    tok = Tokenizer.from_file(vocabulary("deepseek"), {"eos_token": "<｜end▁of▁sentence｜>"})
    text = "I'll look it up.\n\n" + dsml(param("arguments", '{"location": "杭州", "days": 3}'))
    assert assert_ids_stream_like_whole(tok, "deepseek_v32", text, WEATHER_TOOLS)["calls"] == [
        ("get_weather", '{"location": "杭州", "days": 3}')]
