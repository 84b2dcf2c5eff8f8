"""Control tokens and the special variables a request may set.

Every non-whitespace added token of the vocabulary is a control token here, special or not, whether the
template writes it or not (Qwen's <|fim_prefix|>, DeepSeek's FIM tokens, Llama 3's reserved tokens): no
added-token match in a prompt may lie in text the template did not write itself (owned.py, apply.py).
This module finds control-token text (case-insensitively, with a trie-shaped pattern) and decides which
special variables (bos_token, eos_token, ...) are the tokenizer's own: those count as the template's text;
a request may also set them to text without control tokens (then they are caller text like any other),
and anything else is refused, naming the variable.
"""

from __future__ import annotations

import re
import weakref

from .errors import TemplateInputError

SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class ControlTokens:
    """A set of control tokens and a fast case-insensitive search for them."""

    def __init__(self, contents):
        self.characters = frozenset("".join(contents))
        self.pattern = re.compile(_trie_pattern(sorted({content.lower() for content in contents})),
                                  re.IGNORECASE) if contents else None


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


_CACHE: "weakref.WeakKeyDictionary[object, tuple]" = weakref.WeakKeyDictionary()


def control_tokens(tokenizer) -> tuple[ControlTokens, frozenset]:
    """(every non-whitespace added token, the contents of the special ones), built once per tokenizer.
    Whitespace-only added tokens are left to ordinary encoding, as in any text."""
    try:
        found = _CACHE.get(tokenizer)
    except TypeError:      # not weak-referenceable: computed every time
        found = None
    if found is None:
        control = {content: i for content, i in tokenizer.added_tokens.items() if not content.isspace()}
        special_ids = tokenizer.special_ids
        found = (ControlTokens(control),
                 frozenset(c for c, i in tokenizer.added_tokens.items() if i in special_ids))
        try:
            _CACHE[tokenizer] = found
        except TypeError:
            pass
    return found


def strings_in(value, out: list) -> list:
    """Every string in nested dicts, lists and tuples, dict keys included (in no particular order)."""
    stack = [value]
    pop, extend, append = stack.pop, stack.extend, out.append
    while stack:
        item = pop()
        if isinstance(item, str):
            append(item)
        elif isinstance(item, dict):
            extend(item)
            extend(item.values())
        elif isinstance(item, (list, tuple)):
            extend(item)
    return out


def holds_control_text(strings: list, tokens: ControlTokens) -> bool:
    """Whether any of the strings holds control-token text: one search over them joined by a character no
    token holds, which is several times cheaper than a search per string on a chat's many short strings."""
    if tokens.pattern is None:
        return False
    separator = "\0" if "\0" not in tokens.characters else "\uffff"
    return tokens.pattern.search(separator.join(strings)) is not None


def _template_given(name: str, value, special: dict, special_contents) -> bool:
    """Whether a special variable holds what the tokenizer gives it: its own value, or where it has none
    (a bare tokenizer.json), exactly one of its special tokens, filling in missing configuration."""
    if name in special:
        return value == special[name]
    return isinstance(value, str) and value in special_contents


def caller_variables(variables: dict, special: dict, special_contents) -> dict:
    """The template variables that came from the caller: all but the special tokens the tokenizer gives."""
    return {name: value for name, value in variables.items()
            if name not in SPECIAL_NAMES or not _template_given(name, value, special, special_contents)}


def check_special_overrides(variables: dict, special: dict, tokens: ControlTokens,
                            special_contents) -> None:
    """A request may set bos_token and the other special variables to the tokenizer's own value, or to text
    that holds no control token (it is then caller text like any other); where the tokenizer has no value
    of its own (a bare tokenizer.json), to exactly one of its special tokens, which fills in missing
    configuration. Anything else would put a control token of the caller's choice where the template puts
    its own: refused, naming the variable."""
    if tokens.pattern is None or not variables:
        return
    for name in SPECIAL_NAMES:
        if name not in variables or _template_given(name, variables[name], special, special_contents):
            continue
        value = variables[name]
        if holds_control_text(strings_in(value, []), tokens):
            own = f"the tokenizer's own ({special[name]!r})" if name in special else "one special token"
            shown = repr(value)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            raise TemplateInputError(f"{name} may only be {own} or text without control tokens; {shown} holds "
                                     f"control-token text")
