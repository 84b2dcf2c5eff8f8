"""What every tool-call format holds, whatever its shape: the registry names vLLM's parsers; marker soup
(the format's own markers among call fragments of every shape) neither hangs nor crashes and streams as
it parses whole at every cut; text without the format's markers is content, intact; a finished parser is
freed without the cycle collector; a long argument fed one character at a time stays linear; formats whose
calls open the output open it after a think block written first.

Each shape's own properties and cases: test_tool_json_calls.py, test_tool_json_lists.py,
test_tool_text_values.py, test_tool_invokes.py, test_tool_pythonic.py, test_tool_harmony.py; call ids:
test_tool_call_ids.py.
Covers tokworker.parsers.tools.core.thinkblock, tokworker.parsers.tools.core.base (the loop),
tokworker.parsers.tools.core.emit (the deltas) and tokworker.parsers.tools.core.jsonargs (a call's arguments).
"""

from __future__ import annotations

import gc
import json
import weakref

import msgspec
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.tool_formats import (EXAMPLES, SETTINGS, assert_soup_streams_like_whole, assert_split_invariant, cuts, dumps,
                                nasty_text, stream, summary, NASTY)
from tests.work import lines_run
from tokworker.parsers.tools import TOOL_PARSERS, get_tool_parser
from tokworker.protocol.deltas import Delta

# vLLM's tool-parser names (the ones it registers for the formats tokworker reads)
VLLM_NAMES = {
    "hermes", "llama3_json", "llama4_json", "mistral", "deepseek_v3", "deepseek_v31", "deepseek_v32", "deepseek_v4",
    "kimi_k2", "kimi_k3", "qwen3_coder", "qwen3_xml", "glm45", "glm47", "openai", "pythonic", "llama4_pythonic",
    "seed_oss", "minimax", "minimax_m2", "cohere_command3", "cohere_command4", "granite", "granite4", "granite-20b-fc",
    "phi4_mini_json", "hunyuan_a13b", "hy_v3", "ernie45", "internlm", "jamba", "longcat", "xlam", "step3", "step3p5",
    "olmo3", "gigachat3", "functiongemma", "gemma4", "lfm2", "poolside_v1", "mimo",
}

# vLLM's names for a format another name already reads: the shape files test the class once, by that name
ALIASES = {"qwen3_xml": "qwen3_coder", "step3p5": "qwen3_coder", "llama4_json": "llama3_json",
           "cohere_command3": "cohere_command2", "cohere_command4": "cohere_command2", "jamba": "apriel",
           "llama4_pythonic": "pythonic"}


def test_registry_holds_vllms_names_and_names_an_unknown_one():
    assert VLLM_NAMES <= set(TOOL_PARSERS)
    for name in TOOL_PARSERS:
        assert not get_tool_parser(name).called
    for alias, name in ALIASES.items():        # one class: the properties of `name` hold for `alias`
        assert type(get_tool_parser(alias)) is type(get_tool_parser(name))
    with pytest.raises(ValueError, match="hermes"):
        get_tool_parser("no_such_format")
    with pytest.raises(ValueError):
        get_tool_parser("hermes", tools={"not": "a list"})
    with pytest.raises(ValueError, match="string name"):
        get_tool_parser("qwen3_coder", tools=[{"type": "function", "function": {"parameters": {}}}])


# ---- marker soup: the format's own markers among fragments of every shape's calls ----

SOUP = NASTY + [
    '{"name": "f", "arguments": ', '{"name": "f"}', '{"a": [1, "x"]}', '{"name": "g", "parameters": {}}', '; ',
    'f[ARGS]', '[{', '}, ', 'function<｜tool▁sep｜>f\n```json\n', '\n```', '<|tool_call_begin|>functions.f:0',
    '<function=f>', '<parameter=a>', '</function>', '<arg_key>a', '[f(', 'a=', '1', "'s'", '<|start|>assistant',
    '<|channel|>analysis', '<|channel|>final', ' to=functions.f', '<|constrain|>json', '</seed:think>', ', ',
    ' functools[', '"id": "x"', '\n```json\n', '{"tool_name": "f", "parameters": ', '"tool_call_id": "0", ',
    '{"f": ', 'all\n', 'f\n', '<invoke name="f">', '</invoke>', '<parameter name="a">', 'x',
    '<|open|>call tool="f"<|sep|>', '<|open|>argument key="a" type="string"<|sep|>', '<|close|>argument<|sep|>',
    '<|close|>call<|sep|>', '<start_function_call>call:f{', 'a:<escape>', '}<end_function_call>', '<function_call> ',
    '\n\nfunction call<|role_sep|>\n', '</s>', '<|tool_call_start|>[', '<|python_start|>[', 'f(a=1)', 'g()',
    'function<｜tool_sep｜>', '<steptml:invoke name="f">', '<steptml:parameter name="a">', '</steptml:parameter>',
    '</steptml:invoke>', '<arg_key>a</arg_key>', '\\n', '```json\n', '</think>', '<｜DSML｜invoke name="f">',
    '</｜DSML｜invoke>', '<｜DSML｜parameter name="a" string="true">', '<｜DSML｜parameter name="a" string="false">',
    '</｜DSML｜parameter>', 'f(', 'a=1',
    'a:<|"|>', '<|"|>', '}<tool_call|>', 'b:1,', '{c:<|"|>x<|"|>}', "[1,true]",
]


def markers_of(name: str) -> list[str]:
    parser = get_tool_parser(name)
    return sorted(set(parser.starts) | set(parser.special_tokens) | set(parser.stray_markers))


@pytest.mark.parametrize("name", TOOL_PARSERS)
@settings(max_examples=EXAMPLES, deadline=None)
@given(data=st.data(), chunking=cuts)
def test_marker_soup_streams_like_whole_text(name, data, chunking):
    pieces = data.draw(st.lists(st.sampled_from(SOUP + markers_of(name)), max_size=14))
    result = assert_soup_streams_like_whole(name, "".join(pieces), chunking, every_prefix_below=120)
    parser = get_tool_parser(name)
    if parser.drop_rejected_markers:  # the format's markers are control tokens: never content
        assert not any(m in (result["content"] or "") for m in parser.starts), result


# ---- text without the format's markers is content, intact ----

# formats whose calls open the output: text that opens so is theirs to read
OPENS_THE_OUTPUT = {"llama3_json": ("{", "<|python_tag|>"), "llama4_json": ("{", "<|python_tag|>"), "xlam": ("[",),
                    "pythonic": ("[", "<|python_start|>"), "llama4_pythonic": ("[", "<|python_start|>")}


@pytest.mark.parametrize("name", TOOL_PARSERS)
@SETTINGS
@given(text=nasty_text, chunking=cuts)
def test_text_without_the_formats_markers_is_content_intact(name, text, chunking):
    assume(not any(m in text for m in markers_of(name)))
    assume(not text.lstrip().startswith(OPENS_THE_OUTPUT.get(name, "\x00")))
    lead = "all\n" if name == "functionary_v32" else ""  # functionary's text for the user comes after "all"
    result = assert_split_invariant(name, lead + text, cuts=chunking)
    assert result == {"content": text or None, "reasoning_content": None, "calls": []}


# ---- steady content: text a caller may emit without feed() ----

WORDS = ["Hello", " world", "42", " café", " 日本語", "x.y", "ok", " then"]


@pytest.mark.parametrize("name", TOOL_PARSERS)
@SETTINGS
@given(data=st.data())
def test_steady_content_is_content_as_it_is(name, data):
    """While `steady_content`, a text in which `first_marker` finds nothing and that does not end in
    whitespace feeds as one content delta of itself and changes nothing: a parser that skips feed() for
    it (TextStream's per-token path) streams exactly what one fed everything does."""
    pieces = data.draw(st.lists(st.sampled_from(SOUP + markers_of(name) + WORDS * 4), max_size=24))
    fed, skipping = get_tool_parser(name), get_tool_parser(name)
    for piece in pieces:
        expected = fed.feed(piece)
        marker = skipping.first_marker
        if skipping.steady_content and piece and piece[-1] not in " \t\r\n" and (
                marker is None or marker(piece) is None):
            assert expected == [Delta(content=piece)] and fed.steady_content, (piece, expected)
        else:
            assert _no_ids(skipping.feed(piece)) == _no_ids(expected)
    assert _no_ids(skipping.finish()) == _no_ids(fed.finish())


def _no_ids(deltas: list) -> list:
    """Deltas as builtins without their call ids (each parser draws its own)."""
    out = msgspec.to_builtins(deltas)
    for delta in out:
        for call in delta.get("tool_calls") or ():
            call.pop("id", None)
    return out


# ---- the output opens after a think block written first ----

@pytest.mark.parametrize("name,call", [
    ("llama3_json", '{"name": "f", "parameters": {"a": 1}}'), ("llama4_json", '{"name": "f", "parameters": {"a": 1}}'),
    ("pythonic", "[f(a=1)]"), ("llama4_pythonic", "<|python_start|>[f(a=1)]<|python_end|>"),
    ("xlam", '[{"name": "f", "arguments": {"a": 1}}]'), ("functionary_v32", 'f\n{"a": 1}'),
])
def test_calls_that_open_the_output_open_it_after_a_think_block(name, call):
    think = "<think>The user wants f; call it with 1.</think>"
    for text in (think + "\n" + call, think + call):
        result = assert_split_invariant(name, text, every_split=True)
        assert (result["calls"], result["content"]) == ([("f", '{"a": 1}')], think)
    assert assert_split_invariant(name, "<think>no call</think>\n" + call + " later")["calls"] == [("f", '{"a": 1}')]


# ---- a finished parser is freed without the cycle collector ----

@pytest.mark.parametrize("name", TOOL_PARSERS)
def test_finished_parser_is_freed_without_the_cycle_collector(name):
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


def _char_by_char_lines(name, text) -> int:
    parser = get_tool_parser(name, WRITE_TOOLS)

    def feed():
        for ch in text:
            parser.feed(ch)
        parser.finish()
    return lines_run(feed)


@pytest.mark.parametrize("name", sorted(LONG_CALLS))
def test_long_argument_one_character_at_a_time_is_linear(name):
    """4x the text costing 16x the work is quadratic (re-scanning the buffer per character in Python); linear
    work is 4x. Counted in lines of Python run, the same on any machine however loaded (every parser here
    measures 3.94-4.00), not timed; the speed of a scan in C is bench/'s to measure."""
    body = "def f(x):\n    return x < 2 and 'ok' or \"no\"\n" * 200
    small, large = LONG_CALLS[name](body), LONG_CALLS[name](body * 4)
    first = summary(stream(name, list(large), WRITE_TOOLS))["calls"][0]
    assert first[0] == "write" and json.loads(first[1])["body"].strip() == (body * 4).strip()
    lines_small, lines_large = _char_by_char_lines(name, small), _char_by_char_lines(name, large)
    assert lines_large < 6 * lines_small, (lines_small, lines_large)
