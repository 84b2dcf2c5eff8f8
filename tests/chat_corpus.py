"""Conversations for template tests: every shape the parity suite must cover, built once here, and the
clock they are rendered at.

Each scenario is (name, messages, call keyword arguments). Tool call ids are 9 alphanumerics because
Mistral templates insist on that.
"""

from __future__ import annotations

import contextlib
import copy
import json
from datetime import datetime

NOW = datetime(2025, 3, 14, 15, 9, 26)  # templates that print today's date are compared at this one


@contextlib.contextmanager
def transformers_clock(now: datetime = NOW):
    """transformers' chat-template renderer with its strftime_now clock frozen at `now`, as ours is given it."""
    from transformers.utils import chat_template_utils

    class FrozenClock(datetime):
        @classmethod
        def now(cls, tz=None):
            return now

    saved, chat_template_utils.datetime = chat_template_utils.datetime, FrozenClock
    try:
        yield
    finally:
        chat_template_utils.datetime = saved

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {   # nested schema: arrays of objects, nested objects, numbers, booleans
    "type": "function",
    "function": {
        "name": "search_flights",
        "description": "Search flights; returns a list of offers.",
        "parameters": {
            "type": "object",
            "properties": {
                "legs": {"type": "array", "items": {"type": "object", "properties": {
                    "from": {"type": "string"}, "to": {"type": "string"},
                    "date": {"type": "string", "format": "date"}}, "required": ["from", "to"]}},
                "passengers": {"type": "object", "properties": {
                    "adults": {"type": "integer", "minimum": 1}, "children": {"type": "integer"}}},
                "max_price": {"type": "number"},
                "direct_only": {"type": "boolean"},
            },
            "required": ["legs"],
        },
    },
}
TOOLS = [WEATHER_TOOL, SEARCH_TOOL]
FLAT_TOOLS = [   # the older flat shape some templates read (Cohere's parameter_definitions)
    {"name": "internet_search", "description": "Search the web.",
     "parameter_definitions": {"query": {"description": "What to search for", "type": "str", "required": True},
                               "limit": {"description": "How many results", "type": "int", "required": False}}},
]

SYSTEM = {"role": "system", "content": "You are a helpful assistant. Answer briefly."}
USER = {"role": "user", "content": "What's the weather in Paris?"}
UNICODE_USER = {"role": "user", "content": "北京天气怎么样？🌧️ Also: שלום, مرحبا بالعالم — café naïve ﬁ e\u0301"}


def _call(name, arguments, call_id="call12345"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CALL_DICT = {"role": "assistant", "content": "", "tool_calls": [_call("get_weather", {"city": "Paris", "unit": "celsius"})]}
CALL_STRING = {"role": "assistant", "content": "",
               "tool_calls": [_call("get_weather", json.dumps({"city": "Paris"}))]}
RESULT_NAMED = {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": '{"temp": 18, "sky": "cloudy"}'}
RESULT_UNNAMED = {"role": "tool", "tool_call_id": "call12345", "content": "18°C, cloudy"}
PARALLEL = {"role": "assistant", "content": "",
            "tool_calls": [_call("get_weather", {"city": "Paris"}, "callAAAAA"),
                           _call("get_weather", {"city": "東京"}, "callBBBBB")]}
PARALLEL_RESULTS = [{"role": "tool", "tool_call_id": "callAAAAA", "name": "get_weather", "content": "18"},
                    {"role": "tool", "tool_call_id": "callBBBBB", "name": "get_weather", "content": "22"}]
ANSWER = {"role": "assistant", "content": "It is 18°C and cloudy in Paris."}
DOCUMENTS = [{"title": "Paris climate", "text": "Paris has an oceanic climate."},
             {"title": "Tokyo", "text": "東京は湿度が高い。"}]

SCENARIOS = [
    ("user_only", [USER], {}),
    ("system_user", [SYSTEM, USER], {}),
    ("multi_turn", [SYSTEM, USER, ANSWER, {"role": "user", "content": "And tomorrow?"}], {}),
    ("multi_turn_no_system", [USER, ANSWER, {"role": "user", "content": "Thanks!"}], {}),
    ("unicode", [SYSTEM, UNICODE_USER], {}),
    ("no_generation_prompt", [SYSTEM, USER, ANSWER], {"add_generation_prompt": False}),
    ("empty_content", [{"role": "user", "content": ""}], {}),
    ("content_parts", [{"role": "user", "content": [{"type": "text", "text": "Describe "},
                                                    {"type": "text", "text": "this."}]}], {}),
    ("none_valued_keys", [SYSTEM, {"role": "user", "content": "Hi", "name": None, "tool_calls": None}], {}),
    ("tools_declared", [SYSTEM, USER], {"tools": TOOLS}),
    ("tools_no_system", [USER], {"tools": TOOLS}),
    ("tool_call_dict_args", [SYSTEM, USER, CALL_DICT, RESULT_NAMED], {"tools": TOOLS}),
    ("tool_call_string_args", [SYSTEM, USER, CALL_STRING, RESULT_NAMED], {"tools": TOOLS}),
    ("tool_result_unnamed", [USER, CALL_DICT, RESULT_UNNAMED, ANSWER, {"role": "user", "content": "ok"}],
     {"tools": TOOLS}),
    ("parallel_calls", [SYSTEM, USER, PARALLEL, *PARALLEL_RESULTS], {"tools": TOOLS}),
    ("tool_call_content_none", [USER, {**CALL_DICT, "content": None}, RESULT_NAMED], {"tools": [WEATHER_TOOL]}),
    ("reasoning_content", [USER, {"role": "assistant", "content": "18°C.", "reasoning_content": "Look it up."},
                           {"role": "user", "content": "Sure?"}], {}),
    ("reasoning_last", [USER, {"role": "assistant", "content": "18°C.", "reasoning_content": "Check."}],
     {"add_generation_prompt": False}),
    ("think_in_content", [USER, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\n18°C."},
                          {"role": "user", "content": "ok"}], {}),
    ("thinking_off", [SYSTEM, USER], {"enable_thinking": False, "thinking": False, "thinking_budget": 0,
                                       "reasoning_effort": "low", "add_thoughts": False}),
    ("thinking_on", [SYSTEM, USER], {"enable_thinking": True, "thinking": True, "thinking_budget": -1,
                                      "reasoning_effort": "high", "add_thoughts": True}),
    ("continue_final", [USER, {"role": "assistant", "content": "It is "}],
     {"add_generation_prompt": False, "continue_final_message": True}),
    ("continue_final_spaces", [USER, {"role": "assistant", "content": "Well,  "}],
     {"add_generation_prompt": False, "continue_final_message": True}),
    ("continue_reasoning", [USER, {"role": "assistant", "content": "", "reasoning_content": "First, "}],
     {"add_generation_prompt": False, "continue_final_message": "reasoning_content"}),
    ("continue_with_generation_prompt", [USER, ANSWER],
     {"add_generation_prompt": True, "continue_final_message": True}),
    ("documents", [SYSTEM, USER], {"documents": DOCUMENTS}),
    ("flat_tools", [SYSTEM, USER], {"tools": FLAT_TOOLS}),
    ("flat_tools_documents", [USER, ANSWER, {"role": "user", "content": "more"}],
     {"tools": FLAT_TOOLS, "documents": DOCUMENTS}),
    ("flat_tools_unicode", [SYSTEM, UNICODE_USER], {"tools": FLAT_TOOLS, "add_generation_prompt": False}),
    ("agentic", [SYSTEM, USER, CALL_DICT, RESULT_NAMED, ANSWER, {"role": "user", "content": "Tokyo too"},
                 PARALLEL, *PARALLEL_RESULTS, ANSWER], {"tools": TOOLS, "add_generation_prompt": False}),
]


def scenarios():
    """Fresh deep copies, so a renderer that edits its inputs can't affect the next one."""
    return [(name, copy.deepcopy(messages), copy.deepcopy(kwargs)) for name, messages, kwargs in SCENARIOS]
