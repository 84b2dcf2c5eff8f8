"""tokworker: the text boundary of LLM serving.

The public surface is small and imported lazily, so a worker that only streams text never pays for
jinja2, and `import tokworker` stays cheap in the API process.
"""

from importlib import import_module

_EXPORTS = {
    "Tokenizer": "tokworker.templates.chat_tokenizer",
    "IncrementalDetokenizer": "tokworker.stream.detokenizer",
    "StopChecker": "tokworker.stream.stop",
    "TextStream": "tokworker.stream.state",
    "get_reasoning_parser": "tokworker.parsers.reasoning",
    "get_tool_parser": "tokworker.parsers.tools",
    "parsers_for_template": "tokworker.parsers",
    "render_chat": "tokworker.templates",
    "TemplateError": "tokworker.templates",
    "json_schema_to_regex": "tokworker.constrain.json_schema",
    "tool_call_pattern": "tokworker.constrain.tool_choice",
    "TokenAutomaton": "tokworker.constrain.automaton",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tokworker' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
