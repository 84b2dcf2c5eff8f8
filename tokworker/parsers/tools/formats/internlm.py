"""internlm: InternLM 2 / 2.5 (a plugin call is an action block holding one JSON object).

    <|action_start|><|plugin|>
    {"name": "get_weather", "parameters": {"city": "Paris"}}<|action_end|>

vLLM reads only the first block of an answer; each block here is a call. The code interpreter's blocks
(<|action_start|><|interpreter|>...<|action_end|>) are no function call: they stay content, whole. An
<|action_end|> left over elsewhere (after arguments that broke off) is a control token and dropped.
"""

from __future__ import annotations

from ..core.tagged import TaggedJsonToolParser

PLUGIN, INTERPRETER, END = "<|action_start|><|plugin|>", "<|action_start|><|interpreter|>", "<|action_end|>"


class InternLMToolParser(TaggedJsonToolParser):
    name = "internlm"
    special_tokens = ("<|action_start|>", "<|plugin|>", "<|interpreter|>", END)
    starts = (PLUGIN, INTERPRETER, END)
    stray_markers = (END,)
    open_tag = PLUGIN
    close_tag = END

    def _opening(self, final: bool) -> bool:
        if self._buf.startswith(INTERPRETER):
            self._mode = self._interpreter_mode
            return True
        return super()._opening(final)

    def _interpreter_mode(self, final: bool) -> bool:
        return self._pass_until(END, final, as_reasoning=False, keep_end=True)
