"""step3: StepFun Step-3 (steptml invokes inside DeepSeek-style call markers).

    <｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="get_weather">
    <steptml:parameter name="city">Paris</steptml:parameter>
    </steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>

"function<｜tool_sep｜>" may be left out (vLLM's tests leave it out; its whole-text parser then finds no call,
a bug its tests mark xfail), and a <｜tool_sep｜> between calls is formatting. The markers are control
tokens: one that opens no call, or is left over, is dropped. Values are typed by the tool's schema; an untyped value is a string (as vLLM's step3). One "\\n" after a
value's tag and one before its closing tag are formatting; vLLM strips all whitespace around a value and
cannot read a value holding "<" at all, where we keep both (the value's own text).
"""

from __future__ import annotations

import regex

from ..core.invokes import InvokeSectionToolParser
from ..core.textargs import marker_prefixes

CALLS_BEGIN, CALLS_END = "<｜tool_calls_begin｜>", "<｜tool_calls_end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool_call_begin｜>", "<｜tool_call_end｜>", "<｜tool_sep｜>"
PARAM_CLOSE, PARAM_OPEN, INVOKE_CLOSE = "</steptml:parameter>", "<steptml:parameter name=", "</steptml:invoke>"


class Step3ToolParser(InvokeSectionToolParser):
    name = "step3"
    special_tokens = (CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP)
    starts = (CALLS_BEGIN, CALL_BEGIN, CALLS_END, CALL_END, SEP)  # a call without its section is read too
    stray_markers = (CALLS_END, CALL_END, SEP)
    call_openings = (CALLS_BEGIN, CALL_BEGIN)
    drop_rejected_markers = True  # control tokens in Step-3's vocabulary: never content
    strip_value_newlines = True
    section_open = f"(?:{CALLS_BEGIN})?"
    # the template writes "function<｜tool_sep｜>" before each invoke; models (and vLLM's tests) drop it, or put
    # the separator between calls instead
    invoke_open = (f"(?:{SEP}\\s*)?{CALL_BEGIN}\\s*(?:function\\s*{SEP}\\s*)?"
                   + r'<steptml:invoke name="(?P<fname>[^"\n<>]{1,256})">')
    section_close = regex.escape(CALLS_END)
    param_open = regex.compile(r'\s*<steptml:parameter name="(?P<key>[^"\n<>]{1,256})">')
    value_end = regex.compile(f"(?P<own>{PARAM_CLOSE})|{PARAM_OPEN}|{INVOKE_CLOSE}")
    value_end_prefixes, value_end_hold = marker_prefixes(PARAM_CLOSE, PARAM_OPEN, INVOKE_CLOSE)
    call_end = regex.compile(r"\s*" + INVOKE_CLOSE)
    invoke_close = regex.escape(CALL_END)
