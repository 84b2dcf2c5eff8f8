"""Tool-call parsers: whole-text parse and streamed parse agree however the text is split, for every
format; calls come out in OpenAI's streaming shape (validated by the openai client's own types);
content keeps every character that is not part of a call.

Model text is rendered the way the real chat templates write calls (format literals next to each
renderer), from calls and content that hypothesis generates with the characters that break parsers:
"<", partial tags, quotes, backslashes, newlines, non-ASCII.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.tool_formats import assert_every_prefix, assert_split_invariant, dumps, stream, summary, whole
from tokworker.parsers.tools import TOOL_PARSERS, get_tool_parser

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

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
KIMI_MARKERS = ["<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_calls_section_end|>"]

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
    ("kimi_k2", "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0 {}"),
]


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
    return (before.rstrip("\n") if before.strip() else "") + body + after


def glm45(calls, before="", after=""):
    # GLM-4.6.jinja: '\n<tool_call>' NAME '\n', per argument '<arg_key>' K '</arg_key>\n<arg_value>' V
    # '</arg_value>\n' (V: strings as they are, else tojson), then '</tool_call>'
    def text(value):
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    body = "".join("\n<tool_call>%s\n%s</tool_call>"
                   % (name, "".join("<arg_key>%s</arg_key>\n<arg_value>%s</arg_value>\n" % (k, text(v))
                                    for k, (_, v) in params.items()))
                   for name, params in calls)
    return (before.rstrip("\n") if before.strip() else "") + body + after


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
    assert cut["calls"] == [("f", '{"a": "1"}')]


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
