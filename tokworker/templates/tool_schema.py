"""A Python function given as a tool -> the JSON schema transformers' get_json_schema makes of it.

The description and argument descriptions come from a Google-style docstring (Args:, Returns:), the types
from the type hints; an argument description ending in `(choices: [...])` becomes an enum. Anything that
can't be described raises TemplateInputError, as transformers raises.
"""

from __future__ import annotations

import inspect
import json
import re
import types
from enum import Enum
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from .errors import TemplateInputError

_SECTION_END = r"(?:Args:|Returns:|Raises:|\Z)"
_DESCRIPTION = re.compile(r"^(.*?)[\n\s]*" + _SECTION_END, re.S)
_ARGS = re.compile(r"\n\s*Args:\n(.*?)[\n\s]*(?:Returns:|Raises:|\Z)", re.S)
_RETURNS = re.compile(r"\n\s*Returns:\n\s*(.*?)[\n\s]*(?:Raises:|\Z)", re.S)
# one "name (type): description" entry, running until the next entry at the same or a shallower indent
_ARG = re.compile(r"(?:^|\n)([ \t]*)(\w+)(?:[ \t]*\([^()\n]*\))?:\s*(.*?)\s*"
                  r"(?=\n(?!\1[ \t])[ \t]*\w+(?:[ \t]*\([^()\n]*\))?:|\Z)", re.S)
_CHOICES = re.compile(r"\(choices:\s*(.*?)\)\s*$", re.I)
_SCALARS = {int: "integer", float: "number", str: "string", bool: "boolean", type(None): "null"}
_BASIC = {int: {"type": "integer"}, float: {"type": "number"}, str: {"type": "string"},
          bool: {"type": "boolean"}, type(None): {"type": "null"}, list: {"type": "array"},
          tuple: {"type": "array"}, dict: {"type": "object"}, Any: {}}


def function_schema(function) -> dict:
    name = getattr(function, "__name__", "operation")
    doc = inspect.getdoc(function)
    if not doc:
        raise TemplateInputError(f"Cannot generate JSON schema for {name} because it has no docstring!")
    description, arguments, returns = _parse_docstring(doc.strip())
    parameters = _parameters(function, name)
    returned = parameters["properties"].pop("return", None)
    if returned is not None and returns is not None:
        returned["description"] = returns
    for argument, schema in parameters["properties"].items():
        if argument not in arguments:
            raise TemplateInputError(f"Cannot generate JSON schema for {name} because the docstring has no "
                                     f"description for the argument '{argument}'")
        text = arguments[argument]
        choices = _CHOICES.search(text)
        if choices:
            schema["enum"] = [c.strip() if isinstance(c, str) else c for c in json.loads(choices.group(1))]
            text = text[:choices.start()].strip()
        schema["description"] = text
    output = {"name": name, "description": description, "parameters": parameters}
    if returned is not None:
        output["return"] = returned
    return {"type": "function", "function": output}


def _parse_docstring(doc: str):
    description = _DESCRIPTION.search(doc)
    block = _ARGS.search(doc)
    returns = _RETURNS.search(doc)
    arguments = {}
    if block:
        lines = "\n".join(line for line in block.group(1).split("\n") if line.strip())
        arguments = {m.group(2): re.sub(r"\s*\n+\s*", " ", m.group(3).strip()) for m in _ARG.finditer(lines)}
    return (description.group(1).strip() if description else None, arguments,
            returns.group(1).strip() if returns else None)


def _parameters(function, name: str) -> dict:
    hints = get_type_hints(function)
    signature = inspect.signature(function)
    first = next(iter(signature.parameters), None)
    receiver = first if (first in ("self", "cls")
                         and signature.parameters[first].annotation is inspect.Parameter.empty) else None
    required = []
    for parameter in signature.parameters.values():
        if parameter.name == receiver:
            continue
        if parameter.annotation is inspect.Parameter.empty:
            raise TemplateInputError(f"Argument {parameter.name} is missing a type hint in function {name}")
        if parameter.default is inspect.Parameter.empty:
            required.append(parameter.name)
    properties = {}
    for argument, hint in hints.items():
        if argument == receiver:
            continue
        if argument == "return":
            try:
                properties[argument] = _type_schema(hint)
            except TemplateInputError:
                pass
        else:
            properties[argument] = _type_schema(hint)
    schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _enum(values: list) -> dict:
    kinds = list(dict.fromkeys(_SCALARS[type(value)] for value in values))
    return {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": values}


def _type_schema(hint) -> dict:
    origin, args = get_origin(hint), get_args(hint)
    if origin is None and isinstance(hint, type) and issubclass(hint, Enum):
        values = [member.value for member in hint]
        if not values or any(type(value) not in _SCALARS for value in values):
            raise TemplateInputError(f"The Enum {hint.__name__} can't be described as a JSON enum")
        return _enum(values)
    if origin is None:
        if hint not in _BASIC:
            raise TemplateInputError(f"Couldn't convert the type hint {hint!r} to a JSON schema")
        return dict(_BASIC[hint])
    if origin is Union or origin is getattr(types, "UnionType", None):
        members = [_type_schema(arg) for arg in args if arg is not type(None)]
        if len(members) == 1:
            schema = members[0]
        elif all(m.keys() == {"type"} and isinstance(m["type"], str) for m in members):
            names = sorted({m["type"] for m in members})
            schema = {"type": names[0] if len(names) == 1 else names}
        else:
            schema = {"anyOf": members}
        if type(None) in args:
            schema["nullable"] = True
        return schema
    if origin is Literal and args:
        if any(type(arg) not in _SCALARS for arg in args):
            raise TemplateInputError("Only the valid python literals can be listed in typing.Literal.")
        return _enum(list(args))
    if origin is list:
        return {"type": "array", "items": _type_schema(args[0])} if args else {"type": "array"}
    if origin is tuple:
        if not args:
            return {"type": "array"}
        if len(args) == 1 or ... in args:
            raise TemplateInputError(f"The type hint {hint} can't be converted: use list[] for variable length")
        return {"type": "array", "prefixItems": [_type_schema(arg) for arg in args]}
    if origin is dict:
        schema = {"type": "object"}
        if len(args) == 2:
            schema["additionalProperties"] = _type_schema(args[1])
        return schema
    raise TemplateInputError(f"Couldn't parse the type hint {hint!r}")
