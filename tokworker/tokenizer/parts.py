"""Encoding in parts: a text cut into runs that other workers encode apart, whose ids joined are exactly
those of one encode.

The pipeline cuts a text where nothing on one side changes the ids of the other: at each added token (each
piece between them is normalized and pre-tokenized alone) and between the pre-tokenizer's words (the model
merges within a word only). A run is a list of items, each encoded alone:
- an int: an added token's id, as it is;
- a [piece, at_start] pair: a normalized piece between added tokens, whole: its receiver pre-tokenizes it
  too, so a prompt of many messages is cut without the cutter pre-tokenizing anything;
- a str: one word of a piece longer than a run's share, which only then is pre-tokenized here, so that one
  long message can still be spread.
Runs hold about equal numbers of characters (an added token counts one).
"""

from __future__ import annotations

from .added_tokens import LiteralSpans


def parts_of(tokenizer, text: str, parts: int, spans=None, split_special_tokens: bool = False) -> list[list]:
    """At most `parts` runs of `text` (see the module's docstring); `spans` as encode_with_literal_spans'."""
    if not isinstance(parts, int) or isinstance(parts, bool) or parts < 1:
        raise ValueError(f"parts must be a positive int, not {parts!r}")
    checked = tokenizer._checked_spans(text, spans) if spans is not None else []
    literal = LiteralSpans(checked) if checked else None
    cut = list(tokenizer.added.split(text, tokenizer._normalize, split_special_tokens, literal,
                                     tokenizer._space_is_prefix))
    share = sum(1 if token_id is not None else len(piece) for piece, token_id, _ in cut) / parts
    items: list = []
    for piece, token_id, at_start in cut:
        if token_id is not None:
            items.append(token_id)
        elif len(piece) > share:
            items += tokenizer._words(piece, at_start)
        elif piece:
            items.append([piece, at_start])
    runs, run, filled = [], [], 0
    for item in items:
        run.append(item)
        kind = type(item)
        filled += 1 if kind is int else len(item) if kind is str else len(item[0])
        if filled >= share * (len(runs) + 1) and len(runs) < parts - 1:
            runs.append(run)
            run = []
    if run or not runs:
        runs.append(run)
    return runs


def run_ids(tokenizer, run) -> list[int]:
    """The ids of one run of parts_of."""
    ids: list[int] = []
    words: list[str] = []
    encode_words = tokenizer._encode_words
    for item in run:
        kind = type(item)
        if kind is str:
            words.append(item)
            continue
        if words:
            encode_words(words, ids)
            words = []
        if kind is int:
            ids.append(item)
        else:
            piece, at_start = item
            tokenizer._encode_normalized(piece, at_start, ids)
    if words:
        encode_words(words, ids)
    return ids
