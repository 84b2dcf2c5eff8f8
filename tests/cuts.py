"""Cutting a sequence (text or ids) at arbitrary positions, as an engine's steps or a network's chunks cut it:
the streaming properties (tests/test_stop.py, test_reasoning.py, test_detokenizer.py, test_stream_state.py)
check that any cut gives what the whole gives."""

from __future__ import annotations

from typing import Iterable, Sequence, TypeVar

S = TypeVar("S", bound=Sequence)


def cut_at(seq: S, cuts: Iterable[int]) -> list[S]:
    """The pieces of `seq` cut at each of `cuts`, each taken modulo len(seq) + 1 (so hypothesis may draw any
    integers); a repeated or end position cuts nothing, and the pieces always join back to `seq`.

    >>> cut_at("abcdef", [2, 4, 4])
    ['ab', 'cd', 'ef']
    >>> cut_at([1, 2, 3], [9, 0])
    [[1], [2, 3]]
    """
    points = sorted({c % (len(seq) + 1) for c in cuts} | {0, len(seq)})
    return [seq[a:b] for a, b in zip(points, points[1:])]
