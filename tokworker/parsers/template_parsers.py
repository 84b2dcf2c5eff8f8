"""Which tool parser and which reasoning parser a chat template implies, read from its text.

A template renders the model's own call and reasoning format in its history and generation prompt, so
the markup it writes names the format: `<seed:tool_call>` is Seed-OSS, `<|START_ACTION|>` Command R7B,
`[THINK]` a Mistral reasoning model. Each rule is a set of anchors that must all be in the template (and
none of its exclusions); the first rule that holds wins, so the more specific formats come first
(Qwen3-Coder's `<tool_call><function=...>` before Hermes' bare `<tool_call>`). Names are vLLM's where vLLM
has one. A template with no known anchors implies nothing (None): guessing a parser would turn ordinary
answers into tool calls or reasoning.
"""

from __future__ import annotations

# (tool parser, anchors that must all appear, anchors that must not)
_TOOL_RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("openai", ("<|channel|>", "<|call|>"), ()),  # gpt-oss harmony
    ("deepseek_v32", ("<｜DSML｜",), ()),
    ("deepseek_v3", ("<｜tool▁calls▁begin｜>", "```json"), ()),  # "function<｜tool▁sep｜>NAME\n```json"
    ("deepseek_v31", ("<｜tool▁calls▁begin｜>",), ()),  # NAME<｜tool▁sep｜>{args}
    ("step3", ("<steptml:invoke",), ()),
    ("kimi_k2", ("<|tool_calls_section_begin|>",), ()),
    ("seed_oss", ("<seed:tool_call>",), ()),
    ("minimax_m2", ("<minimax:tool_call>",), ()),
    ("cohere_command2", ("<|START_ACTION|>",), ()),  # Command R7B / Command A
    ("cohere_command", ("<|START_OF_TURN_TOKEN|>", "Action:", "```json"), ()),  # Command R+
    ("nemotron_json", ("<TOOLCALL>",), ()),  # Nemotron Nano v2
    ("apertus", ("<|tools_prefix|>",), ()),
    ("longcat", ("<longcat_tool_call>",), ()),
    ("lfm2", ("<|tool_call_start|>",), ()),
    ("gigachat3", ("function call<|role_sep|>",), ()),
    ("internlm", ("<|action_start|><|plugin|>",), ()),
    ("olmo3", ("<function_calls>",), ()),
    ("xlam", ("[BEGIN OF TASK INSTRUCTION]",), ()),
    ("granite", ("<|tool_call|>",), ()),  # Granite 3.x: <|tool_call|>[...]
    ("apriel", ("<tool_calls>", "[BEGIN FINAL RESPONSE]"), ()),
    ("hunyuan_a13b", ("<tool_calls>", "<answer>"), ()),
    ("jamba", ("<tool_calls>", "<|bom|>"), ()),
    ("phi4_mini_json", ("functools", "<|tool|>"), ()),  # Phi-4-mini declares tools in <|tool|>...<|/tool|>
    ("firefunction_v2", ("functools",), ()),
    ("functionary_v32", (">>>all",), ()),
    ("functionary_v31", ("<function=", "<|start_header_id|>"), ()),
    ("glm47", ("<arg_key>", "</arg_key><arg_value>"), ()),  # GLM-4.7 writes a call's parts with no newlines
    ("glm45", ("<arg_key>",), ()),
    ("gemma4", ("<|tool_call>",), ()),  # Gemma 4: <|tool_call>call:NAME{...}<tool_call|>
    # Qwen's thinking templates with XML calls (Qwen3.5, Qwen3.6): vLLM's qwen3_xml, which its users pick
    # there (vLLM's qwen3_coder streams those calls badly); here both names read the same XML
    ("qwen3_xml", ("<tool_call>", "<function=", "<think>", "<|im_start|>"), ("truncate_history_thinking",)),
    ("qwen3_coder", ("<tool_call>", "<function="), ()),  # Qwen3-Coder, Nemotron 3 Nano
    ("ernie45", ("<tool_call>", "<response>"), ("<|start_of_role|>",)),
    ("hermes", ("<tool_call>",), ()),
    ("mistral", ("[TOOL_CALLS]",), ()),
    ("llama4_json", ("<|header_start|>",), ()),
    ("llama3_json", ("<|start_header_id|>", '"parameters"'), ()),
)

# (reasoning parser, anchors that must all appear, anchors that must not)
_REASONING_RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("openai_gptoss", ("<|channel|>", "analysis"), ()),
    ("mistral", ("[THINK]",), ()),
    ("seed_oss", ("<seed:think>",), ()),
    ("cohere", ("<|START_THINKING|>",), ()),
    ("apertus", ("<|inner_prefix|>",), ()),
    ("apriel", ("[BEGIN FINAL RESPONSE]",), ()),
    ("gemma4", ("<|channel>",), ()),
    ("granite", ("<|start_of_role|>", "<think>"), ()),  # Granite 3.3: <think>...</think><response>...
    ("granite", ("<|start_of_role|>", "Here is my thought process"), ()),  # Granite 3.2
    ("minimax_m2", ("<think>", "]~b]"), ()),
    ("hunyuan_a13b", ("<think>", "<answer>"), ()),
    ("ernie45", ("<think>", "<response>"), ()),
    ("deepseek_v3", ("<think>", "<｜Assistant｜>", "thinking"), ()),  # V3.1's thinking switch
    ("deepseek_r1", ("<think>", "<｜Assistant｜>"), ()),
    ("glm45", ("<think>", "[gMASK]"), ()),
    ("nemotron_v3", ("<think>", "truncate_history_thinking"), ()),  # Nemotron 3 Nano
    ("qwen3", ("<think>", "enable_thinking", "<|im_start|>"), ()),  # Qwen3, SmolLM3
    ("deepseek_r1", ("<think>",), ()),  # the block opened in the prompt or by the model (QwQ, Nemotron v2)
)


def _first(rules, template: str) -> str | None:
    for name, anchors, exclusions in rules:
        if all(a in template for a in anchors) and not any(x in template for x in exclusions):
            return name
    return None


def parsers_for_template(template: str) -> tuple[str | None, str | None]:
    """(tool parser, reasoning parser) the chat template implies, by vLLM's names; None for a part the
    template shows no format for.

    >>> parsers_for_template("{% if enable_thinking %}<think>{% endif %}<|im_start|>assistant\\n<tool_call>")
    ('hermes', 'qwen3')
    >>> parsers_for_template("{{ bos_token }}{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}")
    (None, None)
    """
    if not isinstance(template, str):
        raise TypeError(f"a chat template is a str, not {type(template).__name__}")
    return _first(_TOOL_RULES, template), _first(_REASONING_RULES, template)
