"""deepseek_v32 (DeepSeek V3.2) and deepseek_v4 (DeepSeek V4): DSML markup, invokes with typed text parameters.

    <｜DSML｜function_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
    <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜function_calls>

V4 writes the same invokes in <｜DSML｜tool_calls> ... </｜DSML｜tool_calls>. string="true" says the value is text as it is (it streams as a JSON string); string="false" says it is
JSON, typed by the tool's schema when it has one. A parameter without the attribute is typed as an
untyped glm45 value is. A value is written as it is: no newline around it is formatting (as vLLM). The
models sometimes wrap every argument in one parameter named "arguments" or "input" that the tool does
not have; its object's members are the arguments (textargs.py's wrapper_keys).
"""

from __future__ import annotations

import regex

from ..core.invokes import InvokeSectionToolParser
from ..core.textargs import marker_prefixes

DSML = "｜DSML｜"
OPEN, CLOSE = f"<{DSML}function_calls>", f"</{DSML}function_calls>"
PARAM_CLOSE, PARAM_OPEN, INVOKE_CLOSE = f"</{DSML}parameter>", f"<{DSML}parameter name=", f"</{DSML}invoke>"


class DeepSeekV32ToolParser(InvokeSectionToolParser):
    name = "deepseek_v32"
    special_tokens = (OPEN, CLOSE)
    starts = (OPEN,)
    untyped_as_json = True
    wrapper_keys = ("arguments", "input")
    section_open = regex.escape(OPEN)
    invoke_open = f'<{DSML}invoke\\s+name="(?P<fname>[^"\\n<>]{{1,256}})"\\s*>'
    section_close = regex.escape(CLOSE)
    param_open = regex.compile(f'\\s*<{DSML}parameter\\s+name="(?P<key>[^"\\n<>]{{1,256}})"'
                               f'(?:\\s+string="(?P<string>true|false)")?\\s*>')
    value_end = regex.compile(f"(?P<own>{PARAM_CLOSE})|{PARAM_OPEN}|{INVOKE_CLOSE}")
    value_end_prefixes, value_end_hold = marker_prefixes(PARAM_CLOSE, PARAM_OPEN, INVOKE_CLOSE)
    call_end = regex.compile(f"\\s*{INVOKE_CLOSE}")

    def _param_types(self, key: str, param) -> tuple[str, ...]:
        if param is not None and param["string"] == "true":
            return ("string",)
        return super()._param_types(key, param)


V4_OPEN, V4_CLOSE = f"<{DSML}tool_calls>", f"</{DSML}tool_calls>"


class DeepSeekV4ToolParser(DeepSeekV32ToolParser):
    name = "deepseek_v4"
    special_tokens = (V4_OPEN, V4_CLOSE)
    starts = (V4_OPEN,)
    section_open = regex.escape(V4_OPEN)
    section_close = regex.escape(V4_CLOSE)
