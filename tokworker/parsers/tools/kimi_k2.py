"""kimi_k2: Kimi K2.

    <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{args}<|tool_call_end|>...<|tool_calls_section_end|>

The call id Kimi writes (functions.NAME:IDX) carries the name; the OpenAI id is our own.
"""

from __future__ import annotations

import regex

from .sectioned import SectionedToolParser

SECTION_BEGIN, SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CALL_BEGIN, ARGUMENT_BEGIN, CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"


class KimiK2ToolParser(SectionedToolParser):
    name = "kimi_k2"
    special_tokens = (SECTION_BEGIN, SECTION_END, CALL_BEGIN, ARGUMENT_BEGIN, CALL_END)
    starts = (SECTION_BEGIN, CALL_BEGIN, SECTION_END)
    section_end = SECTION_END
    _open = regex.compile(f"(?:{regex.escape(SECTION_BEGIN)}\\s*)?{regex.escape(CALL_BEGIN)}\\s*"
                          f"(?:functions\\.)?(?P<fname>[^<\\s]{{1,256}}?)(?::\\d+)?\\s*"
                          f"{regex.escape(ARGUMENT_BEGIN)}\\s*(?=\\{{)")
    _close = regex.compile(f"\\s*{regex.escape(CALL_END)}")
