"""The Unicode behaviour of `tokenizers` (Oniguruma classes, its normalization tables, its Rust character
predicates) and of `tiktoken` (Rust regex classes), as probed from those libraries by
tools/probe_unicode.py and shipped as tables.zlib (zlib-compressed JSON); plus the code that reads it.

Sets of scalar values are "boundary lists": sorted [start, end, start, end, ...] with exclusive ends.
"""

from __future__ import annotations

import functools
import itertools
import json
import zlib

from pathlib import Path

TABLES = Path(__file__).with_name("tables.zlib")


@functools.lru_cache(maxsize=1)
def data() -> dict:
    """The decoded tables (decoded once, on first use, so importing costs nothing)."""
    return expand(json.loads(zlib.decompress(TABLES.read_bytes())))


def expand(stored: dict) -> dict:
    """Undo tools/probe_unicode.py's compact(): shared tiktoken entries, paired lowercase mappings."""
    ours, theirs = stored["flavors"]["tokenizers"], stored["flavors"]["tiktoken"]
    for section in ("atoms", "regex_diff", "regex_exprs", "aliases"):
        for key in theirs[section].pop("shared"):
            theirs[section][key] = ours[section][key]
    if theirs["folds"] == "shared":
        theirs["folds"] = ours["folds"]
    lowercase = stored["predicates"]["lowercase"]
    table, cp = dict(lowercase["multi"]), 0
    pairs = lowercase["single"]
    for delta, offset in zip(pairs[::2], pairs[1::2]):
        cp += delta
        table[str(cp)] = chr(cp + offset)
    stored["predicates"]["lowercase"] = table
    return stored


def boundaries(deltas: list[int]) -> list[int]:
    """Stored delta encoding -> boundary list."""
    return list(itertools.accumulate(deltas))


@functools.lru_cache(maxsize=64)
def predicate(name: str) -> tuple[int, ...]:
    """A predicate's member set (whitespace, punctuation, numeric, control, bert_whitespace, chinese,
    strip_accents) as a boundary tuple."""
    return tuple(boundaries(data()["predicates"][name]))
