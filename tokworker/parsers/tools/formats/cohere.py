"""cohere_command (Command R / R+ tool_use) and cohere_command2 (Command R7B; vLLM's cohere_command3 too).

    Command R+:  I will look it up.\nAction:\n```json\n[\n    {\n        "tool_name": "f",\n        "parameters": {...}\n    }\n]```
    Command R7B: <|START_THINKING|>plan<|END_THINKING|><|START_ACTION|>[
                     {"tool_call_id": "0", "tool_name": "f", "parameters": {...}}
                 ]<|END_ACTION|>
                 or <|START_RESPONSE|>text<|END_RESPONSE|>

R7B's plan is reasoning; its response markers are dropped around the content. The "tool_call_id" the
model writes is its own running number: the template numbers calls again by position when it renders
the next turn, so the calls get ordinary ids.
"""

from __future__ import annotations

import regex

from ..core.jsoncalls import CallKeys
from ..core.jsonlists import JsonListToolParser

COHERE_KEYS = CallKeys(name=("tool_name",), arguments=("parameters",),
                       lead=r'"tool_call_id"\s*:\s*"(?:[^"\\\x00-\x1f]|\\.){0,64}"\s*,\s*', lead_keys=("tool_call_id",))

START_THINKING, END_THINKING = "<|START_THINKING|>", "<|END_THINKING|>"
START_RESPONSE, END_RESPONSE = "<|START_RESPONSE|>", "<|END_RESPONSE|>"
START_ACTION, END_ACTION = "<|START_ACTION|>", "<|END_ACTION|>"


class CohereCommandToolParser(JsonListToolParser):
    name = "cohere_command"
    starts = ("Action:",)
    call_keys = COHERE_KEYS
    list_open = r"Action:\s*```(?:json)?\s*\[\s*"
    closing_markers = ("```",)


class CohereCommand2ToolParser(JsonListToolParser):
    name = "cohere_command2"
    special_tokens = (START_THINKING, END_THINKING, START_RESPONSE, END_RESPONSE, START_ACTION, END_ACTION)
    starts = (START_ACTION, START_THINKING, START_RESPONSE, END_RESPONSE, END_ACTION, END_THINKING)
    call_openings = (START_ACTION,)  # the others are the plan's and the response's markers
    drop_rejected_markers = True
    call_keys = COHERE_KEYS
    list_open = regex.escape(START_ACTION) + r"\s*\[\s*"
    closing_markers = (END_ACTION,)

    def _opening(self, final: bool) -> bool:
        buf = self._buf
        if buf.startswith(START_THINKING):
            self._consume(len(START_THINKING))
            self._mode = self._plan_mode
            return True
        if not buf.startswith(START_ACTION):  # a response marker, or an end marker met on its own
            return self._reject_opening(len(self._start_re.match(buf)[0]))
        return super()._opening(final)

    def _plan_mode(self, final: bool) -> bool:
        """The tool plan, up to <|END_THINKING|>: reasoning."""
        return self._pass_until(END_THINKING, final, as_reasoning=True, keep_end=False)
