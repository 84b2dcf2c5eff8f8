"""Formats whose arguments are tagged text values, the parser writing the JSON itself, typed by the request's
tool schemas: qwen3_coder (qwen3_xml and step3p5 name its class), mimo, glm45, glm47, poolside_v1, seed_oss,
functiongemma, gemma4; and the typing every text-valued format shares (textargs.py), the invoke formats' too: a value
typed ["string", "null"] written as null is null, an object or array may be a Python literal.

Model text is rendered the way each model writes calls (format literals next to each renderer); whole and
streamed results agree however the text is split.
"""

from __future__ import annotations

import gc
import json
import weakref

import pytest
from hypothesis import strategies as st

from tests.test_stream_state import qwen
from tests.tool_formats import (WS, Format, as_json_text, assert_ids_stream_like_whole, assert_split_invariant,
                                expected_content, nasty_text, summary, text_shape_tests)
from tokworker.parsers.tools import get_tool_parser


# ---- renderers, from the templates' literals ----

def qwen3_coder(calls, before="", after=""):
    # Qwen3-Coder.jinja: '\n<tool_call>\n<function=' NAME '>\n', per argument '<parameter=' K '>\n' V '\n</parameter>\n'
    # (V: tojson for mappings and lists, else |string), then '</function>\n</tool_call>'
    def text(value):
        return json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) else str(value)
    body = "".join("\n<tool_call>\n<function=%s>\n%s</function>\n</tool_call>"
                   % (name, "".join("<parameter=%s>\n%s\n</parameter>\n" % (k, text(v)) for k, (_, v) in params.items()))
                   for name, params in calls)
    return (before.rstrip("\n") if before.strip(WS) else "") + body + after


def mimo(calls, before="", after=""):
    # MiMo (vLLM's mimo tests): qwen3_coder's tags with each value written right between them
    body = "".join("<tool_call>\n<function=%s>\n%s</function>\n</tool_call>"
                   % (name, "".join("<parameter=%s>%s</parameter>\n" % (k, as_json_text(v)) for k, (_, v) in params.items()))
                   for name, params in calls)
    return before + body + after


def glm45(calls, before="", after=""):
    # GLM-4.6.jinja: '\n<tool_call>' NAME '\n', per argument '<arg_key>' K '</arg_key>\n<arg_value>' V
    # '</arg_value>\n' (V: strings as they are, else tojson), then '</tool_call>'
    body = "".join("\n<tool_call>%s\n%s</tool_call>"
                   % (name, "".join("<arg_key>%s</arg_key>\n<arg_value>%s</arg_value>\n" % (k, as_json_text(v))
                                    for k, (_, v) in params.items()))
                   for name, params in calls)
    return (before.rstrip("\n") if before.strip(WS) else "") + body + after


def glm47(calls, before="", after=""):
    # GLM-4.7's template: content + '<tool_call>' NAME + per argument '<arg_key>' K '</arg_key><arg_value>' V
    # '</arg_value>' (V: strings as they are, else tojson) + '</tool_call>', nothing in between
    body = "".join("<tool_call>%s%s</tool_call>" % (n, "".join("<arg_key>%s</arg_key><arg_value>%s</arg_value>"
                                                            % (k, as_json_text(v)) for k, (_, v) in p.items()))
                   for n, p in calls)
    return before + body + after


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


def functiongemma(calls, before="", after=""):
    # FunctionGemma's template: '<start_function_call>call:' NAME '{' + 'K:<escape>V<escape>' joined by ',' + '}'
    # + '<end_function_call>' (V: strings as they are, else JSON)
    body = "".join("<start_function_call>call:%s{%s}<end_function_call>"
                   % (n, ",".join("%s:<escape>%s<escape>" % (k, as_json_text(v)) for k, (_, v) in p.items()))
                   for n, p in calls)
    return before + body + after


Q = '<|"|>'


def gemma_value(value) -> str:
    """Gemma 4's own syntax: strings between <|"|>, everything else bare, object keys quoted."""
    if isinstance(value, str):
        return Q + value + Q
    if isinstance(value, dict):
        return "{" + ",".join(Q + k + Q + ":" + gemma_value(v) for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(gemma_value(v) for v in value) + "]"
    return json.dumps(value)


def gemma4(calls, before="", after=""):
    # Gemma 4 (vLLM's gemma4 tests): '<|tool_call>call:' NAME '{' + 'K:' V joined by ',' + '}<tool_call|>' per call
    body = "".join("<|tool_call>call:%s{%s}<tool_call|>" % (n, ",".join("%s:%s" % (k, gemma_value(v))
                                                                        for k, (_, v) in p.items()))
                   for n, p in calls)
    return before + body + after


QWEN3_CODER_END = ("</parameter>", "<parameter=", "</function>")
SMALL_UNTYPED = st.none() | st.integers() | st.lists(st.integers(), max_size=2)
FORMATS = [
    Format("qwen3_coder", qwen3_coder, ("<tool_call>", "<function="), forbidden=QWEN3_CODER_END, untyped=nasty_text),
    Format("mimo", mimo, ("<tool_call>", "<function="), forbidden=QWEN3_CODER_END, untyped=nasty_text),
    Format("glm45", glm45, ("<tool_call>",), forbidden=("</arg_value>",), untyped=SMALL_UNTYPED),
    Format("glm47", glm47, ("<tool_call>",), forbidden=("</arg_value>",), untyped=SMALL_UNTYPED),
    Format("poolside_v1", glm45, ("<tool_call>",), forbidden=("</arg_value>",), untyped=SMALL_UNTYPED),
    # one "\n" after a value's tag and one before its closing tag are formatting (vLLM reads them so too)
    Format("seed_oss", seed_oss, ("<seed:tool_call>", "<function="), forbidden=QWEN3_CODER_END,
           untyped=nasty_text, edges=True,
           message=lambda before, after: (expected_content("\n" + before.strip() if before.strip() else "", after),
                                          None)),
    Format("functiongemma", functiongemma, ("<start_function_call>",), forbidden=("<escape>",), untyped=SMALL_UNTYPED),
    Format("gemma4", gemma4, ("<|tool_call>",), forbidden=(Q,), untyped=nasty_text | st.integers()),
]


test_calls_round_trip_with_the_text_around_them, test_every_split_and_every_prefix = text_shape_tests(FORMATS)


# ---- cases: real model-output shapes ----

CASES = [
    # (format, text, calls, content)
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
    # step3p5: Step-3.5 writes qwen3_coder's XML (vLLM's tests: a multi-line object value, typed by the schema)
    ("step3p5", "Let me calculate that.<tool_call>\n<function=calculate_area>\n<parameter=shape>\nrectangle\n</parameter>\n"
                '<parameter=dimensions>\n{"width": 10, \n "height": 20}\n</parameter>\n<parameter=precision>\n2\n'
                "</parameter>\n</function>\n</tool_call>",
     [("calculate_area", '{"shape": "rectangle", "dimensions": {"width": 10, "height": 20}, "precision": 2}')],
     "Let me calculate that."),
    # mimo: values verbatim, typed by the schema (vLLM's mimo parser leaves every value a string)
    ("mimo", "<tool_call>\n<function=get_weather>\n<parameter=location>Paris</parameter>\n<parameter=days>2</parameter>\n"
             "</function>\n</tool_call>", [("get_weather", '{"location": "Paris", "days": 2}')], None),
    # poolside_v1 (vLLM's tests): the name's newline is optional; a string value keeps its whitespace
    ("poolside_v1", "<tool_call>get_weather<arg_key>location</arg_key><arg_value>Paris</arg_value></tool_call>",
     [("get_weather", '{"location": "Paris"}')], None),
    ("poolside_v1", "<tool_call>get_weather\n<arg_key>location</arg_key>\n<arg_value>  Paris\n</arg_value>\n"
                    "<arg_key>days</arg_key>\n<arg_value> 4 </arg_value>\n</tool_call>",
     [("get_weather", '{"location": "  Paris\\n", "days": 4}')], None),
    ("seed_oss", "<seed:tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</seed:tool_call>",
     [("f", '{"a": "1"}')], None),
    # Seed-OSS writes call examples while it thinks: a think block left to the tool parser is content
    ("seed_oss", "<seed:think>the format is <seed:tool_call>\n<function=f>\n<parameter=a>0</parameter>\n</function>\n"
                 "</seed:tool_call></seed:think><seed:tool_call>\n<function=f>\n<parameter=a>1</parameter>\n</function>\n"
                 "</seed:tool_call>", [("f", '{"a": "1"}')],
     "<seed:think>the format is <seed:tool_call>\n<function=f>\n<parameter=a>0</parameter>\n</function>\n"
     "</seed:tool_call></seed:think>"),
    # functiongemma: vLLM reads every value as JSON when it parses; the schema types it here (a string stays one)
    ("functiongemma", "Sure.<start_function_call>call:get_weather{location:<escape>London<escape>,days:<escape>3<escape>,"
                      "date:<escape>2024<escape>}<end_function_call>",
     [("get_weather", '{"location": "London", "days": 3, "date": "2024"}')], "Sure."),
    ("functiongemma", "<start_function_call>call:now{}<end_function_call>", [("now", "{}")], None),
    # gemma4 (vLLM's tests): strings between <|"|>, bare numbers, booleans, null, nested objects and arrays,
    # <|"|>-quoted keys, calls back to back, hyphens and dots in names
    ("gemma4", 'Let me check the weather for you. <|tool_call>call:get_weather{location:<|"|>San Francisco<|"|>,'
               'unit:<|"|>c<|"|>}<tool_call|>', [("get_weather", '{"location": "San Francisco", "unit": "c"}')],
     "Let me check the weather for you."),
    ("gemma4", '<|tool_call>call:complex_function{nested:{inner:<|"|>value<|"|>},list:[<|"|>a<|"|>,<|"|>b<|"|>],'
               'record_map:{<|"|>3<|"|>:<|"|>new text<|"|>},count:42,score:3.14,flag:true,param:null}<tool_call|>'
               '<|tool_call>call:weather.get{location:<|"|>London, UK<|"|>}<tool_call|>',
     [("complex_function", '{"nested": {"inner": "value"}, "list": ["a", "b"], "record_map": {"3": "new text"}, '
                           '"count": 42, "score": 3.14, "flag": true, "param": null}'),
      ("weather.get", '{"location": "London, UK"}')], None),
    ("gemma4", "<|tool_call>call:get-status{}<tool_call|>", [("get-status", "{}")], None),
    # a quoted value the schema types otherwise is converted; a bare one the schema calls a string stays text
    ("gemma4", '<|tool_call>call:get_weather{days:<|"|>3<|"|>,location:42}<tool_call|>',
     [("get_weather", '{"days": 3, "location": "42"}')], None),
    ("gemma4", '<|tool_call>call:get_weather{location:<|"|>Lon', [("get_weather", '{"location": "Lon')], None),  # cut off
]


@pytest.mark.parametrize("name,text,calls,content", CASES)
def test_format_cases(name, text, calls, content):
    from tests.tool_formats import WEATHER_TOOLS
    result = assert_split_invariant(name, text, WEATHER_TOOLS, every_split=True)
    assert (result["calls"], result["content"]) == (calls, content)


# ---- the typing every text-valued format shares ----

TYPED_TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
    "note": {"type": ["string", "null"]}, "maybe": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "where": {"type": "object"}, "tags": {"type": "array"}}}}}]
ONE_VALUE = {  # a call to f with one parameter KEY = VALUE, as each format writes it
    "qwen3_coder": "<tool_call>\n<function=f>\n<parameter={key}>\n{value}\n</parameter>\n</function>\n</tool_call>",
    "step3p5": "<tool_call>\n<function=f>\n<parameter={key}>\n{value}\n</parameter>\n</function>\n</tool_call>",
    "glm45": "<tool_call>f\n<arg_key>{key}</arg_key>\n<arg_value>{value}</arg_value>\n</tool_call>",
    "seed_oss": "<seed:tool_call>\n<function=f>\n<parameter={key}>{value}</parameter>\n</function>\n</seed:tool_call>",
    "minimax_m2": '<minimax:tool_call>\n<invoke name="f">\n<parameter name="{key}">{value}</parameter>\n</invoke>\n'
                  "</minimax:tool_call>",
    "deepseek_v32": '<｜DSML｜function_calls>\n<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="{key}" string="false">'
                    "{value}</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
    "step3": '<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="f"><steptml:parameter '
             'name="{key}">{value}</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>',
    "hy_v3": "<tool_calls><tool_call>f<tool_sep><arg_key>{key}</arg_key><arg_value>{value}</arg_value></tool_call></tool_calls>",
    "functiongemma": "<start_function_call>call:f{{{key}:<escape>{value}<escape>}}<end_function_call>",
    "gemma4": "<|tool_call>call:f{{{key}:{value}}}<tool_call|>",
}


@pytest.mark.parametrize("name", sorted(ONE_VALUE))
@pytest.mark.parametrize("key,value,expected", [
    # null where the schema allows it is null, not the text "null" (vLLM reads it so: null before string)
    ("note", "null", None), ("maybe", "null", None), ("note", "None", None), ("note", "a null hope", "a null hope"),
    # an object or array the schema asks for, written as a Python literal: read without eval
    ("where", "{'city': 'Paris', 'tags': ['a', None, True], 'n': -2.5}", {"city": "Paris", "tags": ["a", None, True],
                                                                         "n": -2.5}),
    ("tags", "['a', 1, (2, 3)]", ["a", 1, [2, 3]]),
    ("where", '{"city": "Paris"}', {"city": "Paris"}),
    ("where", "{'code': __import__('os').system('x')}", "{'code': __import__('os').system('x')}"),  # no literal: text
])
def test_values_are_typed_by_the_schema(name, key, value, expected):
    if name == "gemma4" and value[:1] not in "{[" and expected is not None:
        value = '<|"|>' + value + '<|"|>'  # Gemma 4 quotes text
    text = ONE_VALUE[name].format(key=key, value=value)
    result = assert_split_invariant(name, text, TYPED_TOOLS, every_split=True)
    assert result["calls"] == [("f", json.dumps({key: expected}, ensure_ascii=False))]


@pytest.mark.parametrize("value,expected", [("null", None), ("{'city': 'Paris', 'n': [1, None]}", {"city": "Paris",
                                                                                                     "n": [1, None]})])
def test_typed_values_on_the_real_qwen3_vocabulary(value, expected):
    key = "note" if expected is None else "where"
    text = "Checking." + ONE_VALUE["qwen3_coder"].format(key=key, value=value)
    result = assert_ids_stream_like_whole(qwen()[0], "qwen3_coder", text, TYPED_TOOLS)
    assert result["calls"] == [("f", json.dumps({key: expected}))]


def test_float_typed_text_values_are_numbers():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "float"}, "y": {"type": "float"}}}}}]
    text = "<tool_call>\n<function=f>\n<parameter=x>\n2.5\n</parameter>\n<parameter=y>\nabout 3\n</parameter>\n</function>\n</tool_call>"
    assert json.loads(assert_split_invariant("qwen3_coder", text, tools)["calls"][0][1]) == {"x": 2.5, "y": "about 3"}
    glm = "<tool_call>f\n<arg_key>x</arg_key>\n<arg_value>-1e3</arg_value>\n</tool_call>"
    assert json.loads(assert_split_invariant("glm45", glm, tools)["calls"][0][1]) == {"x": -1000.0}


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
