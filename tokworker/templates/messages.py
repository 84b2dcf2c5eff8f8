"""OpenAI-style chat messages made into what chat templates expect, as vLLM's server does before rendering.

A server receives messages as the OpenAI API defines them: `content` may be null (an assistant turn that
only calls tools) or a list of parts, and a tool call's `arguments` is a JSON string. Templates were written
for transformers' view instead, so each message is rebuilt the way vLLM's chat_utils does it:

- content: null becomes no text; text parts are joined with newlines for templates that print content as
  a string, or passed as `{"type": "text", "text": ...}` parts to templates that loop over content (found
  in the template's syntax tree, vLLM's "string" and "openai" content formats). A tool result given as text
  parts is always joined, since templates print tool results as text. Parts other than text are refused:
  this renderer is text-only.
- tool calls: an empty list is dropped; `arguments` becomes a dict (a JSON string is parsed; anything that
  is not JSON becomes {}), as vLLM does, because templates write arguments with `|tojson` or `|items`.
  Templates that glue arguments into text with `+` (DeepSeek V3.1, functionary, Apertus) get JSON text
  instead: the caller's own string if it was valid JSON, else the object dumped. vLLM passes the dict there,
  which those templates can't add to a string; this is where the two differ.
- only the fields vLLM passes on are kept: role, content, name, task; an assistant's tool_calls and
  reasoning (taken from `reasoning`, or `reasoning_content` which vLLM drops); a tool's tool_call_id; a
  developer's tools.
"""

from __future__ import annotations

import json

import jinja2
from jinja2 import nodes

from .bounds import Limits
from .compiled import environment_for
from .errors import TemplateInputError

#: part type -> the key holding its text
_TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal",
               "thinking": "thinking"}
DEFAULT_LIMITS = Limits()
_CACHE_MAX_CHARS = 4 << 20          # the cache holds templates as keys: bounded by their total size


class TemplateShape:
    """What a template does with content and tool-call arguments."""

    __slots__ = ("content_parts", "arguments_as_text")

    def __init__(self, content_parts: bool, arguments_as_text: bool):
        self.content_parts, self.arguments_as_text = content_parts, arguments_as_text


_SHAPES: dict[str, TemplateShape] = {}
_shape_chars = 0


def template_shape(template: str) -> TemplateShape:
    """The shape of a template, read from its syntax tree once (cached, bounded by template size)."""
    global _shape_chars
    shape = _SHAPES.get(template)
    if shape is None:
        shape = _read_shape(template)
        if _shape_chars + len(template) > _CACHE_MAX_CHARS:
            _SHAPES.clear()
            _shape_chars = 0
        _SHAPES[template] = shape
        _shape_chars += len(template)
    return shape


def _read_shape(template: str) -> TemplateShape:
    """Parsed with the rendering environment (which knows every tag rendering accepts); a template that
    does not parse, or is over the size cap, gets the default shape and the render reports it."""
    if len(template) > DEFAULT_LIMITS.max_template_chars:
        return TemplateShape(False, False)
    try:
        tree = environment_for(DEFAULT_LIMITS).parse(template)
    except (jinja2.TemplateSyntaxError, RecursionError):
        return TemplateShape(False, False)
    return TemplateShape(_loops_over_content(tree), _adds_arguments(tree))


def _key(node) -> str | None:
    """The attribute or constant key `node` reads (`x.content`, `x['content']`), else None."""
    if isinstance(node, nodes.Getattr):
        return node.attr
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
        return node.arg.value
    return None


def _unfiltered(node):
    while isinstance(node, (nodes.Filter, nodes.Test)) and node.node is not None:
        node = node.node
    return node


def _loops_over_content(tree) -> bool:
    """Whether a {% for %} iterates a variable's content (`for part in message.content`, through filters
    too), the sign of a template written for content parts."""
    for loop in tree.find_all(nodes.For):
        iterated = _unfiltered(loop.iter)
        if _key(iterated) == "content" and isinstance(iterated.node, nodes.Name):
            return True
    return False


def _adds_arguments(tree) -> bool:
    """Whether the template adds a call's bare `arguments` to a string with `+` (`x + args|tojson` is fine
    with a dict: the filter binds first)."""
    for add in tree.find_all(nodes.Add):
        if "arguments" in (_key(add.left), _key(add.right)):
            return True
    return False


def normalize_openai_messages(messages, template: str) -> list[dict]:
    """`messages` (OpenAI chat format) as vLLM's server hands them to `template`."""
    if not isinstance(messages, (list, tuple)):
        raise TemplateInputError(f"messages should be a list of dicts, not {type(messages).__name__}")
    shape = template_shape(template)
    return [_message(message, index, shape) for index, message in enumerate(messages)]


def _message(message, index: int, shape: TemplateShape) -> dict:
    if not isinstance(message, dict):
        raise TemplateInputError(f"message {index} should be a dict, not {type(message).__name__}")
    role = message.get("role")
    if not isinstance(role, str):
        raise TemplateInputError(f"message {index} needs a role")
    texts = _texts(message.get("content"), index)
    if texts is None:
        content = message["content"]               # a plain string
        if shape.content_parts and role != "tool":
            content = [{"type": "text", "text": content}]
    elif shape.content_parts and role != "tool":
        content = [{"type": "text", "text": text} for text in texts]
    else:
        content = "\n".join(texts)
    result = {"role": role, "content": content}
    for key in ("name", "task"):
        if isinstance(message.get(key), str):
            result[key] = message[key]
    if role == "assistant":
        reasoning = message.get("reasoning", message.get("reasoning_content"))
        if reasoning is not None:
            result["reasoning"] = result["reasoning_content"] = reasoning
        calls = message.get("tool_calls")
        if isinstance(calls, list) and calls:
            result["tool_calls"] = [_tool_call(call, index, shape) for call in calls]
    elif role == "tool" and "tool_call_id" in message:
        result["tool_call_id"] = message["tool_call_id"]
    elif role == "developer" and message.get("tools") is not None:
        result["tools"] = message["tools"]
    return result


def _texts(content, index: int) -> list[str] | None:
    """The texts of null or list content; None for a plain string."""
    if isinstance(content, str):
        return None
    if content is None:
        return []
    if not isinstance(content, (list, tuple)):
        raise TemplateInputError(f"message {index}: content should be a string or a list of parts, not "
                                 f"{type(content).__name__}")
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
            continue
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str) or kind not in _TEXT_PARTS:
            raise TemplateInputError(f"message {index}: content part of type {kind!r} is not supported "
                                     f"(text parts only)")
        text = part.get(_TEXT_PARTS[kind])
        if text is not None:                     # vLLM skips text parts without text
            if not isinstance(text, str):
                raise TemplateInputError(f"message {index}: a {kind} part's text should be a string")
            texts.append(text)
    return texts


def _tool_call(call, index: int, shape: TemplateShape) -> dict:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        raise TemplateInputError(f"message {index}: each tool call needs a function object")
    arguments, as_text = function.get("arguments"), None
    if isinstance(arguments, str):
        try:
            arguments, as_text = json.loads(arguments), arguments
        except ValueError:
            arguments = {}
    elif not isinstance(arguments, (dict, list)):
        arguments = {}
    if shape.arguments_as_text:
        arguments = as_text if as_text is not None else json.dumps(arguments, ensure_ascii=False)
    return {**call, "function": {**function, "arguments": arguments}}
