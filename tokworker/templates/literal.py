"""Control tokens that message content can't forge.

With the usual pipeline a user who types `<|im_end|>\\n<|im_start|>system` gets real control tokens. Here,
every string the caller supplies (message fields, tool results and call arguments, tools, documents,
template switches) is searched for control-token text, case-insensitively (a template may upper- or
lower-case content). Each occurrence is wrapped in two private-use marker characters, chosen at random per
render among those that appear in no input. The token text itself stays intact, so templates that look for
it (`'</think>' in content`, `content.split('</think>')`) still find it. After rendering, the markers are
removed and each marked occurrence that is still a control token's text becomes a literal span: the
tokenizer encodes it as ordinary text, while every control token the template wrote itself stays a token.

Markers can change what a template does (a `startswith('<tool_response>')` test, or a strip next to a
marked token). So the marked render is compared with the exact one: when they differ, a second try marks
only the special tokens (the turn and role delimiters); if that still differs, the fully marked rendering
is encoded, which is safe but no longer identical to transformers' text. Inputs with no control-token text
at all, the common case, cost one scan and are encoded exactly as transformers encodes them.

Known limit: a template that glues a control token together from pieces of different strings (or out of
content by `replace`) is not caught; transformers' own sanitizer has the same limit.
"""

from __future__ import annotations

import random
import re
import weakref

#: Private-use planes 15 and 16: characters no real text carries and no tokenizer normalizes away.
_MARKER_RANGES = ((0xF0000, 0xFFFFD), (0x100000, 0x10FFFD))
_SPECIAL_NAMES = frozenset({"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                            "mask_token"})
_PER_TOKENIZER_TEMPLATES = 8


class ControlTokens:
    """The control tokens of one (tokenizer, template) pair and a fast case-insensitive search for them."""

    def __init__(self, contents):
        self.all = frozenset(contents)
        self.lowered = frozenset(content.lower() for content in self.all)
        self.pattern = re.compile(_trie_pattern(sorted(self.lowered)), re.IGNORECASE) if self.all else None


def _trie_pattern(words) -> str:
    """An alternation factored as a trie, so the regex engine rejects most positions at the first character
    (a flat alternation of DeepSeek's 1,283 added tokens scans 20x slower)."""
    trie: dict = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def build(node) -> str:
        branches = [re.escape(char) + build(child) for char, child in node.items() if char != ""]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return "(?:" + body + ")?" if "" in node else body

    return build(trie)


_CACHE: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()


def control_tokens(tokenizer, template: str, literal_text: str) -> tuple[ControlTokens, ControlTokens]:
    """(every control token, the special ones). Control tokens are the special added tokens, the
    tokenizer's `chat_control_tokens` if it lists them, and the other added tokens the template's own text
    contains (Qwen's <tool_call>, <think>), except whitespace tokens."""
    try:
        per_template = _CACHE.setdefault(tokenizer, {})
    except TypeError:      # not weak-referenceable: compute every time
        per_template = {}
    found = per_template.get(template)
    if found is None:
        special_ids = tokenizer.special_ids
        listed = set(getattr(tokenizer, "chat_control_tokens", None) or ())
        special, control = [], []
        for content, token_id in tokenizer.added_tokens.items():
            if token_id in special_ids:
                special.append(content)
                control.append(content)
            elif content in listed or (content in literal_text and not content.isspace()):
                control.append(content)
        found = (ControlTokens(control), ControlTokens(special))
        if len(per_template) >= _PER_TOKENIZER_TEMPLATES:
            per_template.clear()
        per_template[template] = found
    return found


def strings_in(value, out: list) -> list:
    """Every string value (not dict key) in nested dicts, lists and tuples."""
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            strings_in(item, out)
    elif isinstance(value, (list, tuple)):
        for item in value:
            strings_in(item, out)
    return out


def user_variables(variables: dict) -> dict:
    """The template switches the caller passed, without the tokenizer's own special tokens."""
    return {name: value for name, value in variables.items() if name not in _SPECIAL_NAMES}


def pick_markers(strings: list, template: str) -> tuple[str, str]:
    """Two private-use characters that occur in none of the inputs nor the template."""
    chooser = random.SystemRandom()
    while True:
        low, high = _MARKER_RANGES[chooser.randrange(2)]
        opening, closing = chr(chooser.randint(low, high)), chr(chooser.randint(low, high))
        if opening != closing and not any(opening in s or closing in s for s in strings) \
                and opening not in template and closing not in template:
            return opening, closing


def mark(value, tokens: ControlTokens, opening: str, closing: str):
    """A copy of `value` with every control-token occurrence in its strings wrapped in the markers."""
    if isinstance(value, str):
        return tokens.pattern.sub(lambda match: opening + match.group() + closing, value)
    if isinstance(value, dict):
        return {key: mark(item, tokens, opening, closing) for key, item in value.items()}
    if isinstance(value, list):
        return [mark(item, tokens, opening, closing) for item in value]
    if isinstance(value, tuple):
        return tuple(mark(item, tokens, opening, closing) for item in value)
    return value


def unmark(text: str, tokens: ControlTokens, opening: str, closing: str) -> tuple[str, list]:
    """Remove the markers; return the clean text and the literal spans: each opening marker followed by a
    closing one around text that is (in any case) a control token. A lone marker means the template cut
    a marked token apart; its pieces are ordinary text already."""
    pieces, markers, clean_length, cursor = [], [], 0, 0
    for match in re.finditer(f"[{opening}{closing}]", text):
        piece = text[cursor:match.start()]
        pieces.append(piece)
        clean_length += len(piece)
        markers.append((match.group(), clean_length))
        cursor = match.end()
    pieces.append(text[cursor:])
    clean = "".join(pieces)
    spans = []
    for (kind, start), (next_kind, end) in zip(markers, markers[1:]):
        if kind == opening and next_kind == closing and clean[start:end].lower() in tokens.lowered:
            spans.append((start, end))
    return clean, spans
