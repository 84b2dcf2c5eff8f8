"""Whole characters as BPE's starting symbols where that provably changes nothing.

A byte-level word of CJK text starts as three symbols per character and spends two merges per character
just rebuilding it. Suppose a character's bytes merge, on their own, into one token T, and every pair that
one of its edge symbols could form with the symbol beside it ranks after the last of those merges. Then in
any word the character becomes T before any merge touches its edges (one of its own pending merges always
ranks lower), so starting from T gives exactly the same result with fewer merges.

"Could form" is judged by what can stand beside the character: nothing at a word's edge; a symbol ending
(or starting) with a non-ASCII byte next to a non-ASCII character; anything next to an ASCII one. So each
character keeps two verdicts per side. Characters that do not qualify keep their bytes.

A word that starts with an ASCII character and then a non-ASCII one (" слово", "(日本") gets the same
treatment for those two characters as one unit: nothing stands to their left, and in byte-level
vocabularies the space merges with a lead byte before that byte's own character is whole, so the unit is
what usually qualifies where the character alone does not.
"""

from __future__ import annotations

from itertools import compress, repeat
from operator import and_, itemgetter, rshift

from .. import precomputed

_TABLE_LIMIT = 100_000     # characters remembered; the table is cleared when full
_NEVER = 1 << 62


class CharSymbols:
    """Starting symbols for non-ASCII byte-level words of one BPE model (built lazily, bounded)."""

    def __init__(self, model, byte_symbols: list[str]):
        self.model = model
        self._byte_of = {symbol: byte for byte, symbol in enumerate(byte_symbols)}
        self.table: dict[str, tuple] = {}
        self._lowest: tuple[dict, dict, dict, dict] | None = None

    def symbols(self, word: str) -> list[int]:
        table, out, last, first = self.table, [], len(word) - 1, 0
        if last and word[0] < "\x80" <= word[1]:
            unit = word[:2]
            ids, token, _, _, right_any, right_wide = table.get(unit) or self._entry(unit)
            if token is not None and (last == 1 or (right_wide if word[2] >= "\x80" else right_any)):
                out.append(token)
                first = 2
        entries = [table.get(char) or self._entry(char) for char in word[first:]]
        for i, (ids, token, left_any, left_wide, right_any, right_wide) in enumerate(entries, first):
            if token is not None and (i == 0 or (left_wide if word[i - 1] >= "\x80" else left_any)) and \
                    (i == last or (right_wide if word[i + 1] >= "\x80" else right_any)):
                out.append(token)
            else:
                out += ids
        return out

    def _entry(self, chars: str) -> tuple:
        """A character's entry, or a word-initial unit's (whose left verdicts go unused: nothing is there)."""
        byte_ids = self.model.byte_ids
        ids = tuple(byte_ids[b] for b in chars.encode("utf-8"))
        entry = (ids, None, False, False, False, False)
        if len(ids) > 1:
            entry = self._premerged(ids) or entry
        if len(self.table) >= _TABLE_LIMIT:
            self.table.clear()
        self.table[chars] = entry
        return entry

    def _index_pairs(self) -> tuple[dict, dict, dict, dict]:
        """Per symbol, the lowest merge value it takes part in as the right element (after any symbol, and
        after one ending with a non-ASCII byte) and as the left element (before any, before non-ASCII).
        Built with C-level maps over the pairs in descending value, so each dict keeps the lowest."""
        model, byte_of = self.model, self._byte_of
        shift, mask = model.shift, model.id_mask
        wide_first, wide_last = [False] * (mask + 1), [False] * (mask + 1)
        for token, token_id in model.vocab.items():
            if token:                     # an empty token (Whisper's vocabularies hold one) borders nothing
                wide_first[token_id] = byte_of.get(token[0], 0) >= 0x80
                wide_last[token_id] = byte_of.get(token[-1], 0) >= 0x80
        ordered = sorted(model.pairs.items(), key=itemgetter(1), reverse=True)
        keys, values = list(map(itemgetter(0), ordered)), list(map(itemgetter(1), ordered))
        lefts = list(map(rshift, keys, repeat(shift)))
        rights = list(map(and_, keys, repeat(mask)))
        after_wide = list(map(wide_last.__getitem__, lefts))
        before_wide = list(map(wide_first.__getitem__, rights))
        return (dict(zip(rights, values)), dict(zip(compress(rights, after_wide), compress(values, after_wide))),
                dict(zip(lefts, values)), dict(zip(compress(lefts, before_wide), compress(values, before_wide))))

    def _premerged(self, ids: tuple[int, ...]) -> tuple | None:
        """(ids, T, verdicts...) when the bytes merge alone into one token T; None otherwise."""
        get, shift, mask = self.model.pairs.get, self.model.shift, self.model.id_mask
        symbols = list(ids)
        left_edges, right_edges, highest = {symbols[0]}, {symbols[-1]}, -1
        while len(symbols) > 1:
            values = [get(a << shift | b, _NEVER) for a, b in zip(symbols, symbols[1:])]
            best = min(values)
            if best == _NEVER:
                return None
            i = values.index(best)
            highest = max(highest, best)
            symbols[i:i + 2] = [best & mask]
            left_edges.add(symbols[0])
            right_edges.add(symbols[-1])
        token = symbols[0]
        left_edges.discard(token)
        right_edges.discard(token)
        if self._lowest is None:
            key = self.model.cache_key
            self._lowest = precomputed.int_tables(f"{key}-chars", self._index_pairs, 4) if key \
                else self._index_pairs()
        right_any, right_wide, left_any, left_wide = self._lowest

        def clear(lowest: dict, edges: set) -> bool:
            return all(lowest.get(symbol, _NEVER) > highest for symbol in edges)

        return (ids, token, clear(right_any, left_edges), clear(right_wide, left_edges),
                clear(left_any, right_edges), clear(left_wide, right_edges))
