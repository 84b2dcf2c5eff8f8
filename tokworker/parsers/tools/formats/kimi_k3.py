"""kimi_k3: Kimi K3 (XTML channels: calls with typed arguments in a tools channel).

    <|open|>response<|sep|>Let me run it.<|close|>response<|sep|>
    <|open|>tools<|sep|>
    <|open|>call tool="python" index="1"<|sep|>
    <|open|>argument key="code" type="string"<|sep|>print(1)<|close|>argument<|sep|>
    <|open|>argument key="opts" type="object"<|sep|>{"a": 1}<|close|>argument<|sep|>
    <|close|>call<|sep|>
    <|close|>tools<|sep|>

type="string" says the value is raw text (it streams as a JSON string); any other type says it is JSON
(text that does not parse stays a string, as vLLM reads it). The response channel's markers are
control tokens around the content: they never reach it. vLLM tolerates spaces inside the markers (added
by spaces_between_special_tokens); tokworker writes no such spaces, so the markers are read exactly.
"""

from __future__ import annotations

import regex

from ..core.invokes import InvokeSectionToolParser
from ..core.textargs import marker_prefixes

OPEN, CLOSE, SEP = "<|open|>", "<|close|>", "<|sep|>"
TOOLS_OPEN, TOOLS_CLOSE = f"{OPEN}tools{SEP}", f"{CLOSE}tools{SEP}"
RESPONSE_OPEN, RESPONSE_CLOSE, MESSAGE_CLOSE = f"{OPEN}response{SEP}", f"{CLOSE}response{SEP}", f"{CLOSE}message{SEP}"
ARGUMENT_CLOSE = f"{CLOSE}argument{SEP}"
_O, _C, _S = (regex.escape(m) for m in (OPEN, CLOSE, SEP))


class KimiK3ToolParser(InvokeSectionToolParser):
    name = "kimi_k3"
    special_tokens = (OPEN, CLOSE, SEP)
    starts = (TOOLS_OPEN, RESPONSE_OPEN, RESPONSE_CLOSE, MESSAGE_CLOSE, TOOLS_CLOSE)
    stray_markers = (RESPONSE_OPEN, RESPONSE_CLOSE, MESSAGE_CLOSE, TOOLS_CLOSE)
    drop_rejected_markers = True
    section_open = regex.escape(TOOLS_OPEN)
    invoke_open = _O + r'call\s+tool="(?P<fname>[^"\n<>]{1,256})"(?:\s+index="\d{0,9}")?\s*' + _S
    section_close = regex.escape(TOOLS_CLOSE)
    param_open = regex.compile(r"\s*" + _O + r'argument\s+key="(?P<key>[^"\n<>]{1,256})"'
                               r'(?:\s+type="(?P<type>[^"\n<>]{0,64})")?\s*' + _S)
    value_end = regex.compile(f"(?P<own>{regex.escape(ARGUMENT_CLOSE)})")
    value_end_prefixes, value_end_hold = marker_prefixes(ARGUMENT_CLOSE)
    call_end = regex.compile(r"\s*" + _C + "call" + _S)

    def _param_types(self, key: str, param) -> tuple[str, ...]:
        kind = param["type"] if param is not None else None
        return ("string",) if kind in (None, "string") else ("json",)
