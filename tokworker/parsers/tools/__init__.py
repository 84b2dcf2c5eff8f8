"""Tool-call parsers by vLLM's names: `get_tool_parser(name, tools=None)` -> a per-stream parser.

A parser has `feed(text) -> list[Delta]`, `finish() -> list[Delta]`, `parse(text) -> (content, calls)`,
`special_tokens` (marker strings the stream must keep in the text it feeds) and `called`.
core/ holds the shared cores (base.py the streaming loop); formats/ one declaration per model family.
"""

from __future__ import annotations

from importlib import import_module

from .core.base import ToolParser

# vLLM name -> (module in formats/, class). Imported on first use so a process pays only for the formats it serves.
_PARSERS = {
    "hermes": ("hermes", "HermesToolParser"),
    "llama3_json": ("llama3_json", "Llama3JsonToolParser"),
    "mistral": ("mistral", "MistralToolParser"),
    "deepseek_v3": ("deepseek", "DeepSeekV3ToolParser"),
    "deepseek_v31": ("deepseek", "DeepSeekV31ToolParser"),
    "kimi_k2": ("kimi_k2", "KimiK2ToolParser"),
    "kimi_k3": ("kimi_k3", "KimiK3ToolParser"),
    "qwen3_coder": ("qwen3_coder", "Qwen3CoderToolParser"),
    "glm45": ("glm45", "Glm45ToolParser"),
    "openai": ("openai", "OpenAIToolParser"),
    "pythonic": ("pythonic", "PythonicToolParser"),
    "seed_oss": ("seed_oss", "SeedOssToolParser"),
    "minimax_m2": ("minimax_m2", "MinimaxM2ToolParser"),
    "cohere_command": ("cohere", "CohereCommandToolParser"),
    "cohere_command2": ("cohere", "CohereCommand2ToolParser"),
    "cohere_command3": ("cohere", "CohereCommand2ToolParser"),  # vLLM's name for the same format
    "nemotron_json": ("nemotron_json", "NemotronJsonToolParser"),
    "firefunction_v2": ("firefunction", "FirefunctionV2ToolParser"),
    "granite": ("granite", "GraniteToolParser"),
    "granite-20b-fc": ("granite_20b_fc", "Granite20bFcToolParser"),
    "functionary_v31": ("functionary", "FunctionaryV31ToolParser"),
    "functionary_v32": ("functionary", "FunctionaryV32ToolParser"),
    "apriel": ("apriel", "AprielToolParser"),
    "apertus": ("apertus", "ApertusToolParser"),
    "deepseek_v32": ("deepseek_v32", "DeepSeekV32ToolParser"),
    "deepseek_v4": ("deepseek_v32", "DeepSeekV4ToolParser"),
    "glm47": ("glm47", "Glm47ToolParser"),
    "qwen3_xml": ("qwen3_coder", "Qwen3CoderToolParser"),  # vLLM's other reader of the same XML
    "llama4_json": ("llama3_json", "Llama3JsonToolParser"),  # vLLM registers one class for both
    "phi4_mini_json": ("phi4_mini", "Phi4MiniJsonToolParser"),
    "hunyuan_a13b": ("hunyuan", "HunyuanA13BToolParser"),
    "hy_v3": ("hy_v3", "HyV3ToolParser"),
    "ernie45": ("ernie45", "Ernie45ToolParser"),
    "internlm": ("internlm", "InternLMToolParser"),
    "jamba": ("apriel", "AprielToolParser"),  # AI21 Jamba writes Apriel's <tool_calls>[...]</tool_calls>
    "longcat": ("longcat", "LongcatToolParser"),
    "xlam": ("xlam", "XlamToolParser"),
    "step3": ("step3", "Step3ToolParser"),
    "step3p5": ("qwen3_coder", "Qwen3CoderToolParser"),  # Step-3.5 writes qwen3_coder's XML
    "olmo3": ("olmo3", "Olmo3ToolParser"),
    "gigachat3": ("gigachat3", "GigaChat3ToolParser"),
    "minimax": ("minimax", "MinimaxToolParser"),
    "functiongemma": ("functiongemma", "FunctionGemmaToolParser"),
    "lfm2": ("lfm2", "Lfm2ToolParser"),
    "llama4_pythonic": ("pythonic", "PythonicToolParser"),  # pythonic reads Llama 4's <|python_start|> wrapper
    "gemma4": ("gemma4", "Gemma4ToolParser"),
    "granite4": ("hermes", "Granite4ToolParser"),
    "poolside_v1": ("poolside", "PoolsideV1ToolParser"),
    "mimo": ("mimo", "MimoToolParser"),
    "cohere_command4": ("cohere", "CohereCommand2ToolParser"),  # Command A Reasoning writes Command R7B's actions
}

TOOL_PARSERS = tuple(sorted(_PARSERS))
_CLASSES: dict[str, type[ToolParser]] = {}  # bounded by _PARSERS: one class per known name


def get_tool_parser(name: str, tools: list[dict] | None = None) -> ToolParser:
    """A fresh parser for one stream. tools: the request's OpenAI tools (schemas type text values).

    >>> parser = get_tool_parser("hermes")
    >>> parser.feed("Sure.<tool_")          # a possible marker is held back
    [Delta(content='Sure.', reasoning_content=None, tool_calls=None)]
    >>> delta, = parser.feed('call>{"name": "f", "arguments": {"x": 1}}</tool_call>')
    >>> delta.tool_calls[0].function
    FunctionDelta(name='f', arguments='{"x": 1}')
    >>> content, calls = get_tool_parser("hermes").parse('Hi<tool_call>{"name": "f", "arguments": {}}</tool_call>')
    >>> content, calls[0]["function"]
    ('Hi', {'name': 'f', 'arguments': '{}'})
    """
    parser_class = _CLASSES.get(name) if isinstance(name, str) else None
    if parser_class is None:
        try:
            module, cls = _PARSERS[name]
        except (KeyError, TypeError):
            raise ValueError(f"unknown tool parser {name!r}; known: {', '.join(TOOL_PARSERS)}") from None
        parser_class = _CLASSES[name] = getattr(import_module(f"{__name__}.formats.{module}"), cls)
    return parser_class(tools)


__all__ = ["TOOL_PARSERS", "ToolParser", "get_tool_parser"]
