"""The parsers read exactly what the real chat templates write: render a conversation whose assistant
turn calls tools with each model's own template (transformers' renderer is the oracle), cut the
assistant turn out, and parse it whole and streamed into the same calls.

The templates are read from ../shared/fixtures (tests/realdata.py); the test skips when they are absent.
"""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

from tests.realdata import chat_templates, vocabulary
from tests.tool_formats import assert_split_invariant, stream, summary, whole
from tokworker.parsers.tools import get_tool_parser

render_jinja_template = pytest.importorskip("transformers.utils.chat_template_utils").render_jinja_template

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                         "units": {"type": "string", "enum": ["C", "F"]}},
        "required": ["city"]}}},
    {"type": "function", "function": {"name": "now", "description": "The time",
                                      "parameters": {"type": "object", "properties": {}}}},
]
CALLS = [("get_weather", {"city": "São Paulo <centro>", "days": 3, "units": "C"}), ("now", {})]

QWEN, LLAMA, MISTRAL = "<|im_start|>assistant", "<|start_header_id|>assistant<|end_header_id|>\n\n", "[/INST]"
DEEPSEEK = "<｜Assistant｜>"
BROKEN_TEMPLATE = pytest.mark.xfail(reason="the template writes {\"name\": ...}, \"arguments\": ..., which is not the "
                                   "JSON object the model is told to write", strict=True)

# template file -> (parser, where the assistant turn starts, arguments as the template wants them (dict or
# JSON string), how many calls it can write, the message content it needs next to tool calls)
CASES = {
    "Qwen-Qwen3-0.6B.jinja": ("hermes", QWEN, dict, 2, ""),
    "Qwen-Qwen2.5-7B-Instruct.jinja": ("hermes", QWEN, dict, 2, ""),
    "Qwen-QwQ-32B.jinja": ("hermes", QWEN, dict, 2, ""),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": ("hermes", QWEN, dict, 2, ""),
    "vllm-examples-tool_chat_template_hermes.jinja": ("hermes", QWEN, dict, 2, ""),
    "meta-llama-Llama-3.3-70B-Instruct.jinja": ("llama3_json", LLAMA, dict, 1, ""),
    "meta-llama-Llama-3.2-3B-Instruct.jinja": ("llama3_json", LLAMA, dict, 1, ""),
    "vllm-examples-tool_chat_template_llama3.1_json.jinja": ("llama3_json", LLAMA, dict, 1, ""),
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": ("mistral", MISTRAL, dict, 2, ""),
    "vllm-examples-tool_chat_template_mistral_parallel.jinja": ("mistral", MISTRAL, dict, 2, ""),
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": ("mistral", MISTRAL, dict, 2, ""),
    "unsloth-mistral-Devstral-Small-2507.jinja": ("mistral", MISTRAL, dict, 2, ""),
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": ("mistral", MISTRAL, dict, 2, ""),
    "vllm-examples-tool_chat_template_deepseekv3.jinja": ("deepseek_v3", DEEPSEEK, dict, 2, None),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": ("deepseek_v3", DEEPSEEK, str, 2, None),
    "deepseek-ai-DeepSeek-V3.1.jinja": ("deepseek_v31", DEEPSEEK, str, 2, None),
    "moonshotai-Kimi-K2.jinja": ("kimi_k2", "<|im_assistant|>assistant<|im_middle|>", dict, 2, ""),
    "Qwen3-Coder.jinja": ("qwen3_coder", QWEN, dict, 2, ""),
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja": ("qwen3_coder", QWEN, dict, 2, ""),
    "GLM-4.6.jinja": ("glm45", "<|assistant|>", dict, 2, ""),
    "openai-gpt-oss-120b.jinja": ("openai", "<|start|>assistant", dict, 1, ""),
}


def render(entry, messages):
    variables = {k: v for k, v in (("bos_token", entry.get("bos_token")), ("eos_token", entry.get("eos_token"))) if v}
    variables.update(entry.get("extra_template_kwargs") or {})
    return render_jinja_template([messages], tools=TOOLS, chat_template=entry["text"], **variables)[0][0]


def assistant_turn(entry, calls, start, arguments_type, content):
    """The text the model writes for an assistant turn with these calls, as its template renders it:
    what follows the last assistant header, without the end-of-turn token."""
    tool_calls = [{"id": f"call{i}abcd", "type": "function",
                   "function": {"name": name, "arguments": args if arguments_type is dict else json.dumps(args)}}
                  for i, (name, args) in enumerate(calls)]
    messages = [{"role": "user", "content": "Weather in São Paulo, and the time?"},
                {"role": "assistant", "content": content, "tool_calls": tool_calls}]
    full = render(entry, messages)
    assert start in full, full
    turn = full[full.rindex(start) + len(start):]
    for end in filter(None, [entry.get("eos_token"), "<|im_end|>", "<|eot_id|>", "<|eom_id|>"]):
        turn = turn.rstrip("\n")
        turn = turn[: -len(end)] if turn.endswith(end) else turn
    return turn


TEMPLATES = chat_templates()


@pytest.mark.parametrize("file", [pytest.param(f, marks=BROKEN_TEMPLATE) if "examples-tool_chat_template_hermes" in f
                                  else f for f in sorted(CASES)])
def test_parsers_read_what_the_templates_write(file):
    if file not in TEMPLATES:
        pytest.skip(f"{file} is not in ../shared/fixtures")
    parser, start, arguments_type, most, content = CASES[file]
    calls = CALLS[:most]
    turn = assistant_turn(TEMPLATES[file], calls, start, arguments_type, content)
    tools = TOOLS if parser in ("qwen3_coder", "glm45") else None
    result = assert_split_invariant(parser, turn, tools, cuts=[1, 3, 2, 7])
    assert [(name, json.loads(args)) for name, args in result["calls"]] == calls, turn
    # what is left is the templates' own reasoning markup (<think></think>), for the reasoning parser
    assert "".join((result["content"] or "").split()) in ("", "<think></think>", "</think>"), (turn, result["content"])


# real vocabulary -> (its tokenizer.json, relative to the located path, and a template of that model)
TOKENIZED = {
    "qwen3_dir": ("tokenizer.json", "Qwen-Qwen3-0.6B.jinja"),
    "deepseek": ("", "deepseek-ai-DeepSeek-V3.1.jinja"),
}


@pytest.mark.parametrize("vocab", sorted(TOKENIZED))
def test_token_by_token_from_a_real_tokenizer(vocab):
    """Encode the template's assistant turn with the real tokenizer and stream it the way an engine
    would, one token's text at a time (tokenizers' DecodeStream as the detokenizer): the markers are
    single tokens of that vocabulary and the calls come out the same as from the whole text."""
    path = vocabulary(vocab)
    member, file = TOKENIZED[vocab]
    tokenizer = Tokenizer.from_file(str(path / member if member else path))
    if file not in TEMPLATES:
        pytest.skip(f"{file} is not in ../shared/fixtures")
    parser, start, arguments_type, most, content = CASES[file]
    turn = assistant_turn(TEMPLATES[file], CALLS[:most], start, arguments_type, content)
    for marker in get_tool_parser(parser).special_tokens:
        assert tokenizer.token_to_id(marker) is not None, marker
    decoder = DecodeStream(skip_special_tokens=False)
    pieces = [decoder.step(tokenizer, i) for i in tokenizer.encode(turn, add_special_tokens=False).ids]
    pieces = [p for p in pieces if p]
    assert "".join(pieces) == turn
    streamed = summary(stream(parser, pieces))
    assert streamed == whole(parser, turn)
    assert [(name, json.loads(args)) for name, args in streamed["calls"]] == CALLS[:most]
