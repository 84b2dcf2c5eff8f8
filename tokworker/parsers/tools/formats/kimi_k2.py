"""kimi_k2: Kimi K2.

    <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{args}<|tool_call_end|>...<|tool_calls_section_end|>

The id the model writes (functions.NAME:IDX) is the call's id: the template writes each call under
that id and each tool result as "## Return of ID", so the next turn links them. The markers are control
tokens, never content: one that opens no call, or is left over after arguments that broke off, is dropped.
"""

from __future__ import annotations

import regex

from ..core.callids import call_id
from ..core.sectioned import SectionedToolParser

SECTION_BEGIN, SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CALL_BEGIN, ARGUMENT_BEGIN, CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"


class KimiK2ToolParser(SectionedToolParser):
    name = "kimi_k2"
    special_tokens = (SECTION_BEGIN, SECTION_END, CALL_BEGIN, ARGUMENT_BEGIN, CALL_END)
    starts = (SECTION_BEGIN, CALL_BEGIN, SECTION_END, ARGUMENT_BEGIN, CALL_END)
    stray_markers = (SECTION_END, ARGUMENT_BEGIN, CALL_END)
    call_openings = (SECTION_BEGIN, CALL_BEGIN)
    drop_rejected_markers = True
    _open = regex.compile(f"(?:{regex.escape(SECTION_BEGIN)}\\s*)?{regex.escape(CALL_BEGIN)}\\s*"
                          f"(?:functions\\.)?(?P<fname>[^<\\s]{{1,256}}?)(?::(?P<idx>\\d{{1,9}}))?\\s*"
                          f"{regex.escape(ARGUMENT_BEGIN)}\\s*(?=\\{{)")
    _close = regex.compile(f"\\s*{regex.escape(CALL_END)}")

    def _model_id(self, m) -> str:
        """functions.NAME:IDX with the model's IDX; the call's place in this answer when it wrote none."""
        return call_id("functions", m["fname"].strip(), int(m["idx"]) if m["idx"] is not None else self._index + 1)
