"""Where generation starts, read from the prompt's last turn (the text after its last turn marker).

A template that opened the block (DeepSeek R1's and QwQ's generation prompt ends with "<think>\\n") means
the output starts inside the reasoning; one that already closed it (Qwen3 with enable_thinking=False appends
"<think>\\n\\n</think>\\n\\n") means nothing is reasoning; a generation prompt with neither means the model
opens the block itself if it reasons at all. A prefill is read the same way: "...<think>The user is asking
for" continues reasoning that has begun, "...</think>The answer is" continues content. Tags in earlier
turns (a system prompt that shows the format, past answers) say nothing about this one, so only the last
turn counts; tags anywhere in it do, not only at its very end.
"""

from __future__ import annotations

import regex

from .formats import CONTENT, INSIDE, ReasoningFormat

# The prompt has begun writing the block (or the content): what follows continues text, whitespace and all.
INSIDE_TEXT, CONTENT_TEXT = "inside_text", "content_text"
_WHITESPACE = " \t\r\n"
# Turn markers of the chat formats in use, searched from the end: ChatML/Llama/Command <|...|>, DeepSeek's
# <｜...｜>, Mistral's [INST] family, Gemma's <start_of_turn>, Gemma 4's <|turn> and <turn|>, Poolside's
# <assistant> and its siblings. A format's own tags are never one.
_TURN_MARKER = regex.compile(r"<\|[^|<>\s]{1,64}\|>|<｜[^｜<>]{1,64}｜>|\[/?(?:INST|SYSTEM_PROMPT|AVAILABLE_TOOLS|"
                             r"TOOL_RESULTS)\]|<(?:start|end)_of_turn>|<\|turn>|<turn\|>|<(?:system|user|assistant|tool)>",
                             regex.REVERSE)


def last_turn_text(prompt_text: str, fmt: ReasoningFormat) -> str:
    """The prompt after its last turn marker that is not one of the format's tags."""
    tags = fmt.starts + fmt.ends
    for match in _TURN_MARKER.finditer(prompt_text):
        if match.group() not in tags:
            return prompt_text[match.end():]
    return prompt_text


def last_turn_ids(prompt_ids, tokenizer, fmt: ReasoningFormat) -> list[int]:
    """The prompt ids after the last special token that is not one of the format's tags (all of them when
    the tokenizer names no special ids): the last turn, which a stream decodes instead of the whole prompt."""
    specials = getattr(tokenizer, "special_ids", None) or ()
    if specials:
        tag_ids = {tokenizer.token_to_id(tag) for tag in fmt.starts + fmt.ends}
        specials = frozenset(specials) - tag_ids
    for index in range(len(prompt_ids) - 1, -1, -1):
        if prompt_ids[index] in specials:
            return list(prompt_ids[index + 1:])
    return list(prompt_ids)


def starting_mode(fmt: ReasoningFormat, prompt_text: str | None) -> str:
    """Where generation starts: INSIDE, EXPECT or CONTENT, or INSIDE_TEXT / CONTENT_TEXT after a prefill."""
    if prompt_text is None:
        return fmt.without_prompt
    turn = last_turn_text(prompt_text, fmt)
    opened = max((turn.rfind(tag), tag) for tag in fmt.starts)
    closed = max((turn.rfind(tag), tag) for tag in fmt.ends)
    if opened[0] < 0 and closed[0] < 0:
        return fmt.open_prompt
    if opened[0] > closed[0]:
        after = turn[opened[0] + len(opened[1]):]
        return INSIDE if not after.strip(_WHITESPACE) else INSIDE_TEXT
    after = turn[closed[0] + len(closed[1]):]
    return CONTENT if not after.strip(_WHITESPACE) else CONTENT_TEXT
