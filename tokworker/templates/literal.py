"""Control tokens that nothing the caller sends can forge.

Every non-whitespace added token of the vocabulary is a control token here, special or not, whether the
template writes it or not (Qwen's <|fim_prefix|>, DeepSeek's FIM tokens, Llama 3's reserved tokens). Every
string the caller sends is searched for them, dict keys included (tool-call argument names, schema
properties), case-insensitively (a template may upper- or lower-case content).

The safe render ("defused"): each occurrence gets a splitter character inserted after its first character,
again until no control token is left in the string. Whatever the template does with that text (slices it,
trims it, repeats it, prints a list's repr of it, case-changes it) it cannot write the token again without
writing the splitter inside it, because the splitter is a printable, caseless character from CJK Extension
B that no input, template or token contains. After rendering, the splitters are removed and each place one
stood becomes a zero-width literal span: no added token may match across it. Template-written tokens hold
no splitter, so they stay tokens.

The splitter changes what a template sees (`'</think>' in content` no longer holds), so the defused text
can differ from transformers' text. Then a "marked" render is tried: each occurrence is wrapped in two
marker characters, the token text stays intact, and the occurrences still wrapped after rendering become
literal spans. It is accepted only when its markers all came through in pairs, its text is exactly
transformers' text, and its control-token ids are exactly the defused render's (a marker the template cut
off, escaped or dropped would leave a forged id, which makes the sequences differ). Otherwise the defused
render is used: always safe, no longer transformers' text.
"""

from __future__ import annotations

import random
import re
import weakref

from .errors import TemplateInputError

#: CJK Unified Ideographs Extension B: printable (repr keeps them), caseless, not whitespace.
_MARKER_RANGE = (0x20000, 0x2A6DD)
SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class ControlTokens:
    """A set of control tokens, a fast case-insensitive search for them, and their ids."""

    def __init__(self, contents: dict[str, int]):
        self.all = frozenset(contents)
        self.ids = frozenset(contents.values())
        self.lowered = frozenset(content.lower() for content in self.all)
        self.characters = frozenset("".join(contents))
        self.pattern = re.compile(_trie_pattern(sorted(self.lowered)), re.IGNORECASE) \
            if self.all else None


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
_PER_TOKENIZER_TEMPLATES = 8


def _cached(tokenizer, key, build):
    try:
        entries = _CACHE.setdefault(tokenizer, {})
    except TypeError:      # not weak-referenceable: compute every time
        entries = {}
    found = entries.get(key)
    if found is None:
        if len(entries) >= _PER_TOKENIZER_TEMPLATES:
            entries.clear()
        found = entries[key] = build()
    return found


def control_tokens(tokenizer) -> tuple[ControlTokens, frozenset]:
    """(every non-whitespace added token, the contents of the special ones). Whitespace-only added tokens
    are left to ordinary encoding, as in any text."""
    def build():
        control = {content: i for content, i in tokenizer.added_tokens.items() if not content.isspace()}
        special_ids = tokenizer.special_ids
        return ControlTokens(control), frozenset(c for c, i in tokenizer.added_tokens.items() if i in special_ids)
    return _cached(tokenizer, None, build)


def foreign_tokens(tokenizer, template: str, literal_text: str) -> ControlTokens:
    """The control tokens minus the non-special ones the template's own text holds: those are the ones a
    template looks for in content (`'</think>' in content`), so the second marked render leaves them bare."""
    def build():
        everything, special = control_tokens(tokenizer)
        kept = {c: i for c, i in tokenizer.added_tokens.items()
                if c in everything.all and (c in special or c not in literal_text)}
        return ControlTokens(kept)
    return _cached(tokenizer, template, build)


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


def pick_markers(strings: list, template: str, tokens: ControlTokens, count: int) -> list[str]:
    """`count` distinct marker characters that occur in no input, nor the template, nor any control token."""
    chooser, low, high = random.SystemRandom(), *_MARKER_RANGE
    everything = "\0".join(strings)
    chosen: list[str] = []
    while len(chosen) < count:
        char = chr(chooser.randint(low, high))
        if char not in chosen and char not in tokens.characters and char not in template and char not in everything:
            chosen.append(char)
    return chosen


def transform(value, rewrite):
    """A copy of `value` with `rewrite` applied to every string in it, dict keys included."""
    if isinstance(value, str):
        return rewrite(value)
    if isinstance(value, dict):
        return {transform(key, rewrite): transform(item, rewrite) for key, item in value.items()}
    if isinstance(value, list):
        return [transform(item, rewrite) for item in value]
    if isinstance(value, tuple):
        return tuple(transform(item, rewrite) for item in value)
    return value


def defuser(tokens: ControlTokens, splitter: str):
    """string -> the string with `splitter` after the first character of every control-token occurrence,
    repeated until none is left (a token may hide inside another's tail: x<|a|> with |a|> added too)."""
    search, substitute = tokens.pattern.search, tokens.pattern.sub

    def split(match):
        text = match.group()
        return text[0] + splitter + text[1:]

    def defuse(text: str) -> str:
        while search(text):
            text = substitute(split, text)
        return text
    return defuse


def marker(tokens: ControlTokens, opening: str, closing: str):
    """string -> the string with every control-token occurrence wrapped in the two markers."""
    substitute = tokens.pattern.sub
    return lambda text: substitute(lambda match: opening + match.group() + closing, text)


def remove_splitters(text: str, splitter: str) -> tuple[str, list]:
    """The text without splitters, and a zero-width literal span where each one stood."""
    pieces = text.split(splitter)
    if len(pieces) == 1:
        return text, []
    spans, at = [], 0
    for piece in pieces[:-1]:
        at += len(piece)
        spans.append((at, at))
    return "".join(pieces), spans


def unmark(text: str, tokens: ControlTokens, opening: str, closing: str) -> tuple[str, list, bool]:
    """Remove the markers; return the clean text, the literal spans (each opening marker followed by a
    closing one around a control token's text, in any case), and whether every marker came in such a pair.
    A lone or misplaced marker means the template cut a marked occurrence apart."""
    pieces, markers, clean_length, cursor = [], [], 0, 0
    for match in re.finditer(f"[{opening}{closing}]", text):
        piece = text[cursor:match.start()]
        pieces.append(piece)
        clean_length += len(piece)
        markers.append((match.group(), clean_length))
        cursor = match.end()
    pieces.append(text[cursor:])
    clean = "".join(pieces)
    lowered = tokens.lowered
    spans, intact = [], len(markers) % 2 == 0
    for (kind, start), (next_kind, end) in zip(markers[::2], markers[1::2]):
        if kind == opening and next_kind == closing and clean[start:end].lower() in lowered:
            spans.append((start, end))
        else:
            intact = False
    return clean, spans, intact
