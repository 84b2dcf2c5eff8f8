"""JSON Schema -> a regex whose every match is a JSON document that validates against the schema.

The regex describes documents the way a model writes them: json.dumps' separators (`", "`, `": "`, or
`","`/`":"` with whitespace="compact"), or with whitespace="flexible" up to 16 whitespace characters
around every brace, bracket, comma and colon (bounded so a model cannot stall on whitespace forever).

What is generated, where JSON Schema leaves a choice:
- objects list their properties in schema order: every required one, any subset of the optional ones.
  Without additionalProperties (or with true) only declared properties are written: still valid, and
  the model cannot invent keys. An object schema without "properties" is a free-form object (any keys;
  values as `additionalProperties` says, or any JSON value nested at most `any_depth` deep);
- `{}`/true and schemas with no type keyword accept any JSON value up to `any_depth` levels of nesting;
- $ref is expanded in place ("#", "#/$defs/..", "#/definitions/.."); a reference met more than
  `max_ref_depth` times on one path matches nothing there, which bounds recursive schemas;
- oneOf is accepted only when its branches provably exclude each other (different types, different
  const/enum values of a required property, a required property the other branch lacks or forbids);
- format (an annotation for validators) narrows date, time, date-time and uuid strings, others are free;
- enum/const values are written as json.dumps writes them.
Numbers with integer bounds are decimals without exponent (json_values.number). Any other validation
keyword (not, if/then/else, patternProperties, multipleOf, uniqueItems, ...) raises SchemaError naming it, rather than giving a regex that could be wrong.
"""

from __future__ import annotations

import json

from tokworker.constrain import json_values as jv
from tokworker.constrain.one_of import exclusive, is_type
from tokworker.constrain.regex_dfa import MAX_PATTERN_CHARS
from tokworker.constrain.regex_syntax import RegexError, parse_search, to_regex

ANNOTATIONS = {"title", "description", "default", "examples", "$schema", "$comment", "deprecated", "readOnly",
               "writeOnly", "contentMediaType", "contentEncoding", "discriminator", "nullable", "$defs",
               "definitions"}
KEYWORDS_BY_TYPE = {
    "object": {"properties", "required", "additionalProperties", "minProperties", "maxProperties"},
    "array": {"items", "prefixItems", "minItems", "maxItems", "uniqueItems"},
    "string": {"minLength", "maxLength", "pattern", "format"},
    "integer": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"},
    "number": set(), "boolean": set(), "null": set(),
}
TYPES = tuple(KEYWORDS_BY_TYPE)
COMBINATORS = {"anyOf", "oneOf", "allOf", "$ref", "enum", "const", "type"}
NOTHING = "(?!)"
FLEXIBLE_WHITESPACE = r"[ \t\n\r]{0,16}"


class SchemaError(ValueError):
    """The schema uses a keyword this converter does not support, or is malformed."""


def json_schema_to_regex(schema, whitespace: str = "json", max_ref_depth: int = 3, any_depth: int = 2) -> str:
    """A regex (Python `re` syntax, also read by TokenAutomaton) matching JSON documents valid for `schema`."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as error:
            raise SchemaError(f"schema is not JSON: {error}") from None
    return _Converter(schema, whitespace, max_ref_depth, any_depth).convert(schema)


def _group(regex: str) -> str:
    return f"(?:{regex})"


def _alternation(options: list[str]) -> str:
    options = [o for o in dict.fromkeys(options) if o != NOTHING]
    if not options:
        return NOTHING
    return options[0] if len(options) == 1 else _group("|".join(options))


class _Converter:
    def __init__(self, root, whitespace, max_ref_depth, any_depth):
        if whitespace == "json":
            self.comma, self.colon, self.open, self.close = ", ", ": ", "", ""
        elif whitespace == "compact":
            self.comma, self.colon, self.open, self.close = ",", ":", "", ""
        elif whitespace == "flexible":
            w = FLEXIBLE_WHITESPACE
            self.comma, self.colon, self.open, self.close = f"{w},{w}", f"{w}:{w}", w, w
        else:
            raise SchemaError(f"whitespace must be 'json', 'compact' or 'flexible', not {whitespace!r}")
        if whitespace != "flexible":
            self.comma, self.colon = jv.regex_escape(self.comma), jv.regex_escape(self.colon)
        self.root, self.max_ref_depth, self.any_depth = root, max_ref_depth, any_depth
        self.ref_counts: dict[str, int] = {}

    def convert(self, schema) -> str:
        if isinstance(schema, dict) and "$id" in schema:
            schema = {k: v for k, v in schema.items() if k != "$id"}
        return self.schema(schema)

    # -- dispatch ---------------------------------------------------------------------------------

    def schema(self, schema) -> str:
        """The regex of `schema`, refused once it grows past what regex_dfa compiles: nested anyOf and $ref
        fan-out double it level by level, so the refusal comes after a few hundred KB of work."""
        regex = self._schema(schema)
        if len(regex) > MAX_PATTERN_CHARS:
            raise SchemaError(f"the schema's regex grows past {MAX_PATTERN_CHARS:,} characters (nested anyOf, $ref "
                              "fan-out or many optional properties): simplify the schema")
        return regex

    def _schema(self, schema) -> str:
        if schema is True:
            return self.any_value(self.any_depth)
        if schema is False:
            return NOTHING
        if not isinstance(schema, dict):
            raise SchemaError(f"a schema must be an object or a boolean, not {schema!r}")
        keys = {k for k in schema if k not in ANNOTATIONS and not k.startswith("x-")}
        known = COMBINATORS.union(*KEYWORDS_BY_TYPE.values())
        unknown = sorted(keys - known)
        if unknown:
            raise SchemaError(f"unsupported JSON Schema keyword(s): {', '.join(unknown)}")
        for combinator in ("$ref", "allOf", "anyOf", "oneOf"):
            if combinator in keys:
                others = sorted(keys - {combinator})
                if others:
                    raise SchemaError(f"{combinator} next to {', '.join(others)} is not supported")
                return getattr(self, "combinator_" + combinator.strip("$"))(schema[combinator])
        if "enum" in keys or "const" in keys:
            return self.literals(schema, keys)
        types = schema.get("type")
        if types is None:
            types = [t for t in TYPES if keys & KEYWORDS_BY_TYPE[t]]
            if not types:
                return self.any_value(self.any_depth)
        types = [types] if isinstance(types, str) else types
        if not isinstance(types, list) or any(t not in TYPES for t in types):
            raise SchemaError(f"bad type {schema.get('type')!r}")
        return _alternation([getattr(self, "type_" + t)(schema) for t in dict.fromkeys(types)])

    def combinator_ref(self, ref: str) -> str:
        target = self.resolve(ref)
        count = self.ref_counts.get(ref, 0)
        if count >= self.max_ref_depth:
            return NOTHING
        self.ref_counts[ref] = count + 1
        try:
            return self.schema(target)
        finally:
            self.ref_counts[ref] = count

    def combinator_allOf(self, schemas) -> str:
        if not isinstance(schemas, list) or len(schemas) != 1:
            raise SchemaError("allOf is only supported with exactly one schema")
        return self.schema(schemas[0])

    def combinator_anyOf(self, schemas) -> str:
        if not isinstance(schemas, list) or not schemas:
            raise SchemaError("anyOf needs a non-empty list of schemas")
        return _alternation([self.schema(s) for s in schemas])

    def combinator_oneOf(self, schemas) -> str:
        if not isinstance(schemas, list) or not schemas:
            raise SchemaError("oneOf needs a non-empty list of schemas")
        resolved = [self.deref(s) for s in schemas]
        for i, a in enumerate(resolved):
            for j in range(i + 1, len(resolved)):
                if not exclusive(a, resolved[j]):
                    raise SchemaError(f"oneOf branches {i} and {j} may both match one document: "
                                      "use anyOf, or tell them apart by type or a const property")
        return _alternation([self.schema(s) for s in schemas])

    def resolve(self, ref):
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise SchemaError(f"only local $ref ('#...') is supported, not {ref!r}")
        node = self.root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise SchemaError(f"$ref {ref!r} points nowhere")
        return node

    def deref(self, schema, seen=()):
        while isinstance(schema, dict) and "$ref" in schema and schema["$ref"] not in seen:
            seen = (*seen, schema["$ref"])
            schema = self.resolve(schema["$ref"])
        return schema

    # -- values -----------------------------------------------------------------------------------

    def literals(self, schema, keys) -> str:
        extra = sorted(keys - {"enum", "const", "type"})
        if extra:
            raise SchemaError(f"enum/const next to {', '.join(extra)} is not supported")
        values = [schema["const"]] if "const" in schema else schema["enum"]
        if not isinstance(values, list):
            raise SchemaError("enum must be a list")
        types = schema.get("type")
        if types is not None:
            types = [types] if isinstance(types, str) else types
            values = [v for v in values if any(is_type(v, t) for t in types)]
        return _alternation([jv.json_literal(v) for v in values])

    def any_value(self, depth: int) -> str:
        scalars = [jv.string(), jv.NUMBER, jv.BOOLEAN, jv.NULL]
        if depth <= 0:
            return _alternation(scalars)
        inner = self.any_value(depth - 1)
        array = self.sequence(r"\[", inner, r"\]", 0, None)
        members = self.sequence(r"\{", jv.string() + self.colon + inner, r"\}", 0, None)
        return _alternation(scalars + [array, members])

    def sequence(self, open_: str, item: str, close: str, min_count: int, max_count: int | None) -> str:
        """open item, item, ... close with between min_count and max_count items."""
        body = ""
        if max_count is None or max_count > 0:
            low, high = max(min_count - 1, 0), None if max_count is None else max_count - 1
            body = item
            if high is None or high > 0:
                quantifier = "*" if (low, high) == (0, None) else f"{{{low},{'' if high is None else high}}}"
                body += f"(?:{self.comma}{item}){quantifier}"
            if min_count == 0:
                body = f"(?:{body})?"
        return f"{open_}{self.open}{body}{self.close}{close}"

    def type_null(self, schema) -> str:
        return jv.NULL

    def type_boolean(self, schema) -> str:
        return jv.BOOLEAN

    def type_number(self, schema) -> str:
        """Without bounds any JSON number; with integer bounds, decimals without exponent (json_values)."""
        if not KEYWORDS_BY_TYPE["integer"] & set(schema):
            return jv.NUMBER
        bounds = {}
        for key in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
            if key in schema:
                value = schema[key]
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
                    raise SchemaError(f"{key} on numbers is only supported as an integer, not {value!r}")
                bounds[key] = int(value)
        low, low_open = _tighter(bounds.get("minimum"), bounds.get("exclusiveMinimum"), max)
        high, high_open = _tighter(bounds.get("maximum"), bounds.get("exclusiveMaximum"), min)
        regex = jv.number(low, high, low_open, high_open)
        return NOTHING if regex is None else _group(regex)

    def type_integer(self, schema) -> str:
        lo, hi = None, None
        for key, is_lower, exclusive in (("minimum", True, False), ("exclusiveMinimum", True, True),
                                         ("maximum", False, False), ("exclusiveMaximum", False, True)):
            if key not in schema:
                continue
            value = schema[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise SchemaError(f"{key} must be a number (draft-4 boolean form not supported)")
            if is_lower:
                bound = int(value) + 1 if exclusive and value == int(value) else -int(-value // 1)
                lo = bound if lo is None else max(lo, bound)
            else:
                bound = int(value) - 1 if exclusive and value == int(value) else int(value // 1)
                hi = bound if hi is None else min(hi, bound)
        regex = jv.integer(lo, hi)
        return NOTHING if regex is None else _group(regex)

    def type_string(self, schema) -> str:
        min_length, max_length = schema.get("minLength", 0), schema.get("maxLength")
        if "pattern" in schema:
            if "minLength" in schema or "maxLength" in schema:
                raise SchemaError("pattern together with minLength/maxLength is not supported")
            try:
                node = jv.json_encode_node(parse_search(schema["pattern"]))
            except RegexError as error:
                raise SchemaError(f"pattern: {error}") from None
            return f'"{_group(to_regex(node))}"'
        if max_length is not None and max_length < min_length:
            return NOTHING
        fmt = jv.FORMATS.get(schema.get("format"))
        if fmt and "minLength" not in schema and "maxLength" not in schema:
            return f'"{_group(fmt)}"'
        return jv.string(min_length, max_length)

    def type_array(self, schema) -> str:
        min_items, max_items = schema.get("minItems", 0), schema.get("maxItems")
        if max_items is not None and max_items < min_items:
            return NOTHING
        if schema.get("uniqueItems") and (max_items is None or max_items > 1):
            raise SchemaError("uniqueItems is not supported (unless maxItems <= 1)")
        items = schema.get("items", True)
        if isinstance(items, list):
            raise SchemaError("items as a list (draft-4 tuples) is not supported: use prefixItems")
        if "prefixItems" in schema:
            prefix = schema["prefixItems"]
            if not min_items <= len(prefix) <= (len(prefix) if max_items is None else max_items):
                raise SchemaError("prefixItems with minItems/maxItems other than its length is not supported")
            if not prefix:
                return self.sequence(r"\[", "", r"\]", 0, 0)
            body = self.comma.join(self.schema(s) for s in prefix)
            return rf"\[{self.open}{body}{self.close}\]"
        item = self.schema(items)
        if item == NOTHING:
            return NOTHING if min_items > 0 else self.sequence(r"\[", item, r"\]", 0, 0)
        return self.sequence(r"\[", item, r"\]", min_items, max_items)

    def type_object(self, schema) -> str:
        additional = schema.get("additionalProperties", True)
        if "properties" not in schema and not schema.get("required"):
            value = self.schema(additional) if additional is not True else self.any_value(self.any_depth - 1)
            count = (schema.get("minProperties", 0), schema.get("maxProperties"))
            if value == NOTHING:
                return NOTHING if count[0] > 0 else self.sequence(r"\{", "", r"\}", 0, 0)
            return self.sequence(r"\{", jv.string() + self.colon + value, r"\}", *count)
        properties, required = schema.get("properties", {}), schema.get("required", [])
        if not isinstance(properties, dict) or not isinstance(required, list):
            raise SchemaError("properties must be an object and required a list")
        properties = dict(properties)
        for name in required:
            if name not in properties:
                if additional is False:
                    return NOTHING
                properties[name] = additional
        if schema.get("minProperties", 0) > len(required) or schema.get("maxProperties", len(properties)) < len(properties):
            raise SchemaError("minProperties/maxProperties that the declared properties do not settle are not supported")
        members = [(jv.json_literal(name) + self.colon + self.schema(value), name in required)
                   for name, value in properties.items()]
        body = ordered_members(members, self.comma)
        return NOTHING if body == NOTHING else rf"\{{{self.open}{body}{self.close}\}}"


def ordered_members(members: list[tuple[str, bool]], separator: str) -> str:
    """Regex for the members in the given order, each (regex, required): every required one and any
    subset of the optional ones, `separator` between two members. Built from the end, keeping for each
    position the rest with and without a member already written, so the text grows quadratically in the
    number of optional members, not exponentially."""
    if any(required and regex.endswith(NOTHING) for regex, required in members):
        return NOTHING
    rest_after, rest_first = "", ""  # what may follow position i: after a member / as the first member
    for regex, required in reversed(members):
        if required:
            rest_after, rest_first = separator + regex + rest_after, regex + rest_after
        elif not regex.endswith(NOTHING):
            rest_first = (_alternation([regex + rest_after, rest_first]) if rest_first
                          else f"(?:{regex}{rest_after})?")
            rest_after = f"(?:{separator}{regex})?{rest_after}"
    return rest_first


def _tighter(inclusive, strict, pick):
    """(bound, is_open) of an inclusive and a strict bound, the tighter one winning."""
    if strict is None:
        return inclusive, False
    if inclusive is None or pick(inclusive, strict) == strict:
        return strict, True
    return inclusive, False
