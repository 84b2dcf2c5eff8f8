"""Whole characters as BPE's starting symbols where that provably changes nothing.

A byte-level word of CJK text starts as three symbols per character and spends two merges per character
just rebuilding it. When a character's bytes merge, on their own, into one token T, and every pair one of
its edge symbols could form with a neighbour outside it ranks after the last of those merges, then in any
word the character becomes T before any merge touches its edges (its own pending merges always rank
lower). Starting from T then gives exactly the same result, with fewer merges in the word. Characters that
do not qualify keep their bytes.
"""

from __future__ import annotations

_TABLE_LIMIT = 100_000     # characters remembered; the table is cleared when full


class CharSymbols:
    """Starting symbols for non-ASCII byte-level words of one BPE model (built lazily, bounded)."""

    def __init__(self, model):
        self.model = model
        self.table: dict[str, tuple[int, ...]] = {}
        self._lowest_as_left: dict[int, int] | None = None
        self._lowest_as_right: dict[int, int] | None = None

    def symbols(self, word: str) -> list[int]:
        table, out = self.table, []
        for char in word:
            ids = table.get(char)
            if ids is None:
                ids = self._char(char)
            out += ids
        return out

    def _char(self, char: str) -> tuple[int, ...]:
        byte_ids = self.model.byte_ids
        ids = tuple(byte_ids[b] for b in char.encode("utf-8"))
        if len(ids) > 1 and self._lowest_as_left is None:
            self._index_pairs()
        if len(ids) > 1:
            ids = self._premerged(ids)
        if len(self.table) >= _TABLE_LIMIT:
            self.table.clear()
        self.table[char] = ids
        return ids

    def _index_pairs(self) -> None:
        """For every symbol, the lowest merge value it takes part in as the left and as the right element."""
        shift, mask = self.model.shift, self.model.id_mask
        as_left: dict[int, int] = {}
        as_right: dict[int, int] = {}
        for key, value in self.model.pairs.items():
            left, right = key >> shift, key & mask
            if value < as_left.get(left, value + 1):
                as_left[left] = value
            if value < as_right.get(right, value + 1):
                as_right[right] = value
        self._lowest_as_left, self._lowest_as_right = as_left, as_right

    def _premerged(self, ids: tuple[int, ...]) -> tuple[int, ...]:
        """(T,) if the character qualifies (see the module docstring), else its byte symbols unchanged."""
        get, shift, mask = self.model.pairs.get, self.model.shift, self.model.id_mask
        symbols = list(ids)
        left_edges, right_edges, highest = {symbols[0]}, {symbols[-1]}, -1
        while len(symbols) > 1:
            values = [get(a << shift | b) for a, b in zip(symbols, symbols[1:])]
            candidates = [v for v in values if v is not None]
            if not candidates:
                return ids
            best = min(candidates)
            i = values.index(best)
            highest = max(highest, best)
            symbols[i:i + 2] = [best & mask]
            left_edges.add(symbols[0])
            right_edges.add(symbols[-1])
        token = symbols[0]
        left_edges.discard(token)
        right_edges.discard(token)
        never = highest + 1
        if all(self._lowest_as_right.get(s, never) > highest for s in left_edges) and \
                all(self._lowest_as_left.get(s, never) > highest for s in right_edges):
            return (token,)
        return ids
