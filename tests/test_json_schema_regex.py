"""json_schema_to_regex against jsonschema (the oracle) and Python's `re` (a second reading of the regex).

Strings are sampled from the regex two independent ways (our DFA sampler and hypothesis' from_regex);
every one must decode as JSON and validate. Schema-violating documents (mutations of valid ones) must not
match. Unsupported keywords must raise, naming the keyword.
Covers tokworker.constrain.one_of.
"""

from __future__ import annotations

import copy
import json
import random
import re

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.work import lines_run
from tokworker.constrain import json_values as jv
from tokworker.constrain.json_schema import SchemaError, json_schema_to_regex
from tokworker.constrain.regex_dfa import Dfa

WEATHER = {"type": "object", "properties": {
    "location": {"type": "string", "description": "City and country, e.g. Paris, France"},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 14}}, "required": ["location"]}

#: lines of Python a hostile schema or pattern may run before its refusal: each takes 0.1-6 million now (about
#: 0.5 s of CPU); the old converter ran on for minutes (hundreds of millions) before refusing a 69M-character regex
MAX_REFUSAL_LINES = 25_000_000

SCHEMAS = {
    "weather": WEATHER,
    "nested": {
        "type": "object", "additionalProperties": False, "required": ["user", "tags"],
        "properties": {
            "user": {"$ref": "#/$defs/user"},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "minItems": 1, "maxItems": 3},
            "mode": {"oneOf": [{"type": "null"}, {"type": "boolean"}]},
            "score": {"type": "number"}},
        "$defs": {"user": {"type": "object", "required": ["name", "friend"], "properties": {
            "name": {"type": "string", "pattern": "^[A-Z][a-z]+$"},
            "id": {"type": "string", "format": "uuid"},
            "friend": {"anyOf": [{"$ref": "#/$defs/user"}, {"type": "null"}]}}}}},
    "search": {"type": "object", "required": ["query"], "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": 40},
        "since": {"type": "string", "format": "date"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
        "sort": {"enum": ["relevance", "date", None, 3]},
        "exact": {"type": "boolean"}, "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "offset": {"type": "number", "exclusiveMaximum": 0, "minimum": -100}}},
    "pydantic": {"title": "Order", "type": "object", "required": ["item", "quantity"], "properties": {
        "item": {"allOf": [{"$ref": "#/definitions/Item"}], "description": "what"},
        "quantity": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 1000},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Note"}},
        "definitions": {"Item": {"type": "object", "title": "Item", "required": ["sku"], "properties": {
            "sku": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"},
            "price": {"type": ["number", "null"]}}}}},
    "shapes": {"oneOf": [
        {"type": "object", "required": ["kind", "radius"], "properties": {
            "kind": {"const": "circle"}, "radius": {"type": "number", "exclusiveMinimum": 0}}},
        {"type": "object", "required": ["kind", "side"], "properties": {
            "kind": {"const": "square"}, "side": {"type": "integer", "minimum": -5, "maximum": 5}}}]},
    "tree": {"type": "object", "required": ["value"], "properties": {
        "value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#"}, "maxItems": 2}}},
    "map": {"type": "object", "additionalProperties": {"type": "integer", "minimum": -20}, "maxProperties": 3},
    "scalars": {"type": "object", "required": ["a", "b", "c", "d", "e"], "properties": {
        "a": {"type": ["string", "null"]}, "b": {"const": {"x": [1, "é"]}}, "c": {"enum": ["日本", "😀", "a\"b\\c"]},
        "d": {"type": "string", "pattern": "a\"b|^x\\\\"}, "e": {"type": "string", "minLength": 2, "maxLength": 3}}},
    "tuple": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string", "format": "date-time"}],
              "items": False},
    "no_arguments": {"type": "object", "properties": {}},
    "anything": {},
    "free_object": {"type": "object"},
}


def _samples(regex: str, count: int, seed: int = 0) -> list[str]:
    dfa, rng = Dfa(regex), random.Random(seed)
    return [dfa.sample(rng, max_bytes=160).decode("utf-8") for _ in range(count)]


@pytest.mark.parametrize("whitespace", ["json", "compact", "flexible"])
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_sampled_strings_are_valid_documents(name, whitespace):
    schema = SCHEMAS[name]
    regex = json_schema_to_regex(schema, whitespace=whitespace)
    python = re.compile(regex)
    validator = jsonschema.Draft202012Validator(schema)
    for text in _samples(regex, 60 if whitespace == "json" else 25):
        assert python.fullmatch(text), text
        document = json.loads(text)
        errors = list(validator.iter_errors(document))
        assert not errors, (text, errors[0].message)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), name=st.sampled_from(["weather", "search", "shapes", "pydantic", "tuple", "nested"]))
def test_hypothesis_from_regex_samples_validate(data, name):
    """hypothesis reads the regex with Python's own parser and samples it independently of our DFA."""
    schema = SCHEMAS[name]
    text = data.draw(st.from_regex(json_schema_to_regex(schema), fullmatch=True))
    jsonschema.validate(json.loads(text), schema)


def _mutations(document, rng):
    """Documents near `document`: a member removed or added, a value of another type, arrays longer or
    shorter, strings longer or emptier, numbers moved."""
    others = [None, True, 1, -7, 2.5, "x", "", [], {}, [1], {"k": 1}, "celsius", 10**25]
    paths = []

    def visit(node, path):
        paths.append(path)
        if isinstance(node, dict):
            for key, value in node.items():
                visit(value, path + [key])
        elif isinstance(node, list):
            for i, value in enumerate(node):
                visit(value, path + [i])
    visit(document, [])
    for path in paths:
        parent = document
        for step in path:
            parent = parent[step]
        candidates = [rng.choice(others)]
        if isinstance(parent, dict):
            candidates += [{k: v for k, v in parent.items() if k != key} for key in parent]
            candidates.append({**parent, "extra": 1})
        if isinstance(parent, list):
            candidates += [parent[1:], parent + parent[:1], parent * 3, []]
        if isinstance(parent, str):
            candidates += [parent + "y" * 41, "", parent[:1]]
        if isinstance(parent, (int, float)) and not isinstance(parent, bool):
            candidates += [parent + 1, parent - 1, -parent, parent * 1000, parent + 0.5]
        for candidate in candidates:
            if not path:
                yield candidate
                continue
            mutated = copy.deepcopy(document)
            target = mutated
            for step in path[:-1]:
                target = target[step]
            target[path[-1]] = candidate
            yield mutated


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_schema_violations_do_not_match(name):
    schema = SCHEMAS[name]
    regex = re.compile(json_schema_to_regex(schema))
    validator = jsonschema.Draft202012Validator(schema)
    rng = random.Random(1)
    rejected = 0
    for text in _samples(regex.pattern, 30, seed=2):
        for mutated in _mutations(json.loads(text), rng):
            dumped = json.dumps(mutated, ensure_ascii=False)
            if not validator.is_valid(mutated):
                assert not regex.fullmatch(dumped), (name, dumped)
                rejected += 1
    assert rejected > 10 or name in ("anything", "free_object", "no_arguments")


TYPICAL = {
    "weather": ['{"location": "Paris, France"}', '{"location": "東京", "unit": "celsius", "days": 14}',
                '{"location": "NYC", "days": 3}'],
    "shapes": ['{"kind": "circle", "radius": 2.5}', '{"kind": "circle", "radius": 0.001}', '{"kind": "square", "side": -5}'],
    "pydantic": ['{"item": {"sku": "AB-123", "price": null}, "quantity": 999, "note": null}'],
    "map": ['{}', '{"a": 1, "b": -20}'],
    "no_arguments": ['{}'],
    "tuple": ['[3, "2024-05-01T10:00:00Z"]'],
}
INVALID = {
    "weather": ['{"unit": "celsius"}', '{"location": 5}', '{"location": "x", "unit": "kelvin"}',
                '{"location": "x", "days": 0}', '{"location": "x", "days": 15}'],
    "shapes": ['{"kind": "circle", "radius": 0}', '{"kind": "circle", "radius": -0.5}', '{"kind": "circle", "side": 1}', '{"kind": "square", "side": 6}', '{"kind": "circle"}'],
    "map": ['{"a": 1, "b": 2, "c": 3, "d": 4}', '{"a": -21}', '{"a": "1"}'],
    "tuple": ['["3", "2024-05-01T10:00:00Z"]', '[3, "2024-05-01T10:00:00Z", 4]'],
}


@pytest.mark.parametrize("name", sorted(TYPICAL))
def test_documents_as_models_write_them_match(name):
    regex = re.compile(json_schema_to_regex(SCHEMAS[name]))
    for text in TYPICAL[name]:
        jsonschema.validate(json.loads(text), SCHEMAS[name])
        assert regex.fullmatch(text), text
    for text in INVALID.get(name, []):
        assert not jsonschema.Draft202012Validator(SCHEMAS[name]).is_valid(json.loads(text))
        assert not regex.fullmatch(text), text


def test_undeclared_properties_are_not_generated():
    """Valid without additionalProperties: false, but the model is kept to the declared keys."""
    for name, text in (("weather", '{"location": "x", "extra": 1}'), ("no_arguments", '{"a": 1}')):
        jsonschema.validate(json.loads(text), SCHEMAS[name])
        assert not re.fullmatch(json_schema_to_regex(SCHEMAS[name]), text)


def test_whitespace_modes():
    document = {"location": "Paris", "unit": "celsius", "days": 2}
    json_mode = re.compile(json_schema_to_regex(WEATHER))
    compact = re.compile(json_schema_to_regex(WEATHER, whitespace="compact"))
    flexible = re.compile(json_schema_to_regex(WEATHER, whitespace="flexible"))
    assert json_mode.fullmatch(json.dumps(document)) and not json_mode.fullmatch(json.dumps(document, indent=2))
    assert compact.fullmatch(json.dumps(document, separators=(",", ":")))
    for text in (json.dumps(document), json.dumps(document, indent=2), json.dumps(document, separators=(",", ":")),
                 '{ "location" : "Paris" }'):
        assert flexible.fullmatch(text), text
    assert not flexible.fullmatch('{"location": "Paris"' + " " * 40 + "}")
    with pytest.raises(SchemaError, match="whitespace"):
        json_schema_to_regex(WEATHER, whitespace="pretty")


def test_recursion_is_bounded_by_max_ref_depth():
    regex = json_schema_to_regex(SCHEMAS["tree"], max_ref_depth=2)
    deep = {"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}]}
    deeper = {"value": 1, "children": [{"value": 2, "children": [{"value": 3, "children": [{"value": 4}]}]}]}
    assert re.fullmatch(regex, json.dumps(deep))
    assert not re.fullmatch(regex, json.dumps(deeper))
    assert re.fullmatch(json_schema_to_regex(SCHEMAS["tree"], max_ref_depth=3), json.dumps(deeper))


@settings(max_examples=60, deadline=None)
@given(st.integers(-10**7, 10**7), st.integers(0, 10**7), st.lists(st.integers(-10**8, 10**8), max_size=30))
def test_integer_ranges_are_exact(lo, width, probes):
    hi = lo + width
    regex = re.compile(jv.integer(lo, hi))
    for n in probes + [lo - 1, lo, hi, hi + 1, 0, (lo + hi) // 2]:
        assert bool(regex.fullmatch(str(n))) == (lo <= n <= hi), (lo, hi, n)
    assert not regex.fullmatch("0" + str(abs(lo) or 1))


@pytest.mark.parametrize("schema, keyword", [
    ({"type": "string", "not": {"const": "a"}}, "not"),
    ({"type": "object", "patternProperties": {"^a": {}}}, "patternProperties"),
    ({"type": "integer", "multipleOf": 3}, "multipleOf"),
    ({"type": "number", "minimum": 0.5}, "minimum"),
    ({"type": "array", "uniqueItems": True}, "uniqueItems"),
    ({"if": {"type": "string"}, "then": {"minLength": 2}}, "if"),
    ({"type": "object", "properties": {"a": {"type": "string", "maxLenght": 3}}}, "maxLenght"),
    ({"$ref": "https://example.com/schema.json"}, "local"),
    ({"type": "string", "pattern": "(?<=a)b"}, "pattern"),
    ({"type": "string", "pattern": "\\bword"}, "pattern"),
    ({"anyOf": [{"type": "string"}], "type": "string"}, "anyOf"),
    ({"type": "strnig"}, "type"),
])
def test_unsupported_keywords_raise_naming_them(schema, keyword):
    with pytest.raises(SchemaError, match=re.escape(keyword)):
        json_schema_to_regex(schema)


def test_one_of_needs_exclusive_branches():
    with pytest.raises(SchemaError, match="oneOf"):
        json_schema_to_regex({"oneOf": [{"type": "number"}, {"type": "integer"}]})
    with pytest.raises(SchemaError, match="oneOf"):
        json_schema_to_regex({"oneOf": [{"type": "object", "properties": {"a": {"type": "string"}}},
                                        {"type": "object", "properties": {"b": {"type": "string"}}}]})
    assert json_schema_to_regex({"oneOf": [{"type": "string"}, {"type": "integer"}]})
    assert json_schema_to_regex({"oneOf": [{"enum": ["a", "b"]}, {"enum": ["c"]}]})


def test_pattern_is_searched_in_the_decoded_string():
    schema = {"type": "string", "pattern": "b\"c|^\\\\n"}
    regex = json_schema_to_regex(schema)
    for text in _samples(regex, 50):
        value = json.loads(text)
        assert re.search(schema["pattern"], value), value
    assert re.fullmatch(regex, json.dumps("xxb\"cyy")) and not re.fullmatch(regex, json.dumps("xb c"))


def _ref_fan_out(levels: int) -> dict:
    defs = {f"d{i}": {"type": "object", "properties": {"x": {"$ref": f"#/$defs/d{i + 1}"},
                                                       "y": {"$ref": f"#/$defs/d{i + 1}"}}, "required": ["x", "y"]}
            for i in range(levels)}
    return {"$defs": {**defs, f"d{levels}": {"type": "integer"}}, "$ref": "#/$defs/d0"}


def _nested_any_of(depth: int) -> dict:
    defs = {f"d{i}": {"anyOf": [{"type": "object", "properties": {"k": {"$ref": f"#/$defs/d{i + 1}"},
                                                                  "v": {"type": "string", "maxLength": 8}}},
                                {"type": "array", "items": {"$ref": f"#/$defs/d{i + 1}"}}]} for i in range(depth)}
    return {"$defs": {**defs, f"d{depth}": {"type": "string"}}, "$ref": "#/$defs/d0"}


def _optional_properties(width: int, depth: int) -> dict:
    defs = {f"d{i}": {"type": "object", "properties": {f"p{j}": {"$ref": f"#/$defs/d{i + 1}"} for j in range(width)}}
            for i in range(depth)}
    return {"$defs": {**defs, f"d{depth}": {"type": "integer"}}, "$ref": "#/$defs/d0"}


@pytest.mark.parametrize("name, schema", [("$ref fan-out", _ref_fan_out(14)), ("nested anyOf", _nested_any_of(6)),
                                          ("optional properties", _optional_properties(8, 4)),
                                          ("nested anyOf, DFA", _nested_any_of(5))])
def test_small_hostile_schemas_are_priced(name, schema):
    """A few hundred bytes of schema each used a worker's whole 10 s compile budget (one took 140 s to refuse
    a 69M-character regex). The regex's length, the NFA's size and the DFA's construction are priced, so
    each is refused with a typed error naming the problem within a few million lines of Python (about a
    second of CPU; counted, not timed, so a loaded machine cannot fail it)."""
    from tokworker.constrain.regex_syntax import RegexError

    def refuse():
        with pytest.raises((SchemaError, RegexError), match="over the limit|grows past|too complex"):
            Dfa(json_schema_to_regex(schema))
    assert lines_run(refuse, limit=MAX_REFUSAL_LINES) <= MAX_REFUSAL_LINES, f"{name} ran past the limit"
    assert len(json.dumps(schema)) < 3000


@pytest.mark.parametrize("pattern", ["[ab]*a[ab]{16}", "(?:[a-z]{0,8}x){0,40}"])
def test_patterns_whose_dfa_explodes_are_priced(pattern):
    """A DFA whose states blow up is refused by the construction's own step count, within a bounded work."""
    from tokworker.constrain.regex_syntax import RegexError

    def refuse():
        with pytest.raises(RegexError, match="too complex"):
            Dfa(pattern)
    assert lines_run(refuse, limit=MAX_REFUSAL_LINES) <= MAX_REFUSAL_LINES
