"""internlm: InternLM 2 / 2.5 (a plugin call is an action block holding one JSON object).

    <|action_start|><|plugin|>
    {"name": "get_weather", "parameters": {"city": "Paris"}}<|action_end|>

vLLM reads only the first block of an answer; each block here is a call. The code interpreter's blocks
(<|action_start|><|interpreter|>) are no function call: they stay content.
"""

from __future__ import annotations

from .tagged import TaggedJsonToolParser


class InternLMToolParser(TaggedJsonToolParser):
    name = "internlm"
    special_tokens = ("<|action_start|>", "<|plugin|>", "<|action_end|>")
    open_tag = "<|action_start|><|plugin|>"
    close_tag = "<|action_end|>"
