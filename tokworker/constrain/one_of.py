"""oneOf needs exactly one branch to match: a sound, incomplete test that two branches exclude each
other, judged on what json_schema_to_regex generates for one branch (kinds of value, const/enum values,
object properties) against what the other accepts."""

from __future__ import annotations

import json

TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")


def is_type(value, json_type: str) -> bool:
    """jsonschema's notion of a value's type (1.0 is an integer, True is not a number)."""
    if json_type == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and value.is_integer())
    if json_type == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, {"null": type(None), "boolean": bool, "string": str, "array": list,
                              "object": dict}[json_type])


_KINDS = {"null": {"null"}, "boolean": {"boolean"}, "string": {"string"}, "integer": {"integer"},
          "number": {"integer", "fraction"}, "array": {"array"}, "object": {"object"}}
_ALL_KINDS = set().union(*_KINDS.values())


def _kinds(schema) -> set:
    """The kinds of value a schema may accept (integer-valued numbers are "integer")."""
    if not isinstance(schema, dict):
        return set() if schema is False else set(_ALL_KINDS)
    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else schema.get("enum", [])
        return {kind for v in values for t in TYPES if is_type(v, t) for kind in _KINDS[t]
                if t != "number" or kind == ("integer" if is_type(v, "integer") else "fraction")}
    types = schema.get("type")
    if types is None:
        return set(_ALL_KINDS)
    types = [types] if isinstance(types, str) else types
    return set().union(*(_KINDS.get(t, _ALL_KINDS) for t in types))


def _canonical(value):
    """JSON text under jsonschema's equality (1 == 1.0, True != 1)."""
    def normal(v):
        if isinstance(v, float) and v.is_integer():
            return int(v)
        if isinstance(v, list):
            return [normal(x) for x in v]
        if isinstance(v, dict):
            return {k: normal(x) for k, x in v.items()}
        return v
    return json.dumps(normal(value), sort_keys=True)


def _literal_values(schema):
    if isinstance(schema, dict) and ("const" in schema or "enum" in schema):
        values = [schema["const"]] if "const" in schema else schema["enum"]
        return {_canonical(v) for v in values} if isinstance(values, list) else None
    return None


def _never_valid(emitting, other) -> bool:
    """True when no document this module generates for `emitting` validates against `other` (a sound,
    incomplete test: it only looks at kinds of value, const/enum values and object properties)."""
    if not _kinds(emitting) & _kinds(other):
        return True
    values, other_values = _literal_values(emitting), _literal_values(other)
    if values is not None and other_values is not None and not values & other_values:
        return True
    if _kinds(emitting) != {"object"} or not isinstance(other, dict) or "properties" not in emitting:
        return False
    declared = set(emitting["properties"]) | set(emitting.get("required", []))
    if any(name not in declared for name in other.get("required", [])):
        return True
    other_properties = other.get("properties", {})
    for name in emitting.get("required", []):
        if name not in other_properties and other.get("additionalProperties", True) is False:
            return True
        mine, theirs = _literal_values(emitting["properties"].get(name)), _literal_values(other_properties.get(name))
        if mine is not None and theirs is not None and not mine & theirs:
            return True
    return False


def exclusive(a, b) -> bool:
    """True when no document generated for one branch validates against the other, both ways."""
    return _never_valid(a, b) and _never_valid(b, a)
