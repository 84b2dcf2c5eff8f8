"""Added tokens: found in the text before anything else, exactly as `tokenizers`' AddedVocabulary finds them.

Tokens with normalized=False match the raw text; the text between them is normalized and then searched
for the normalized=True tokens (whose own content is normalized first). Matching is leftmost-longest;
single_word rejects a match touching a word character; lstrip/rstrip absorb the whitespace beside a match.

Ids follow `tokenizers`, not the JSON: a token whose content is in the model vocabulary takes that id, any
other is numbered after the model (from the model's entry count, or one past the highest added id).

Literal spans (what the template layer passes: the text it did not write itself) are ranges where no added
token may match, whitespace-only ones excepted (they are not control tokens, and match in any text): a
match overlapping one is dropped and the longest token at the same start that stops before the span is
tried instead, as if the overlapping token did not exist there. A zero-width span (p, p) forbids matches
across position p only. Spans are merged and bisected, so a message holding thousands of forged tokens
costs O(n log n), not matches x spans.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate

import regex

from . import unicode as _unicode

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
    """Leftmost-longest search over a set of literal strings, compiled when first used (the matchers for
    split_special_tokens=True seldom are). Literals need none of `regex`'s features: the standard `re`
    compiles a pattern of a few thousand tokens several times faster."""

    def __init__(self, entries: dict[str, int]):
        self.ids = entries

    @cached_property
    def pattern(self) -> re.Pattern | None:
        return re.compile(_trie_pattern(self.ids)) if self.ids else None


def _trie_pattern(contents) -> str:
    """One alternation per branching point of the strings' prefix trie. Branches start with distinct
    characters and "ends here" comes last, so the regex's first match is the longest one; and a few thousand
    tokens sharing a prefix ("<|reserved_special_token_") compile several times faster than a flat list."""
    root: dict = {}
    for content in contents:
        node = root
        for char in content:
            node = node.setdefault(char, {})
        node[""] = None
    return _branch(root)


def _branch(node: dict) -> str:
    parts = []
    for char, child in node.items():
        if not char:
            continue
        run = [char]
        while len(child) == 1 and "" not in child:          # a chain without branches: no group needed
            (char, child), = child.items()
            run.append(char)
        parts.append(re.escape("".join(run)) + _branch(child))
    if not parts:
        return ""
    if len(parts) == 1 and "" not in node:
        return parts[0]
    return "(?:" + "|".join(parts) + ("|)" if "" in node else ")")


class AddedVocabulary:
    """Content <-> id for added tokens, and the splitting of text around them."""

    def __init__(self, specs: list[dict], model_vocab: dict[str, int], normalize=None, keep_ids: bool = False,
                 longest_first: bool = False):
        """keep_ids=True takes each spec's "id" as given (tiktoken special tokens), not tokenizers' numbering.
        longest_first=True matches as llama.cpp does: each token in turn, longest first, takes its occurrences
        left to right in the text no longer token already took (for tokens without single_word/lstrip/rstrip)."""
        self.ids: dict[str, int] = {}              # content -> id
        self.tokens: dict[int, AddedToken] = {}    # id -> token (last definition wins, as in tokenizers)
        self.special_contents: set[str] = set()
        # contents any of whose definitions is normalized=True: tokenizers shows (and decodes) those in their
        # normalized form even when a later definition, the one that matches, is normalized=False
        self.shown_normalized: set[str] = set()
        model_size = len(model_vocab)
        for spec in specs:
            token = AddedToken.from_spec(spec)
            if token.normalized:
                self.shown_normalized.add(token.content)
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
        # the ones whose matching (last) definition is special: control tokens a template writes
        self._control_ids = frozenset(i for i, token in self.tokens.items() if token.special)
        # leftmost-longest finds the same matches unless a token's end can start another token
        self._longest_first = longest_first and _overlapping(self.ids)
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

    def split(self, text: str, normalize=None, split_special: bool = False, spans: LiteralSpans | None = None,
              space_is_prefix: bool = False):
        """Yield (normalized_text, None, starts_input) for ordinary text and (None, id, False) per added token.

        split_special=True leaves special tokens as ordinary text (tokenizers' encode_special_tokens).
        `spans` are the ranges of `text` where no added token may match (literal text). With
        `space_is_prefix` (a normalizer that writes SentencePiece's dummy prefix), one space right after a
        special token is not text at all: the space a template writes there ("[INST] " + content) stands
        for the prefix the training stack gave content encoded on its own, so it is dropped before the
        search for the next added token (an added " " does not match it, an lstrip does not reach it)."""
        raw = self._raw_plain if split_special else self._raw
        normalized = self._normalized_plain if split_special else self._normalized
        prefix_after = self._control_ids if space_is_prefix and not split_special else frozenset()
        for start, piece, token_id in self._find(text, raw, spans, prefix_after):
            if token_id is not None:
                yield None, token_id, False
                continue
            piece_spans = spans.within(start, start + len(piece)) if spans is not None else None
            if normalize is not None:
                normalized_piece = normalize(piece)
                if piece_spans is not None and normalized.pattern is not None:
                    piece_spans = _normalized_spans(piece, normalized_piece, piece_spans, normalize) \
                        if normalized.pattern.search(normalized_piece) else None
                piece = normalized_piece
            if not piece:
                continue
            if normalized.pattern is None:
                yield piece, None, start == 0
                continue
            for sub_start, sub_piece, sub_id in self._find(piece, normalized, piece_spans):
                if sub_id is not None:
                    yield None, sub_id, False
                elif sub_piece:
                    yield sub_piece, None, start == 0 and sub_start == 0

    def _find(self, text: str, matcher: _Matcher, spans: LiteralSpans | None, prefix_after=frozenset()):
        """(start, text, None) gaps and (start, content, id) matches covering `text` in order, except one
        space right after a match whose id is in `prefix_after`, which neither a gap nor a match covers
        unless another such match starts on it (a control token is never the prefix)."""
        if self._longest_first and matcher.pattern is not None:
            yield from _longest_first(text, matcher, spans)
            return
        if matcher.pattern is None or not text:
            if text:
                yield 0, text, None
            return
        search, match_at, ids, tokens = matcher.pattern.search, matcher.pattern.match, matcher.ids, self.tokens
        cursor = position = 0
        prefix = -1                  # where a space taken as the prefix is, until the next match is known
        while True:
            match = search(text, position)
            if match is None:
                break
            start, stop = match.span()
            if spans is not None and not match.group().isspace():
                blocked = spans.blocking(start, stop)
                if blocked is not None:                   # literal text: that token does not exist here
                    edge = blocked[0]
                    match = match_at(text, start, edge) if start < edge else None
                    if match is None:
                        position = start + 1
                        continue
                    stop = match.end()
            position = stop
            token_id = ids[match.group()]
            token = tokens[token_id]
            if token.single_word and ((start and _is_word_char(text[start - 1]))
                                      or (stop < len(text) and _is_word_char(text[stop]))):
                continue
            if prefix >= 0:
                if start == prefix and token_id not in prefix_after:    # that space is not text: search past it
                    cursor = position = prefix + 1
                    prefix = -1
                    continue
                if start > prefix:
                    cursor = prefix + 1
                prefix = -1
            # The next search starts at this match's own end, as tokenizers' does, however much whitespace
            # rstrip takes: a token inside that whitespace matches again. Its split overlaps this one unless it
            # lstrips, which starts it at the end of what was taken (an empty split, which yields no token).
            if token.lstrip:
                while start > cursor and _SPACE_CHAR.match(text, start - 1):
                    start -= 1
                start = max(start, cursor)
            if token.rstrip:
                stop = _SPACE_RUN.match(text, stop).end()
            if cursor < start:
                yield cursor, text[cursor:start], None
            if start < stop:
                yield start, match.group(), token_id
            cursor = stop
            if token_id in prefix_after and text.startswith(" ", stop):    # (after an rstrip, never a space)
                prefix = stop
        if prefix >= 0:
            cursor = prefix + 1
        if cursor < len(text):
            yield cursor, text[cursor:], None


_OVERLAP_CHECK_CHARS = 1 << 24      # the prefixes _overlapping may hold, in characters (its cost is quadratic)


def _overlapping(contents) -> bool:
    """Whether some token's proper suffix starts another token (a token overlapping only itself is found
    left to right either way). Past _OVERLAP_CHECK_CHARS (a hostile file's 300,000-character control token
    would need 45 GB) the answer is True unchecked: the longest-first order is right either way, only slower."""
    if sum(len(content) ** 2 for content in contents) > 2 * _OVERLAP_CHECK_CHARS:
        return True
    starts: dict[str, set[str]] = {}
    for content in contents:
        for length in range(1, len(content)):
            starts.setdefault(content[:length], set()).add(content)
    return any(starts.get(content[cut:], {content}) - {content} for content in contents for cut in range(1, len(content)))


def _longest_first(text: str, matcher: _Matcher, spans: LiteralSpans | None):
    """llama.cpp's order (longest token first, by UTF-8 length, then by id) as gaps and matches in order.
    Every occurrence of every token is a candidate: the tokens starting at a position are the prefixes of
    the longest one there that are tokens. A candidate overlapping literal text or a taken one is skipped."""
    search, ids = matcher.pattern.search, matcher.ids
    candidates, position = [], 0
    while (match := search(text, position)) is not None:
        start, longest = match.start(), match.group()
        for end in range(start + 1, match.end() + 1):
            content = longest[:end - start]
            if content in ids and (spans is None or spans.blocking(start, end) is None):
                candidates.append((-len(content.encode("utf-8")), ids[content], start, end))
        position = start + 1
    candidates.sort()
    starts, stops = [], []
    taken = {}
    for _, token_id, start, stop in candidates:
        i = bisect_right(starts, start)
        if (i and stops[i - 1] > start) or (i < len(starts) and starts[i] < stop):
            continue
        starts.insert(i, start)
        stops.insert(i, stop)
        taken[start] = token_id
    cursor = 0
    for start, stop in zip(starts, stops):
        if cursor < start:
            yield cursor, text[cursor:start], None
        yield start, text[start:stop], taken[start]
        cursor = stop
    if cursor < len(text):
        yield cursor, text[cursor:], None


def _is_word_char(ch: str) -> bool:
    """What tokenizers' single_word calls a word character (probed: alphanumeric in its tables, or "_")."""
    return ch == "_" or _unicode.is_alphanumeric(ch)


class LiteralSpans:
    """(start, end) ranges where no added token may match, merged into sorted disjoint ranges.

    A match [a, b) is blocked by a range (s, e) when a < e and s < b; for a zero-width range that says the
    match crosses position s. Overlapping or touching ranges block exactly what their union blocks."""

    def __init__(self, spans):
        starts, ends = [], []
        for start, end in sorted(spans):
            if ends and start <= ends[-1]:
                ends[-1] = max(ends[-1], end)
            else:
                starts.append(start)
                ends.append(end)
        self.starts, self.ends = starts, ends

    def blocking(self, start: int, stop: int) -> tuple[int, int] | None:
        """The range a match [start, stop) overlaps, if any (the only candidate is the first ending after start)."""
        i = bisect_right(self.ends, start)
        if i < len(self.starts) and self.starts[i] < stop:
            return self.starts[i], self.ends[i]
        return None

    def within(self, low: int, high: int) -> LiteralSpans | None:
        """The ranges that can block a match inside text[low:high], clipped and shifted to that text."""
        first, last = bisect_right(self.ends, low), bisect_left(self.starts, high)
        if first >= last:
            return None
        inside = LiteralSpans(())
        inside.starts = [max(s, low) - low for s in self.starts[first:last]]
        inside.ends = [min(e, high) - low for e in self.ends[first:last]]
        return inside


_MARKERS = [chr(code) for code in range(0xE000, 0xE100)]     # private-use: no normalizer touches them
_PREFIX_LIMIT = 32


def _normalized_spans(piece: str, normalized: str, spans: LiteralSpans, normalize) -> LiteralSpans:
    """Literal spans of a raw piece, moved onto its normalized text.

    A private-use marker is put at every span edge and the marked piece normalized once; where the markers
    come out in order and removing them leaves exactly `normalized`, their places are the edges. Otherwise
    (normalization joins characters across an edge: NFC composing onto a span's last character, Strip
    eating spaces beside one) each edge is placed by normalizing the piece up to it, and past
    _PREFIX_LIMIT edges only the outermost two are placed, making everything between them literal."""
    edges = sorted({*spans.starts, *spans.ends})
    marker = next((m for m in _MARKERS if m not in piece), None)
    if marker is not None:
        cuts = [0, *edges, len(piece)]
        parts = normalize(marker.join(piece[a:b] for a, b in zip(cuts, cuts[1:]))).split(marker)
        if len(parts) == len(edges) + 1 and "".join(parts) == normalized:
            place = dict(zip(edges, accumulate(map(len, parts[:-1]))))
            return _placed(spans, place)
    if len(edges) > _PREFIX_LIMIT:
        hull = LiteralSpans(())
        hull.starts, hull.ends = [spans.starts[0]], [spans.ends[-1]]
        spans, edges = hull, [spans.starts[0], spans.ends[-1]]
    place = {edge: len(normalize(piece[:edge])) if edge else 0 for edge in edges}
    return _placed(spans, place)


def _placed(spans: LiteralSpans, place: dict[int, int]) -> LiteralSpans:
    starts = list(map(place.__getitem__, spans.starts))
    return LiteralSpans(zip(starts, map(max, starts, map(place.__getitem__, spans.ends))))
