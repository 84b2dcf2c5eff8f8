"""lfm2: LiquidAI LFM2 / LFM2.5 (pythonic calls between marker tokens, anywhere in the answer).

    <|tool_call_start|>[get_weather(city="Paris"), now()]<|tool_call_end|>The weather is ...

The markers are control tokens: one that opens no call is dropped. LFM2 sometimes echoes the call after
its end, capped by a second <|tool_call_end|>; that orphan marker is dropped too (vLLM drops the echoed
text before it as well; here the text stays, as content, since the parser cannot tell an echo from prose).
"""

from __future__ import annotations

import regex

from ..core.pythonic import PythonicCalls

START, END = "<|tool_call_start|>", "<|tool_call_end|>"


class Lfm2ToolParser(PythonicCalls):
    name = "lfm2"
    special_tokens = (START, END)
    starts = (START, END)
    drop_rejected_markers = True
    first_call = regex.compile(regex.escape(START) + r"\s*\[\s*(?P<fname>[A-Za-z_][\w.]{0,255})\s*\(")
    closing = regex.compile(r"\s*" + regex.escape(END))

    def _opening(self, final: bool) -> bool:
        if self._buf.startswith(END):
            return self._reject_opening(len(END))
        return self._call_start(self.first_call, final, len(START))
