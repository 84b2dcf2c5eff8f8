"""gigachat3: Sber GigaChat 3 and 3.1 (one JSON call after a role header).

    GigaChat 3:    I'll check.<|message_sep|>\\n\\nfunction call<|role_sep|>\\n{"name": "f", "arguments": {...}}</s>
    GigaChat 3.1:  I'll check.<|function_call|>{"name": "f", "arguments": {...}}

The markers are control tokens: one that opens no call is dropped, as is the end-of-text "</s>" after the
call. vLLM keeps nothing after a <|message_sep|> that opens no call; here the text after it is content.
"""

from __future__ import annotations

from ..core.tagged import TaggedJsonToolParser

MESSAGE_SEP, ROLE_SEP, FUNCTION_CALL = "<|message_sep|>", "<|role_sep|>", "<|function_call|>"


class GigaChat3ToolParser(TaggedJsonToolParser):
    name = "gigachat3"
    special_tokens = (MESSAGE_SEP, ROLE_SEP, FUNCTION_CALL)
    starts = (MESSAGE_SEP, FUNCTION_CALL)
    drop_rejected_markers = True
    open_pattern = r"(?:<\|message_sep\|>\s*function call<\|role_sep\|>|<\|function_call\|>)"
    close_pattern = "</s>"
