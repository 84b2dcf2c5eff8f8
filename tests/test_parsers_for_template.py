"""parsers_for_template names the tool and reasoning parsers each of the 36 real fixture templates implies,
agrees with what MANIFEST.json says each template does (a call format, a reasoning switch), and names only
parsers that exist (reasoning) or that the tool-parser registry is to hold (the names the lead fixed)."""

from __future__ import annotations

import pytest

from tests.realdata import chat_templates
from tokworker.parsers import parsers_for_template
from tokworker.parsers.reasoning import REASONING_PARSERS, get_reasoning_parser

TOOL_NAMES = {
    "hermes", "llama3_json", "mistral", "pythonic", "deepseek_v3", "deepseek_v31", "qwen3_coder", "openai", "kimi_k2",
    "glm45", "seed_oss", "cohere_command", "cohere_command2", "minimax_m2", "nemotron_json", "firefunction_v2",
    "granite", "functionary_v31", "functionary_v32", "apriel", "apertus", "deepseek_v32", "glm47", "qwen3_xml",
    "llama4_json", "phi4_mini_json", "xlam", "internlm", "jamba", "hunyuan_a13b", "ernie45", "step3", "longcat",
    "olmo3", "gigachat3", "lfm2", "gemma4",
}

EXPECTED = {
    "Apertus-8B-Instruct.jinja": ("apertus", "apertus"),
    "ByteDance-Seed-OSS.jinja": ("seed_oss", "seed_oss"),
    "CohereForAI-c4ai-command-r-plus-tool_use.jinja": ("cohere_command", None),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": ("cohere_command2", "cohere"),
    "GLM-4.6.jinja": ("glm45", "glm45"),
    "HuggingFaceTB-SmolLM3-3B.jinja": (None, "qwen3"),  # this variant renders no tools
    "MiniMax-M2.jinja": ("minimax_m2", "minimax_m2"),
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": ("mistral", None),
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja": ("qwen3_coder", "nemotron_v3"),
    "NVIDIA-Nemotron-Nano-v2.jinja": ("nemotron_json", "deepseek_r1"),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": ("hermes", None),
    "Qwen-QwQ-32B.jinja": ("hermes", "deepseek_r1"),  # vLLM's recommendation for QwQ
    "Qwen-Qwen2.5-7B-Instruct.jinja": ("hermes", None),
    "Qwen-Qwen3-0.6B.jinja": ("hermes", "qwen3"),
    "Qwen3-Coder.jinja": ("qwen3_coder", None),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": ("deepseek_v3", "deepseek_r1"),
    "deepseek-ai-DeepSeek-V3.1.jinja": ("deepseek_v31", "deepseek_v3"),
    "fireworks-ai-llama-3-firefunction-v2.jinja": ("firefunction_v2", None),
    "google-gemma-2-2b-it.jinja": (None, None),
    "ibm-granite-granite-3.3-2B-Instruct.jinja": ("granite", "granite"),
    "ibm-granite-granite-4.0.jinja": ("hermes", None),
    "meetkai-functionary-medium-v3.1.jinja": ("functionary_v31", None),
    "meetkai-functionary-medium-v3.2.jinja": ("functionary_v32", None),
    "meta-llama-Llama-3.2-3B-Instruct.jinja": ("llama3_json", None),
    "meta-llama-Llama-3.3-70B-Instruct.jinja": ("llama3_json", None),
    "microsoft-Phi-3.5-mini-instruct.jinja": (None, None),
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": ("mistral", "mistral"),
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": ("mistral", None),
    "moonshotai-Kimi-K2.jinja": ("kimi_k2", None),
    "openai-gpt-oss-120b.jinja": ("openai", "openai_gptoss"),
    "unsloth-Apriel-1.5.jinja": ("apriel", "apriel"),
    "unsloth-mistral-Devstral-Small-2507.jinja": ("mistral", None),
    "vllm-examples-tool_chat_template_deepseekv3.jinja": ("deepseek_v3", None),
    "vllm-examples-tool_chat_template_hermes.jinja": ("hermes", None),
    "vllm-examples-tool_chat_template_llama3.1_json.jinja": ("llama3_json", None),
    "vllm-examples-tool_chat_template_mistral_parallel.jinja": ("mistral", None),
}


@pytest.fixture(scope="module")
def templates():
    found = chat_templates()
    if not found:
        pytest.skip("../shared/fixtures/chat_templates not present")
    return found


def test_every_fixture_template_is_named(templates):
    assert set(templates) == set(EXPECTED)  # a new fixture must be given its expected parsers here
    got = {file: parsers_for_template(entry["text"]) for file, entry in templates.items()}
    assert got == EXPECTED


@pytest.mark.parametrize("file", sorted(EXPECTED))
def test_the_choice_agrees_with_the_manifest(templates, file):
    entry = templates[file]
    tool, reasoning = parsers_for_template(entry["text"])
    # a template that renders a call format implies its parser; one without implies none (SmolLM3's
    # variant renders no tools; R1-Distill renders past calls without declaring tools: its format still holds)
    assert (tool is None) == (entry["tool_call_format"] is None)
    assert (reasoning is None) == (not entry["supports_reasoning"])
    assert tool is None or tool in TOOL_NAMES
    assert reasoning is None or reasoning in REASONING_PARSERS
    if reasoning is not None:
        get_reasoning_parser(reasoning)  # the named reasoning parser exists here


ANCHORS = [  # formats without a fixture template: the markup their templates write
    ("{{'<｜tool▁calls▁begin｜>'}}{{'<｜DSML｜function_calls>'}}", "deepseek_v32"),
    ("<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name=", "step3"),
    ("{{- '<longcat_tool_call>' }}", "longcat"),
    ("<|im_start|>assistant\n<|tool_call_start|>[f(x=1)]<|tool_call_end|>", "lfm2"),
    ("<|message_sep|>\n\nfunction call<|role_sep|>\n", "gigachat3"),
    ("<|im_start|>assistant\n<|action_start|><|plugin|>\n", "internlm"),
    ("<|im_start|>assistant\n<function_calls>", "olmo3"),
    ("[BEGIN OF TASK INSTRUCTION]\n[BEGIN OF FORMAT INSTRUCTION]", "xlam"),
    ("<|startoftext|><tool_calls>[...]</tool_calls><think>x</think><answer>y</answer>", "hunyuan_a13b"),
    ("<|bom|><|system|><tool_calls>", "jamba"),
    ("<|system|><|tool|>[...]<|/tool|><|end|> functools[...]", "phi4_mini_json"),
    ("<|header_start|>assistant<|header_end|>", "llama4_json"),
    ("<tool_call>{...}</tool_call><think></think><response>x</response>", "ernie45"),
    # GLM-4.7 writes <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>, GLM-4.5/4.6 a line each
    ("{{- '<tool_call>' + tc.name -}}{% for k, v in _args.items() %}<arg_key>{{ k }}</arg_key><arg_value>{{ v }}"
     "</arg_value>{% endfor %}</tool_call>", "glm47"),
    ("{{ '\\n<tool_call>' + tc.name }}\n{% for k, v in _args.items() %}\n<arg_key>{{ k }}</arg_key>\n<arg_value>"
     "{{ v }}</arg_value>\n{% endfor %}", "glm45"),
    # Qwen's thinking template with XML calls (Qwen3.5), and Qwen3-Coder's, which does not think
    ("<|im_start|>assistant\n<think>\n{{- '<tool_call>\\n<function=' + tool_call.name + '>\\n' }}", "qwen3_xml"),
    ("<|im_start|>assistant\n{{- '\\n<tool_call>\\n<function=' + tool_call.name + '>\\n' }}", "qwen3_coder"),
    ("<|turn>model\n<|tool_call>call:{{ name }}{<tool_call|>", "gemma4"),
]


@pytest.mark.parametrize("template,tool", ANCHORS, ids=[a[1] for a in ANCHORS])
def test_anchors_of_formats_without_a_fixture(template, tool):
    assert parsers_for_template(template)[0] == tool


def test_no_anchor_means_no_parser_and_bad_input_is_a_typed_error():
    assert parsers_for_template("{% for m in messages %}{{ m.content }}{% endfor %}") == (None, None)
    with pytest.raises(TypeError, match="chat template is a str"):
        parsers_for_template(None)


def test_every_rule_names_a_registered_parser():
    from tokworker.parsers.template_parsers import _REASONING_RULES, _TOOL_RULES
    from tokworker.parsers.tools import TOOL_PARSERS
    assert {name for name, _, _ in _TOOL_RULES} <= set(TOOL_PARSERS)
    assert {name for name, _, _ in _REASONING_RULES} <= set(REASONING_PARSERS)
