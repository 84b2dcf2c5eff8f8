"""Text a template writes itself, told apart from the text it was given.

No added token in a prompt may come from caller text, and the check is made on the rendered prompt: every
added-token match must lie in text the template wrote itself. Which characters those are is tracked while
rendering: every string literal of a compiled template that can reach the output (its literal text, the
string literals of its expressions: codegen.py) is an `Owned` string, and so is each special token the
tokenizer passes (bos_token, ...).
Concatenation (`+`, `~`, joins, macro and block bodies) keeps track of which ranges of its result are owned;
every other operation gives plain text. Anything built from caller text is therefore never owned, whatever
the template does to it: slices, rewrites, deletions (`<|im_e/thinknd|>` minus `/think`), case changes
(`ﬆ|upper` is `ST`), wrapping a tool-schema key `|im_start|` in `<` and `>`. A template that builds a token
of its own through an operation not tracked here loses nothing but the token (encoded as text): the
fixture templates write every one of theirs as tracked text (tests/test_forged_tokens.py).

    >>> (owned("<|im_start|>") + "user" + owned("\\n"))._spans
    ((0, 12), (16, 17))
    >>> joined([owned("<s>"), "hi", "[", owned("INST"), "]"])._spans
    ((0, 3), (6, 10))
    >>> stripped(owned(" <|im_end|>") + " \\n", "strip")._spans
    ((0, 10),)
"""

from __future__ import annotations


class Owned(str):
    """A string and `_spans`: the sorted, disjoint (start, end) ranges of the characters the template
    wrote itself (an underscore name: no template can read or set it). Built any other way
    (`Owned(text)`), it owns nothing."""

    _spans: tuple = ()

    def __str__(self):                  # Jinja prints `{{ value }}` as str(value): keep what is known
        return self

    def __add__(self, other):
        result = Owned(str.__add__(self, other))
        result._spans = _shifted(self._spans, other._spans, len(self)) if type(other) is Owned else self._spans
        return result

    def __radd__(self, other):
        if not isinstance(other, str):
            return NotImplemented
        result = Owned(str.__add__(other, self))
        result._spans = _shifted(spans_of(other), self._spans, len(other))
        return result


def owned(text: str) -> str:
    """`text` as the template's own."""
    if not text:
        return text
    result = Owned(text)
    result._spans = ((0, len(text)),)
    return result


def spans_of(text) -> tuple:
    return text._spans if type(text) is Owned else ()


def _shifted(first: tuple, second: tuple, offset: int) -> tuple:
    """`first`, then `second` moved by `offset`, ranges that touch at the seam joined."""
    if not second:
        return first
    moved = tuple([(start + offset, end + offset) for start, end in second])
    if first and first[-1][1] == offset and moved[0][0] == offset:
        return first[:-1] + ((first[-1][0], moved[0][1]),) + moved[1:]
    return first + moved


def _with_spans(text: str, spans: tuple) -> str:
    if not spans:
        return text
    result = Owned(text)
    result._spans = spans
    return result


def joined(parts, separator: str = "") -> str:
    """separator.join(parts), keeping the owned ranges (plain text when none is owned)."""
    if type(separator) is not Owned:
        for part in parts:
            if type(part) is Owned:
                break
        else:
            return separator.join(parts)
    spans: tuple = ()
    at, between = 0, len(separator)
    for index, part in enumerate(parts):
        if index and between:
            spans = _shifted(spans, spans_of(separator), at)
            at += between
        spans = _shifted(spans, spans_of(part), at)
        at += len(part)
    return _with_spans(str(separator).join(parts), spans)


def stripped(text: str, method: str, chars=None) -> str:
    """text.strip/lstrip/rstrip(chars), keeping the owned ranges of what is left."""
    result = getattr(text, method)(chars)
    if type(text) is not Owned or not result:
        return result
    start = 0 if method == "rstrip" else len(text) - len(str.lstrip(text, chars))
    end = start + len(result)
    return _with_spans(result, tuple((max(a, start) - start, min(b, end) - start)
                                     for a, b in text._spans if a < end and start < b))
