"""deepseek_v3 (DeepSeek V3, R1 and its distills) and deepseek_v31 (DeepSeek V3.1).

    v3:   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{args}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
    v3.1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{args}<｜tool▁call▁end｜><｜tool▁calls▁end｜>

The markers use full-width bars (U+FF5C) and U+2581, exactly as DeepSeek's vocabulary spells them.
"""

from __future__ import annotations

import regex

from ..core.sectioned import SectionedToolParser

CALLS_BEGIN, CALL_BEGIN = "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>"
SEP, CALL_END, CALLS_END = "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"
_MARKERS = (CALLS_BEGIN, CALL_BEGIN, SEP, CALL_END, CALLS_END)
_CALL_START = f"(?:{CALLS_BEGIN}\\s*)?{CALL_BEGIN}\\s*"


class DeepSeekV3ToolParser(SectionedToolParser):
    name = "deepseek_v3"
    special_tokens = _MARKERS
    starts = (CALLS_BEGIN, CALL_BEGIN, CALLS_END)
    stray_markers = (CALLS_END,)
    _open = regex.compile(_CALL_START + f"[^<\\n]{{0,32}}{SEP}\\s*(?P<fname>[^<\\n]{{1,256}})\\n\\s*```(?:json)?\\s*(?=\\{{)")
    _close = regex.compile(f"\\s*```\\s*{CALL_END}")


class DeepSeekV31ToolParser(SectionedToolParser):
    name = "deepseek_v31"
    special_tokens = _MARKERS
    starts = (CALLS_BEGIN, CALL_BEGIN, CALLS_END)
    stray_markers = (CALLS_END,)
    _open = regex.compile(_CALL_START + f"(?P<fname>[^<\\n]{{1,256}}?)\\s*{SEP}\\s*(?=\\{{)")
    _close = regex.compile(f"\\s*{CALL_END}")
