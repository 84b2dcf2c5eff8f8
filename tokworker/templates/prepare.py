"""What transformers 5.24 does to messages, tools and documents before a template sees them.

Templates were written against that exact view of the data, so it is reproduced step by step: message
objects become dicts, None-valued keys are dropped, everything the template sees is rebuilt from plain JSON
types (anything else becomes a "<TypeName>" placeholder), reasoning is aliased under the names templates
read, and callables given as tools become JSON schemas.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from collections.abc import Mapping

from .errors import TemplateInputError

#: Names a message's reasoning is passed under; the first is the one most templates read.
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def _objects_to_dicts(value):
    """Message objects (dataclasses, pydantic models such as the OpenAI SDK's) to dicts, recursively."""
    if isinstance(value, Mapping):
        return {key: _objects_to_dicts(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_objects_to_dicts(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_objects_to_dicts(item) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: _objects_to_dicts(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return _objects_to_dicts(value.model_dump())
    return value


def normalize_messages(conversation) -> list[dict]:
    """Messages as dicts without their None-valued keys (many templates break on `content: None` but
    handle a missing key)."""
    messages = _objects_to_dicts(getattr(conversation, "messages", conversation))
    if isinstance(messages, (list, tuple)) and not messages:
        raise TemplateInputError("Cannot apply chat template to an empty conversation. Provide at least one message.")
    if not isinstance(messages, (list, tuple)):
        raise TemplateInputError(f"messages should be a list of dicts, not {type(messages).__name__}")
    normalized = []
    for message in messages:
        if not isinstance(message, dict):
            raise TemplateInputError(f"Chat messages should be dicts, dataclasses or pydantic models, but got {message!r}.")
        normalized.append({key: value for key, value in message.items() if value is not None})
    return normalized


def _numpy_scalar_type():
    numpy = sys.modules.get("numpy")
    return getattr(numpy, "generic", None) if numpy is not None else None


def plain_data(value):
    """A copy built only from JSON types, so no object with dangerous methods reaches the sandbox."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {plain_data(key): plain_data(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain_data(item) for item in value]
    if isinstance(value, tuple):
        return tuple(plain_data(item) for item in value)
    numpy_scalar = _numpy_scalar_type()
    if numpy_scalar is not None and isinstance(value, numpy_scalar):
        return plain_data(value.item())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: plain_data(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return plain_data(value.model_dump())
    return f"<{type(value).__name__}>"


def alias_reasoning(chat: list) -> list:
    """Put a message's reasoning under `reasoning_content` and `thinking` (gpt-oss reads the latter)."""
    aliased = []
    for message in chat:
        if isinstance(message, dict):
            reasoning = next((message[key] for key in REASONING_FIELDS if message.get(key) is not None), None)
            if reasoning is not None:
                message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        aliased.append(message)
    return aliased


def tool_schemas(tools):
    """Tools as JSON schemas: dicts pass through, functions and methods are described from their
    signature and docstring."""
    if tools is None:
        return None
    schemas = []
    for tool in tools:
        if isinstance(tool, dict):
            schemas.append(tool)
        elif inspect.isfunction(tool) or inspect.ismethod(tool):
            from .tool_schema import function_schema
            schemas.append(function_schema(tool))
        else:
            raise TemplateInputError("Tools should either be a JSON schema, or a callable function with type hints "
                                     "and a docstring suitable for auto-conversion to a schema.")
    return schemas


def check_documents(documents) -> None:
    if documents is not None:
        for document in documents:
            if not isinstance(document, dict):
                raise TemplateInputError("Documents should be a list of dicts with 'title' and 'text' keys!")
