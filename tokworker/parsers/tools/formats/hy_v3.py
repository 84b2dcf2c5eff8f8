"""hy_v3: Tencent Hunyuan v3 (glm45-style keys and values, each call named before a separator).

    <tool_calls><tool_call>get_weather<tool_sep><arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>
    <tool_call>...</tool_call></tool_calls>

Values are typed by the tool's schema; an untyped value is a string (as vLLM's hy_v3). vLLM also maps
type names such as "int" or "dict" to JSON Schema's; here the schema's own names count ("float" too).
"""

from __future__ import annotations

import regex

from ..core.invokes import InvokeSectionToolParser
from ..core.textargs import marker_prefixes


class HyV3ToolParser(InvokeSectionToolParser):
    name = "hy_v3"
    special_tokens = ("<tool_calls>", "</tool_calls>", "<tool_call>", "</tool_call>", "<tool_sep>")
    starts = ("<tool_calls>",)
    section_open = "<tool_calls>"
    invoke_open = r"<tool_call>\s*(?P<fname>[^<\n]{1,256}?)\s*<tool_sep>"
    section_close = "</tool_calls>"
    param_open = regex.compile(r"\s*<arg_key>(?P<key>[^<]{0,256})</arg_key>\s*<arg_value>")
    value_end = regex.compile(r"(?P<own></arg_value>)")
    value_end_prefixes, value_end_hold = marker_prefixes("</arg_value>")
    call_end = regex.compile(r"\s*</tool_call>")
