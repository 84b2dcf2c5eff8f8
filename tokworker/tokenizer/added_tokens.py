"""Added tokens: found in the text before anything else, exactly as `tokenizers`' AddedVocabulary finds them.

Tokens with normalized=False match the raw text; the text between them is normalized and then searched
for the normalized=True tokens (whose own content is normalized first). Matching is leftmost-longest;
single_word rejects a match touching a word character; lstrip/rstrip absorb the whitespace beside a match.

Ids follow `tokenizers`, not the JSON: a token whose content is in the model vocabulary takes that id, any
other is numbered after the model (from the model's entry count, or one past the highest added id).
"""

from __future__ import annotations

from dataclasses import dataclass

import regex

_WORD_CHAR = regex.compile(r"\w")
_SPACE_CHAR = regex.compile(r"\s")
_SPACE_RUN = regex.compile(r"\s*")


@dataclass(frozen=True)
class AddedToken:
    content: str
    special: bool = False
    single_word: bool = False
    lstrip: bool = False
    rstrip: bool = False
    normalized: bool = True

    @classmethod
    def from_spec(cls, spec: dict) -> "AddedToken":
        special = bool(spec.get("special", False))
        return cls(spec["content"], special, bool(spec.get("single_word", False)), bool(spec.get("lstrip", False)),
                   bool(spec.get("rstrip", False)), bool(spec.get("normalized", not special)))


class _Matcher:
    """Leftmost-longest search over a set of literal strings (alternation sorted longest first)."""

    def __init__(self, entries: dict[str, int]):
        self.ids = entries
        contents = sorted(entries, key=len, reverse=True)
        self.pattern = regex.compile("|".join(map(regex.escape, contents))) if contents else None


class AddedVocabulary:
    """Content <-> id for added tokens, and the splitting of text around them."""

    def __init__(self, specs: list[dict], model_vocab: dict[str, int], normalize=None, keep_ids: bool = False):
        """keep_ids=True takes each spec's "id" as given (tiktoken special tokens), not tokenizers' numbering."""
        self.ids: dict[str, int] = {}              # content -> id
        self.tokens: dict[int, AddedToken] = {}    # id -> token (last definition wins, as in tokenizers)
        self.special_contents: set[str] = set()
        model_size = len(model_vocab)
        for spec in specs:
            token = AddedToken.from_spec(spec)
            if not token.content or self.tokens.get(self.ids.get(token.content, -1)) == token:
                continue
            if token.special:
                self.special_contents.add(token.content)
            token_id = spec["id"] if keep_ids else self.ids.get(token.content, model_vocab.get(token.content))
            if token_id is None:
                highest = max(self.ids.values(), default=None)
                token_id = model_size if highest is None or (highest < model_size and model_size) else highest + 1
            self.ids[token.content] = token_id
            self.tokens[token_id] = token
        self.special_ids = frozenset(i for c, i in self.ids.items() if c in self.special_contents)
        self._build(normalize)

    def _build(self, normalize):
        raw, normalized = {}, {}
        for content, token_id in self.ids.items():
            token = self.tokens[token_id]
            if token.normalized:
                normalized[normalize(content) if normalize else content] = token_id
            else:
                raw[content] = token_id
        self._raw, self._normalized = _Matcher(raw), _Matcher(normalized)
        self._raw_plain, self._normalized_plain = _Matcher(self._plain(raw)), _Matcher(self._plain(normalized))

    def _plain(self, entries: dict[str, int]) -> dict[str, int]:
        return {content: i for content, i in entries.items() if self.tokens[i].content not in self.special_contents}

    def __len__(self):
        return len(self.ids)

    def split(self, text: str, normalize=None, split_special: bool = False, spans=()):
        """Yield (normalized_text, None, starts_input) for ordinary text and (None, id, False) per added token.

        split_special=True leaves special tokens as ordinary text (tokenizers' encode_special_tokens).
        `spans` are (start, end) ranges of `text` where no added token may match (literal text)."""
        raw = self._raw_plain if split_special else self._raw
        normalized = self._normalized_plain if split_special else self._normalized
        for start, piece, token_id in self._find(text, raw, spans, 0):
            if token_id is not None:
                yield None, token_id, False
                continue
            if normalize is not None:
                piece_spans = _normalized_spans(piece, start, spans, normalize) if spans and normalized.pattern else ()
                piece = normalize(piece)
            else:
                piece_spans = [(s - start, e - start) for s, e in spans] if spans else ()
            if not piece:
                continue
            if normalized.pattern is None:
                yield piece, None, start == 0
                continue
            for sub_start, sub_piece, sub_id in self._find(piece, normalized, piece_spans, 0):
                if sub_id is not None:
                    yield None, sub_id, False
                elif sub_piece:
                    yield sub_piece, None, start == 0 and sub_start == 0

    def _find(self, text: str, matcher: _Matcher, spans, _offset):
        """(start, text, None) gaps and (start, content, id) matches covering `text` in order."""
        if matcher.pattern is None or not text:
            if text:
                yield 0, text, None
            return
        search, ids, tokens = matcher.pattern.search, matcher.ids, self.tokens
        cursor = position = 0
        while True:
            match = search(text, position)
            if match is None:
                break
            start, stop = match.span()
            if spans and any(s < stop and start < e for s, e in spans):
                position = start + 1                      # literal text: the token does not exist here
                continue
            position = stop
            token_id = ids[match.group()]
            token = tokens[token_id]
            if token.single_word and ((start and _WORD_CHAR.match(text, start - 1))
                                      or (stop < len(text) and _WORD_CHAR.match(text, stop))):
                continue
            if token.lstrip:
                while start > cursor and _SPACE_CHAR.match(text, start - 1):
                    start -= 1
            if token.rstrip:
                stop = _SPACE_RUN.match(text, stop).end()
                position = stop
            if cursor < start:
                yield cursor, text[cursor:start], None
            yield start, match.group(), token_id
            cursor = stop
        if cursor < len(text):
            yield cursor, text[cursor:], None


def _normalized_spans(piece: str, piece_start: int, spans, normalize):
    """Literal spans of a raw piece, moved to the piece's normalized text by normalizing its prefixes."""
    out = []
    for start, end in spans:
        start, end = max(start - piece_start, 0), min(end - piece_start, len(piece))
        if start < end:
            out.append((len(normalize(piece[:start])) if start else 0, len(normalize(piece[:end]))))
    return out
