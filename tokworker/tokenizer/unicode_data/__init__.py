"""The Unicode behaviour of `tokenizers` (Oniguruma classes, its normalization tables, its Rust character
predicates) and of `tiktoken` (Rust regex classes), as probed from those libraries by
tools/probe_unicode.py and shipped in tables.py; plus the code that reads it.

Sets of scalar values are "boundary lists": sorted [start, end, start, end, ...] with exclusive ends.
"""

from __future__ import annotations

import base64
import functools
import itertools
import json
import zlib

from . import tables


@functools.lru_cache(maxsize=1)
def data() -> dict:
    """The decoded tables (decoded once, on first use, so importing costs nothing)."""
    return json.loads(zlib.decompress(base64.b64decode("".join(tables.BLOB))))


def boundaries(deltas: list[int]) -> list[int]:
    """Stored delta encoding -> boundary list."""
    return list(itertools.accumulate(deltas))


@functools.lru_cache(maxsize=64)
def predicate(name: str) -> tuple[int, ...]:
    """A predicate's member set (whitespace, punctuation, numeric, control, bert_whitespace, chinese,
    strip_accents) as a boundary tuple."""
    return tuple(boundaries(data()["predicates"][name]))
