"""OpenAI's shapes at a tool parser's edges: the request's tools list in (its schemas by name), the
streamed deltas out as one whole message (what `parse` returns).
"""

from __future__ import annotations

from tokworker.protocol.deltas import Delta


def tool_schemas(tools: list[dict] | None) -> dict[str, dict]:
    """The request's OpenAI tools list -> {function name: parameters schema}.

    >>> tool_schemas([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
    ...               {"type": "function", "function": {"name": "g"}}])
    {'f': {'type': 'object'}, 'g': {}}
    """
    if tools is None:
        return {}
    if not isinstance(tools, list):
        raise ValueError(f"tools must be a list of OpenAI tool objects, not {type(tools).__name__}")
    schemas = {}
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ValueError(f"each tool needs a function with a string name, got {tool!r:.200}")
        parameters = function.get("parameters")
        schemas[function["name"]] = parameters if isinstance(parameters, dict) else {}
    return schemas


def assemble(deltas: list[Delta]) -> dict:
    """Streamed deltas -> one message: {"content", "reasoning_content", "tool_calls"}.

    >>> from tokworker.protocol.deltas import FunctionDelta, ToolCallDelta
    >>> head = ToolCallDelta(index=0, id="call_1", type="function", function=FunctionDelta(name="f", arguments='{"a"'))
    >>> more = ToolCallDelta(index=0, function=FunctionDelta(arguments=": 1}"))
    >>> message = assemble([Delta(content="Hi"), Delta(tool_calls=[head]), Delta(tool_calls=[more])])
    >>> message["content"], message["reasoning_content"]
    ('Hi', None)
    >>> message["tool_calls"]
    [{'id': 'call_1', 'type': 'function', 'function': {'name': 'f', 'arguments': '{"a": 1}'}}]
    """
    content, reasoning, calls = [], [], {}
    for delta in deltas:
        if delta.content is not None:
            content.append(delta.content)
        if delta.reasoning_content is not None:
            reasoning.append(delta.reasoning_content)
        for part in delta.tool_calls or ():
            call = calls.setdefault(part.index, {"id": None, "type": "function",
                                                 "function": {"name": None, "arguments": ""}})
            if part.id is not None:
                call["id"] = part.id
            if part.function is not None:
                if part.function.name is not None:
                    call["function"]["name"] = part.function.name
                call["function"]["arguments"] += part.function.arguments or ""
    return {"content": "".join(content) or None, "reasoning_content": "".join(reasoning) or None,
            "tool_calls": [calls[i] for i in sorted(calls)]}
