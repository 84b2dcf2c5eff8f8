"""Formats whose calls are Python function calls with literal keyword arguments (pythonic.py): pythonic
and llama4_pythonic (a list at the output's start), lfm2 (between its markers, anywhere), olmo3 (a call per
line in function_calls tags). Arguments are converted to JSON one at a time (literals.py reads Python
literals and JSON spellings without eval); whole and streamed results agree however the text is split.
Covers tokworker.parsers.tools.core.pythonic.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tests.tool_formats import (SETTINGS, WS, Format, assert_split_invariant, cuts, dumps, json_scalars,
                                json_shape_tests, json_values, names, nasty_text)


# ---- renderers ----

def _calls(calls, sep=", ", literal=repr):
    return sep.join("%s(%s)" % (n, ", ".join("%s=%s" % (k, literal(v)) for k, v in a.items())) for n, a in calls)


def pythonic(calls, before="", after="", literal=repr):
    # vLLM's pythonic format (Llama 3.2/4 pythonic templates): '[' NAME '(' K '=' VALUE, ... ')' ', ' ... ']'
    return "[" + _calls(calls, literal=literal) + "]" + after


def llama4_pythonic(calls, before="", after=""):
    # Llama 4's pythonic template (vLLM's tests): '<|python_start|>[' + calls + ']<|python_end|>' at the start
    return "<|python_start|>[" + _calls(calls) + "]<|python_end|>" + after


def lfm2(calls, before="", after=""):
    # LFM2's template (vLLM's tests): content + '<|tool_call_start|>[' + calls + ']<|tool_call_end|>' + content
    return before + "<|tool_call_start|>[" + _calls(calls) + "]<|tool_call_end|>" + after


def olmo3(calls, before="", after=""):
    # OLMo 3's template: '<function_calls>' + one call per line + '</function_calls>'
    return before + "<function_calls>" + _calls(calls, "\n") + "</function_calls>" + after


FORMATS = [
    Format("pythonic", pythonic, before=False,
           fits=lambda before, after: not after.lstrip(WS).startswith((",", "]", "<|python_end|>"))),
    Format("llama4_pythonic", llama4_pythonic, ("<|python_end|>",), before=False),
    Format("lfm2", lfm2, ("<|tool_call_start|>", "<|tool_call_end|>")),
    Format("olmo3", olmo3, ("<function_calls>",)),
]
python_calls = st.lists(st.tuples(names, st.dictionaries(names, json_values, max_size=3)), min_size=1, max_size=3)


# an argument is sent whole, once complete: a cut-off call's arguments are not a prefix of the full ones
test_calls_round_trip_with_the_text_around_them, test_every_split_and_every_prefix = json_shape_tests(
    FORMATS, python_calls, st.lists(st.tuples(names, st.dictionaries(names, json_scalars, max_size=2)), min_size=1,
                                    max_size=2), arguments_grow=False)


@SETTINGS
@given(calls=python_calls, after=nasty_text, chunking=cuts)
def test_json_spellings_of_the_values_round_trip(calls, after, chunking):
    """Some models write the values as JSON (true, null, "..." with JSON's escapes)."""
    calls = [(n, {k: v for k, v in a.items() if not _has_float(v)}) for n, a in calls]
    assume(not after.lstrip(WS).startswith((",", "]", "<|python_end|>")))
    result = assert_split_invariant("pythonic", pythonic(calls, after=after, literal=dumps), cuts=chunking)
    assert result["calls"] == [(name, dumps(args)) for name, args in calls]


def _has_float(value):
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_has_float(v) for v in value.values())
    return isinstance(value, list) and any(_has_float(v) for v in value)


CASES = [
    # (format, text, calls, content)
    ("pythonic", "Sure: [f(a=1)]", [], "Sure: [f(a=1)]"),  # calls only open the output
    ("pythonic", "[f(a=1 + 2)] tail", [("f", "{}")], "a=1 + 2)] tail"),  # not a literal: call ends, text kept
    ("pythonic", "[f(a=1), g(b=2)] done", [("f", '{"a": 1}'), ("g", '{"b": 2}')], "done"),
    ("pythonic", "[f(a={1, 2})]", [("f", "{}")], "a={1, 2})]"),  # a set has no JSON form
    ("pythonic", "[f(a=float('nan'))]", [("f", "{}")], "a=float('nan'))]"),
    ("pythonic", "[f(s='''a\"b''', t=r'\\d', u=(1,), v=null)]",
     [("f", '{"s": "a\\"b", "t": "\\\\d", "u": [1], "v": null}')], None),
    ("pythonic", "[f(a={'k': true, 'n': None})]", [("f", '{"a": {"k": true, "n": null}}')], None),  # mixed spellings
    ("pythonic", "[]", [], "[]"),
    ("pythonic", "[f(a=1, b=\"cut off", [("f", '{"a": 1}')], 'b="cut off'),  # a value never sent is content
    # a think block written first: the calls open the answer after it
    ("pythonic", "<think>The weather tool.</think>\n[get_weather(location='Oslo')]", [("get_weather", '{"location": "Oslo"}')],
     "<think>The weather tool.</think>"),
    # lfm2: calls with content on both sides; the echo LFM2 sometimes writes after the call ends with a second
    # <|tool_call_end|>, dropped (vLLM drops the echoed call text too; we cannot tell it from prose, so it stays)
    ("lfm2", 'Let me check.<|tool_call_start|>[get_weather(location="Paris"), get_weather(location="Rome", days=2)]'
             "<|tool_call_end|>Both are sunny.",
     [("get_weather", '{"location": "Paris"}'), ("get_weather", '{"location": "Rome", "days": 2}')],
     "Let me check.Both are sunny."),
    ("lfm2", '<|tool_call_start|>[get_weather(location="Paris")]<|tool_call_end|>[get_weather(location="Paris")]'
             "<|tool_call_end|>", [("get_weather", '{"location": "Paris"}')], '[get_weather(location="Paris")]'),
    ("lfm2", "<|tool_call_start|>[get_weather(location='Par", [("get_weather", "{}")], "location='Par"),  # cut off
    # olmo3: a call per line, JSON spellings of values (vLLM's tests); text around the tags, which vLLM drops, is kept
    ("olmo3", '<function_calls>get_weather(location="San Francisco, CA", unit=null, verbose=true)\n'
              'get_weather(location="NYC", days=[1, 2])</function_calls>',
     [("get_weather", '{"location": "San Francisco, CA", "unit": null, "verbose": true}'),
      ("get_weather", '{"location": "NYC", "days": [1, 2]}')], None),
    ("olmo3", "I'll look.\n<function_calls>\nnow()\n</function_calls>", [("now", "{}")], "I'll look."),
    ("olmo3", "<function_calls>not a call</function_calls>", [], "<function_calls>not a call</function_calls>"),
    ("llama4_pythonic", '<|python_start|>[get_weather(location="Oslo"), now()]<|python_end|>',
     [("get_weather", '{"location": "Oslo"}'), ("now", "{}")], None),
]


@pytest.mark.parametrize("name,text,calls,content", CASES)
def test_format_cases(name, text, calls, content):
    result = assert_split_invariant(name, text, every_split=True)
    assert (result["calls"], result["content"]) == (calls, content)
