"""tool_choice "required" and a named tool as a regex: the call's wrapper is literal text in the model's
own tool-call format, the arguments follow the tool's JSON Schema.

    hermes       <tool_call>\\n{"name": "NAME", "arguments": ARGS}\\n</tool_call>
    llama3_json  {"name": "NAME", "parameters": ARGS}
    mistral      [TOOL_CALLS] [{"name": "NAME", "arguments": ARGS}]  (v3 array; the space is optional, as
                                                                      SentencePiece writes it; an "id" may follow)
                 or [TOOL_CALLS]NAME[ARGS]ARGS                        (v11+; [CALL_ID]id may precede [ARGS])
    qwen3_coder  <tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n...</function>\\n</tool_call>

With parallel=True one or more calls may follow each other (in the format's own way). On tokenizers
where a marker is a special token (Mistral's [TOOL_CALLS], [ARGS], [CALL_ID]), build the VocabTrie with
`control_tokens(format, tokenizer.added_tokens)` so the marker can be emitted as that token.
"""

from __future__ import annotations

from tokworker.constrain import json_values as jv
from tokworker.constrain.json_schema import SchemaError, json_schema_to_regex, ordered_members

NO_ARGUMENTS = {"type": "object", "properties": {}}
MARKERS = {
    "hermes": ("<tool_call>", "</tool_call>"),
    "llama3_json": (),
    "mistral": ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"),
    "qwen3_coder": ("<tool_call>", "</tool_call>"),
}
FORMATS = tuple(MARKERS)
# qwen3_coder string values are raw text: no "</" or "<p" (the parser ends a value at </parameter>,
# <parameter= or </function>); a lone "<" is fine.
_RAW_TEXT = r"(?:[^<]|<+[^</p])*"
_MISTRAL_ID = "[A-Za-z0-9]{9}"


def tool_call_pattern(tools: list[dict], name=None, format: str = "hermes", whitespace: str = "json",
                      parallel: bool = False) -> str:
    """A regex every match of which is a call (or, with parallel=True, calls) of one of `tools` - or of
    the tool `name` (a name or an OpenAI tool_choice object) - in `format`. ValueError for an unknown
    tool name or format; SchemaError for parameters the converter cannot express."""
    if format not in MARKERS:
        raise ValueError(f"unknown tool-call format {format!r}; known: {', '.join(FORMATS)}")
    functions = _functions(tools)
    if name is not None:
        wanted = _choice_name(name)
        functions = [f for f in functions if f["name"] == wanted]
        if not functions:
            raise ValueError(f"no tool named {wanted!r} among {[f['name'] for f in _functions(tools)]}")
    if format == "mistral":
        array, named = _mistral_array(functions, whitespace, parallel), _v11_calls(functions, whitespace)
        return f"(?:{array}|{named}{'+' if parallel else ''})"
    calls = [_call(format, f, whitespace) for f in functions]
    call = calls[0] if len(calls) == 1 else "(?:" + "|".join(calls) + ")"
    if not parallel:
        return call
    separator = {"hermes": r"\n", "llama3_json": "; ", "qwen3_coder": r"\n"}[format]
    return f"{call}(?:{separator}{call})*"


def control_tokens(format: str, added_tokens: dict[str, int]) -> dict[int, bytes]:
    """{token id: marker bytes} for the format's markers that the tokenizer has as added tokens: pass it
    to VocabTrie so a forced call can use them."""
    return {added_tokens[m]: m.encode() for m in MARKERS.get(format, ()) if m in added_tokens}


def _functions(tools) -> list[dict]:
    if not isinstance(tools, list) or not tools:
        raise ValueError("tools must be a non-empty list of OpenAI tool definitions")
    functions = []
    for tool in tools:
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise ValueError(f"not a tool definition with a function name: {tool!r}")
        functions.append(function)
    return functions


def _choice_name(name) -> str:
    if isinstance(name, dict):
        name = (name.get("function") or {}).get("name") if "function" in name else name.get("name")
    if not isinstance(name, str):
        raise ValueError(f"tool choice must be a tool name or {{'function': {{'name': ...}}}}, not {name!r}")
    return name


def _arguments(function, whitespace) -> str:
    return json_schema_to_regex(function.get("parameters") or NO_ARGUMENTS, whitespace=whitespace)


def _call(format: str, function: dict, whitespace: str) -> str:
    name = function["name"]
    if format == "hermes":
        return r'<tool_call>\n\{"name": ' + jv.json_literal(name) + ', "arguments": ' + \
            _arguments(function, whitespace) + r"\}\n</tool_call>"
    if format == "llama3_json":
        return r'\{"name": ' + jv.json_literal(name) + ', "parameters": ' + _arguments(function, whitespace) + r"\}"
    return _qwen3_coder_call(function)


def _mistral_array(functions, whitespace, parallel: bool) -> str:
    """[TOOL_CALLS] [{"name": ..., "arguments": ...}] (several objects when parallel)."""
    items = [r'\{"name": ' + jv.json_literal(f["name"]) + ', "arguments": ' + _arguments(f, whitespace) +
             f'(?:, "id": "{_MISTRAL_ID}")?' + r"\}" for f in functions]
    item = items[0] if len(items) == 1 else "(?:" + "|".join(items) + ")"
    return r"\[TOOL_CALLS\] ?\[" + item + (f"(?:, {item})*" if parallel else "") + r"\]"


def _v11_calls(functions, whitespace) -> str:
    """[TOOL_CALLS]NAME[ARGS]{...}: one call of any of the functions."""
    calls = [r"\[TOOL_CALLS\]" + jv.regex_escape(f["name"]) + rf"(?:\[CALL_ID\]{_MISTRAL_ID})?\[ARGS\]" +
             _arguments(f, whitespace) for f in functions]
    return "(?:" + "|".join(calls) + ")"


def _qwen3_coder_call(function: dict) -> str:
    schema = function.get("parameters") or NO_ARGUMENTS
    properties, required = schema.get("properties", {}), schema.get("required", [])
    members = [(f"<parameter={jv.regex_escape(key)}>\\n{_qwen3_coder_value(key, value)}\\n</parameter>\\n",
                key in required) for key, value in properties.items()]
    missing = [key for key in required if key not in properties]
    if missing:
        raise SchemaError(f"qwen3_coder: required parameters without a schema: {missing}")
    body = ordered_members(members, "")
    return rf"<tool_call>\n<function={jv.regex_escape(function['name'])}>\n{body}</function>\n</tool_call>"


def _qwen3_coder_value(key: str, schema) -> str:
    """Strings are raw text, other values JSON text (the parser converts by the schema's type)."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    literals = [schema["const"]] if isinstance(schema, dict) and "const" in schema else \
        schema.get("enum") if isinstance(schema, dict) else None
    if kind is None and isinstance(literals, list) and literals and all(isinstance(v, str) for v in literals):
        kind = "string"  # the parser reads an untyped enum of strings as a string too
    if kind == "string":
        extra = sorted(set(schema) - {"type", "enum", "const", "description", "title", "default", "examples"})
        if extra:
            raise SchemaError(f"qwen3_coder: string parameter {key!r} with {', '.join(extra)} is not supported")
        values = [schema["const"]] if "const" in schema else schema.get("enum")
        if values is None:
            return _RAW_TEXT
        return "(?:" + "|".join(jv.regex_escape(v) for v in values if isinstance(v, str) and "</" not in v) + ")"
    if kind in ("integer", "number", "boolean", "object", "array"):
        return "(?:" + json_schema_to_regex(schema) + ")"
    raise SchemaError(f"qwen3_coder: parameter {key!r} needs a single type (string, integer, number, "
                      "boolean, object or array)")
