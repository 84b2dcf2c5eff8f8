"""Formats whose calls are JSON objects, one at a time: in tags (hermes, granite4, ernie45, internlm,
longcat, gigachat3, granite-20b-fc), bare at the output's start (llama3_json, which llama4_json names too), or after a
name between section markers (mistral's [TOOL_CALLS]NAME[ARGS], deepseek_v3, deepseek_v31, kimi_k2,
functionary_v31, functionary_v32).

Model text is rendered the way each model writes calls (the templates' literals, or the shapes in vLLM's
parser tests, named next to each renderer); whole-text parse and streamed parse agree however it is
split; the arguments stream as the model wrote them. Where vLLM's own parser gets a shape wrong, the case
says which behaviour we chose and why.
Covers tokworker.parsers.tools.core.tagged, tokworker.parsers.tools.core.sectioned and
tokworker.parsers.tools.core.jsonscan.
"""

from __future__ import annotations

import json

import pytest

from tests.test_stream_state import qwen
from tests.tool_formats import (WEATHER_TOOLS, Format, assert_ids_stream_like_whole, assert_split_invariant, dumps,
                                expected_content, json_shape_tests, stream, summary, whole)
from tokworker.parsers.tools import get_tool_parser


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


def functionary_v31(calls, before="", after=""):
    # meetkai-functionary-medium-v3.1.jinja: content + '<function=' NAME '>' ARGS '</function>' per call
    return before + "".join("<function=%s>%s</function>" % (n, dumps(a)) for n, a in calls) + after


def functionary_v32(calls, before="", after=""):
    # meetkai-functionary-medium-v3.2.jinja: ('>>>all\n' + content) + '>>>' NAME '\n' ARGS per call; the
    # generation prompt ends with '>>>', so the model's text starts after it
    text = ("all\n" + before if before else "") + "".join(">>>%s\n%s" % (n, dumps(a)) for n, a in calls)
    text = text[3:] if text.startswith(">>>") else text
    return text + (">>>all\n" + after if after else "")


def _objects(calls, args_key="arguments", sep=", "):
    return sep.join('{"name": "%s", "%s": %s}' % (n, args_key, dumps(a)) for n, a in calls)


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


def gigachat3(calls, before="", after=""):
    # GigaChat 3 (vLLM's tests): content + '<|message_sep|>\n\nfunction call<|role_sep|>\n' + call object + '</s>';
    # one call per answer
    return before + "<|message_sep|>\n\nfunction call<|role_sep|>\n" + _objects(calls[:1]) + "</s>" + after


DEEPSEEK_MARKERS = ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁calls▁end｜>")
KIMI_MARKERS = ("<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_calls_section_end|>",
                "<|tool_call_argument_begin|>", "<|tool_call_end|>")
FORMATS = [
    Format("hermes", hermes, ("<tool_call>",)),
    Format("granite4", hermes, ("<tool_call>",)),  # Granite 4's template writes hermes's calls
    Format("llama3_json", llama3_json, before=False, fits=lambda before, after: not after.lstrip().startswith(";")),
    Format("mistral", mistral_named, ("[TOOL_CALLS]",), id="mistral_named"),
    Format("deepseek_v3", deepseek_v3, DEEPSEEK_MARKERS),
    Format("deepseek_v31", deepseek_v31, DEEPSEEK_MARKERS),
    Format("kimi_k2", kimi_k2, KIMI_MARKERS),
    Format("functionary_v31", functionary_v31, ("<function=", "<|python_tag|>")),
    Format("functionary_v32", functionary_v32, (">>>", "all\n"),
           fits=lambda before, after: ">" not in before[-2:] + after[-2:] and not after.startswith(">")),
    # the template's newline after the last call separates it from text that follows
    Format("ernie45", ernie45, ("<tool_call>", "<response>", "</response>"),
           message=lambda before, after: (expected_content(before, "\n" + after), None)),
    Format("internlm", internlm, ("<|action_start|><|plugin|>",)),
    Format("longcat", longcat, ("<longcat_tool_call>",)),
    Format("gigachat3", gigachat3, ("<|message_sep|>", "<|function_call|>", "</s>"), most=1),
    Format("granite-20b-fc", granite_20b_fc, ("<function_call>",)),
]


test_calls_round_trip_with_the_text_around_them, test_every_split_and_every_prefix = json_shape_tests(FORMATS)


# ---- cases: real model-output shapes, malformed openings, vLLM's bugs ----

MALFORMED = [  # come back as content, whole
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
    ("functionary_v31", "x <function=f>no json</function>"),
    ("granite-20b-fc", '<function_call> [{"name": "func", "arguments": {}}]'),
]  # kimi_k2's markers are control tokens and never content: below


@pytest.mark.parametrize("name,text", MALFORMED)
def test_malformed_or_unterminated_openings_come_back_as_content(name, text):
    assert assert_split_invariant(name, text, every_split=True) == {"content": text, "reasoning_content": None,
                                                                     "calls": []}


CASES = [
    # (format, text, calls, content)
    ("functionary_v31", '<function=f>{"a": 1}</function><function=g>{}</function>', [("f", '{"a": 1}'), ("g", "{}")],
     None),
    ("functionary_v31", "<|python_tag|>import os\nprint(os.getcwd())",
     [("python", '{"code": "import os\\nprint(os.getcwd())"}')], None),
    ("functionary_v32", "all\nHello.", [], "Hello."),
    ("functionary_v32", "Hello there, no recipient", [], "Hello there, no recipient"),
    ("functionary_v32", 'all\nChecking.>>>f\n{"a": 1}>>>all\nDone.', [("f", '{"a": 1}')], "Checking.Done."),
    ("functionary_v32", "all\nin python: >>> print(1)", [], "in python: >>> print(1)"),
    ("ernie45", "<response>It is sunny in Beijing.</response>", [], "It is sunny in Beijing."),  # control tokens
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
    # llama4_json: vLLM registers llama3_json's class under this name too
    ("llama4_json", '{"name": "get_weather", "parameters": {"location": "Oslo"}}; {"name": "get_weather", "parameters": '
                    '{"location": "Bergen"}}', [("get_weather", '{"location": "Oslo"}'), ("get_weather", '{"location": "Bergen"}')],
     None),
    ("llama3_json", '{"type": "function", "name": "f", "parameters": {"a": 1}}', [("f", '{"a": 1}')], None),
    # the arguments broke: the call keeps what was sent, the rest is content
    ("hermes", '<tool_call>\n{"name": "f", "arguments": {"a": 1, "b": tru}}\n</tool_call>', [("f", '{"a": 1, "b": tru')],
     "}}\n</tool_call>"),
    # key order, and arguments written as a JSON string holding the object: held whole and decoded
    ("hermes", '<tool_call>\n{"arguments": {"city": "Paris"}, "name": "get_weather"}\n</tool_call>\n'
               '<tool_call>\n{"name": "f", "arguments": "{\\"x\\": [1, 2]}"}\n</tool_call>',
     [("get_weather", '{"city": "Paris"}'), ("f", '{"x": [1, 2]}')], None),
    # kimi_k2's markers are control tokens: after arguments that broke off, or opening no call, they are dropped
    ("kimi_k2", "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"a\": yes}"
                "<|tool_call_end|><|tool_calls_section_end|> after", [("f", '{"a": ')], "yes} after"),
    ("kimi_k2", "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0 {}", [], "functions.f:0 {}"),
    ("kimi_k2", "text<|tool_call_end|> more<|tool_call_argument_begin|>", [], "text more"),
]


@pytest.mark.parametrize("name,text,calls,content", CASES)
def test_format_cases(name, text, calls, content):
    result = assert_split_invariant(name, text, WEATHER_TOOLS, every_split=True)
    assert (result["calls"], result["content"]) == (calls, content)


# ---- arguments written as a Python literal: one reader for every format whose arguments are JSON ----

PYTHON_LITERAL_ARGUMENTS = [
    # (format, text, calls, content): the arguments read whole and sent as JSON, True/None and true/null alike
    ("hermes", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {'location': 'Paris', 'days': 3, "
               "'unit': None}}\n</tool_call>", [("get_weather", '{"location": "Paris", "days": 3, "unit": null}')], None),
    ("kimi_k2", "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{'a': [1, true], "
                "'b': \"it's\"}<|tool_call_end|><|tool_calls_section_end|>", [("f", '{"a": [1, true], "b": "it\'s"}')], None),
    # not a literal (a call in it): nothing was sent, the call's arguments stay empty and the text is content
    ("hermes", "<tool_call>{\"name\": \"f\", \"arguments\": {'a': __import__('os')}}</tool_call>", [("f", "")],
     "{'a': __import__('os')}}</tool_call>"),
]


@pytest.mark.parametrize("name,text,calls,content", PYTHON_LITERAL_ARGUMENTS)
def test_python_literal_arguments_are_sent_as_json(name, text, calls, content):
    result = assert_split_invariant(name, text, every_split=True)
    assert (result["calls"], result["content"]) == (calls, content)


# ---- the streaming core, on hermes ----

def test_tool_without_parameters_streams_empty_object():
    for fmt in FORMATS:
        text = fmt.render([("now", {})])
        assert summary(stream(fmt.name, [text]))["calls"] == [("now", "{}")], fmt.name
    assert summary(stream("hermes", ['<tool_call>\n{"name": "now"}\n</tool_call>']))["calls"] == [("now", "{}")]


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


@pytest.mark.parametrize("name_text", ["f" * 256, "f" * 257, "g" * 300, "\\n" * 200, "\\u00e9" * 60 + "x"])
def test_long_and_escaped_names_stream_as_whole_text_parses(name_text):
    """A name of up to 256 characters or escapes is read by the header fast path; longer ones are held
    whole and decoded once complete. Either way, however the text is split, the same call comes out."""
    text = f'<tool_call>\n{{"name": "{name_text}", "arguments": {{"a": [1, "x"]}}}}\n</tool_call>'
    result = assert_split_invariant("hermes", text, cuts=[13, 20, 200, 280, 300])
    assert result["calls"] == [(json.loads(f'"{name_text}"'), '{"a": [1, "x"]}')]


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


# ---- token by token on the real Qwen3 vocabulary ----

@pytest.mark.parametrize("name,text", [
    ("hermes", hermes([("get_weather", {"city": "Paris"}), ("now", {})], "Let me check.")),
    ("hermes", PYTHON_LITERAL_ARGUMENTS[0][1]),
    ("kimi_k2", kimi_k2([("get_weather", {"city": "Paris"})])),
])
def test_ids_of_the_real_vocabulary_stream_like_the_whole_text(name, text):
    assert assert_ids_stream_like_whole(qwen()[0], name, text, WEATHER_TOOLS)["calls"]
