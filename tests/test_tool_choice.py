"""tool_call_pattern: every string it matches is a call that the format's own tool parser reads, naming
an allowed tool, with arguments that validate against that tool's schema (jsonschema as the oracle).
On real vocabularies the forced call is reachable token by token, markers included."""

from __future__ import annotations

import json
import random
import re

import jsonschema
import pytest

from tests.realdata import vocabulary
from tests.test_automaton import IM_END, WEATHER_TOOL, qwen
from tokworker.constrain import TokenAutomaton, VocabTrie
from tokworker.constrain.regex_dfa import Dfa, compile_dfa
from tokworker.constrain.tool_choice import FORMATS, control_tokens, tool_call_pattern
from tokworker.parsers.tools import TOOL_PARSERS, get_tool_parser

TOOLS = [
    WEATHER_TOOL,
    {"type": "function", "function": {"name": "get_time", "description": "no arguments"}},
    {"type": "function", "function": {"name": "book_flight", "parameters": {
        "type": "object", "required": ["passengers", "route"], "additionalProperties": False, "properties": {
            "route": {"type": "object", "required": ["from", "to"], "properties": {
                "from": {"type": "string", "pattern": "^[A-Z]{3}$"}, "to": {"type": "string", "pattern": "^[A-Z]{3}$"}}},
            "passengers": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
                "type": "object", "required": ["name"], "properties": {
                    "name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0}}}},
            "class": {"enum": ["economy", "business"]}, "flexible": {"type": "boolean"}}}}},
]
SCHEMAS = {t["function"]["name"]: t["function"].get("parameters") or {"type": "object", "properties": {}} for t in TOOLS}
QWEN3_CODER_TOOLS = [
    WEATHER_TOOL,
    {"type": "function", "function": {"name": "run", "parameters": {"type": "object", "required": ["command"],
     "properties": {"command": {"type": "string"}, "timeout": {"type": "number"}, "env": {"type": "object"}}}}},
]


def _parsed_calls(format: str, text: str, tools) -> list[tuple[str, dict]]:
    if format not in TOOL_PARSERS:
        pytest.skip(f"no {format} tool parser yet")
    content, calls = get_tool_parser(format, tools).parse(text)
    assert not (content or "").strip(), (format, text, content)
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("name", [None, "get_weather", "get_time", {"type": "function", "function": {"name": "book_flight"}}])
@pytest.mark.parametrize("format", ["hermes", "llama3_json", "mistral", "qwen3_coder"])
def test_forced_calls_parse_and_validate(format, name, parallel):
    pattern = tool_call_pattern(TOOLS, name=name, format=format, parallel=parallel)
    wanted = name["function"]["name"] if isinstance(name, dict) else name
    dfa, rng = compile_dfa(pattern), random.Random(hash((format, wanted, parallel)) & 0xFFFF)
    for _ in range(12):
        text = dfa.sample(rng, max_bytes=150).decode()
        assert re.fullmatch(pattern, text)
        calls = _parsed_calls(format, text, TOOLS)
        assert calls and (parallel or len(calls) == 1), text
        for called, arguments in calls:
            assert wanted is None or called == wanted
            jsonschema.validate(arguments, SCHEMAS[called])


@pytest.mark.parametrize("format, text", [
    ("hermes", '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>\n'
               '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Rome"}}\n</tool_call>'),
    ("llama3_json", '{"name": "get_time", "parameters": {}}; {"name": "get_weather", "parameters": {"location": "Rome"}}'),
    ("mistral", '[TOOL_CALLS][{"name": "get_time", "arguments": {}}, {"name": "get_weather", "arguments": {"location": "Rome"}}]'),
    ("mistral", '[TOOL_CALLS]get_time[ARGS]{}[TOOL_CALLS]get_weather[ARGS]{"location": "Rome"}'),
    ("qwen3_coder", "<tool_call>\n<function=get_time>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n"
                    "<parameter=location>\nRome\n</parameter>\n</function>\n</tool_call>"),
])
def test_parallel_calls(format, text):
    assert re.fullmatch(tool_call_pattern(TOOLS, format=format, parallel=True), text)
    assert not re.fullmatch(tool_call_pattern(TOOLS, format=format), text)
    assert [name for name, _ in _parsed_calls(format, text, TOOLS)] == ["get_time", "get_weather"]


def test_qwen3_coder_calls_parse_and_validate():
    pattern = tool_call_pattern(QWEN3_CODER_TOOLS, format="qwen3_coder")
    text = ("<tool_call>\n<function=run>\n<parameter=command>\nls -la | grep '<x>'\n</parameter>\n"
            "<parameter=timeout>\n2.5\n</parameter>\n</function>\n</tool_call>")
    assert re.fullmatch(pattern, text)
    assert not re.fullmatch(pattern, text.replace("<parameter=command>\nls", "<parameter=cmd>\nls"))
    dfa, rng = Dfa(pattern), random.Random(3)
    for _ in range(20):
        sample = dfa.sample(rng, max_bytes=120).decode()
        for called, arguments in _parsed_calls("qwen3_coder", sample, QWEN3_CODER_TOOLS):
            jsonschema.validate(arguments, next(t for t in QWEN3_CODER_TOOLS if t["function"]["name"] == called)
                                ["function"]["parameters"])


def test_calls_as_the_templates_write_them_match():
    arguments = {"location": "Paris", "unit": "celsius"}
    written = {
        "hermes": '<tool_call>\n{"name": "get_weather", "arguments": ' + json.dumps(arguments) + "}\n</tool_call>",
        "llama3_json": '{"name": "get_weather", "parameters": ' + json.dumps(arguments) + "}",
    }
    mistral = ['[TOOL_CALLS][{"name": "get_weather", "arguments": ' + json.dumps(arguments) + ', "id": "a1b2c3d4e"}]',
               '[TOOL_CALLS] [{"name": "get_weather", "arguments": ' + json.dumps(arguments) + "}]",
               "[TOOL_CALLS]get_weather[ARGS]" + json.dumps(arguments),
               "[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]" + json.dumps(arguments)]
    for format, text in written.items():
        assert re.fullmatch(tool_call_pattern(TOOLS, format=format), text), format
    for text in mistral:
        assert re.fullmatch(tool_call_pattern(TOOLS, name="get_weather", format="mistral"), text), text
    no_arguments = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
    assert re.fullmatch(tool_call_pattern(TOOLS, name="get_time"), no_arguments)
    assert not re.fullmatch(tool_call_pattern(TOOLS, name="get_weather"), no_arguments)


def test_bad_requests_raise_value_error():
    with pytest.raises(ValueError, match="no tool named 'nope'"):
        tool_call_pattern(TOOLS, name="nope")
    with pytest.raises(ValueError, match="format"):
        tool_call_pattern(TOOLS, format="xml")
    with pytest.raises(ValueError, match="non-empty"):
        tool_call_pattern([])
    with pytest.raises(ValueError, match="function name"):
        tool_call_pattern([{"type": "function", "function": {}}])
    with pytest.raises(ValueError, match="not"):
        tool_call_pattern([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "not": {}}}}])
    assert set(FORMATS) >= {"hermes", "llama3_json", "mistral", "qwen3_coder"}


def test_forced_call_on_qwen3_vocabulary_uses_the_tool_call_token():
    tokenizer, vocab, trie = qwen()
    automaton = TokenAutomaton(tool_call_pattern(TOOLS, name="get_weather"), trie, eos_ids=[IM_END])
    tool_call = tokenizer.token_to_id("<tool_call>")
    assert tool_call in automaton.allowed(automaton.initial_state)
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Berlin", "days": 2}}\n</tool_call>'
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    assert ids[0] == tool_call
    state = automaton.initial_state
    for token in ids:
        state = automaton.advance(state, token)
    assert automaton.allowed(state).tolist() == [IM_END]


def _mistral_v3():
    spm = pytest.importorskip("sentencepiece")
    processor = spm.SentencePieceProcessor(model_file=str(vocabulary("mistral_v3_sp")))
    vocab = []
    for i in range(processor.get_piece_size()):
        piece = processor.id_to_piece(i)
        if processor.is_control(i) or processor.is_unknown(i):
            vocab.append(b"")
        elif processor.is_byte(i):
            vocab.append(bytes([int(piece[3:5], 16)]))
        else:
            vocab.append(piece.replace("\u2581", " ").encode())
    return processor, vocab


def test_mistral_marker_is_the_control_token():
    processor, vocab = _mistral_v3()
    marker = processor.piece_to_id("[TOOL_CALLS]")
    pattern = tool_call_pattern(TOOLS, name="get_weather", format="mistral")
    plain = TokenAutomaton(pattern, vocab, eos_ids=[2])
    assert marker not in plain.allowed(plain.initial_state)
    trie = VocabTrie(vocab, control_tokens=control_tokens("mistral", {"[TOOL_CALLS]": marker, "<s>": 1}))
    assert trie.token_bytes[marker] == b"[TOOL_CALLS]" and trie.token_bytes[1] == b""
    automaton = TokenAutomaton(pattern, trie, eos_ids=[2])
    assert marker in automaton.allowed(automaton.initial_state)
    ids = [marker] + processor.encode('[{"name": "get_weather", "arguments": {"location": "Lyon"}}]')
    state = automaton.initial_state
    for token in ids:
        state = automaton.advance(state, token)
    assert automaton.is_accepting(state) and 2 in automaton.allowed(state)
