"""The vocabulary as a byte trie in preorder, walked against a byte DFA once per DFA state.

Built once per tokenizer. Node i has a byte, a depth, `end[i]` (the index just past its subtree) and the
preorder position of its first token. A walk runs the DFA along the trie in one flat loop and skips a
subtree as soon as its prefix is dead.

Most of a 150k vocabulary sits inside JSON strings, where nearly every token is allowed and leads back to
the same state. To avoid visiting those nodes one by one, each node records what its subtree needs
(`need`): the ASCII bytes below it, one bit for "some non-ASCII byte below", and a bit no state ever loops
on when some token below does not end on a character boundary. A DFA state's `blocked` mask is the
complement of the bytes it loops on (bit 128 counting as looping when every multi-byte character leads
back to it). When `need & blocked` is zero, every token of the subtree ends in that same state, so the walk
takes the subtree as one preorder range of tokens instead of visiting it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from array import array

NONASCII_BIT = 1 << 128
NEVER_BIT = 1 << 129
_ALL_BITS = (1 << 130) - 1


def _utf8_steps() -> list[list[int]]:
    """Decoder states: 0 on a character boundary; 1-7 inside a character (how many continuation bytes are
    still due, and the restricted range of the next one after E0, ED, F0, F4). -1: not UTF-8."""
    table = [[-1] * 256 for _ in range(8)]
    for b in range(0x80):
        table[0][b] = 0
    for first, last, state in ((0xC2, 0xDF, 1), (0xE0, 0xE0, 3), (0xE1, 0xEC, 2), (0xED, 0xED, 4),
                               (0xEE, 0xEF, 2), (0xF0, 0xF0, 6), (0xF1, 0xF3, 5), (0xF4, 0xF4, 7)):
        for b in range(first, last + 1):
            table[0][b] = state
    for state, first, last, after in ((1, 0x80, 0xBF, 0), (2, 0x80, 0xBF, 1), (3, 0xA0, 0xBF, 1),
                                      (4, 0x80, 0x9F, 1), (5, 0x80, 0xBF, 2), (6, 0x90, 0xBF, 2),
                                      (7, 0x80, 0x8F, 2)):
        for b in range(first, last + 1):
            table[state][b] = after
    return table


class VocabTrie:
    """Build once per tokenizer: `VocabTrie(tokenizer.vocab_bytes())`. Empty entries (special tokens) are
    left out; `control_tokens` ({id: text bytes}) puts chosen special tokens in under their text."""

    def __init__(self, vocab_bytes: Sequence[bytes], control_tokens: Mapping[int, bytes] | None = None):
        spelled = list(vocab_bytes)
        for token_id, text in (control_tokens or {}).items():
            if not (isinstance(token_id, int) and 0 <= token_id < len(spelled)) or not isinstance(text, bytes) or not text:
                raise ValueError(f"control token {token_id!r}: needs an id in the vocabulary and non-empty bytes")
            spelled[token_id] = text
        self.vocab_size = len(spelled)
        self.token_bytes = spelled
        node_byte, node_depth, node_end, node_token_pos, parent = [], [], [], [], []
        token_order: list[int] = []
        self.duplicates: dict[int, int] = {}
        path: list[int] = []
        previous = b""
        for data, token_id in sorted((data, i) for i, data in enumerate(spelled) if data):
            if data == previous:
                first = node_token_pos[path[-1]]
                self.duplicates[first] = self.duplicates.get(first, 0) + 1
                token_order.append(token_id)
                continue
            common, limit = 0, min(len(data), len(previous))
            while common < limit and data[common] == previous[common]:
                common += 1
            size = len(node_byte)
            for node in path[common:]:
                node_end[node] = size
            del path[common:]
            added = len(data) - common
            parent.append(path[-1] if path else -1)
            parent.extend(range(size, size + added - 1))
            path.extend(range(size, size + added))
            node_byte.extend(data[common:])
            node_depth.extend(range(common, len(data)))
            node_end.extend([0] * added)
            node_token_pos.extend([-1] * added)
            node_token_pos[-1] = len(token_order)
            token_order.append(token_id)
            previous = data
        for node in path:
            node_end[node] = len(node_byte)
        self.node_byte, self.node_depth, self.node_end = node_byte, node_depth, node_end
        self.node_token_pos = node_token_pos
        self.token_order = token_order
        self.max_depth = max(node_depth, default=0) + 1
        self.tokens_before = self._tokens_before()
        self.need = self._subtree_needs(parent)
        # where each token id sits in token_order; ids not in the trie point at a sentinel slot past the end
        self.position_of = array("i", [len(token_order)]) * self.vocab_size
        for pos, token_id in enumerate(token_order):
            self.position_of[token_id] = pos
        self.absent_ids = [t for t in range(self.vocab_size) if self.position_of[t] == len(token_order)]

    @property
    def num_nodes(self) -> int:
        return len(self.node_byte)

    def _tokens_before(self) -> list[int]:
        """tokens_before[i]: how many tokens sit at nodes before node i in preorder (length num_nodes + 1),
        so node i's subtree holds token_order[tokens_before[i]:tokens_before[end[i]]]."""
        counts, total, positions = [], 0, self.node_token_pos
        extra = self.duplicates
        for pos in positions:
            counts.append(total)
            if pos >= 0:
                total += 1 + extra.get(pos, 0)
        counts.append(total)
        return counts

    def _subtree_needs(self, parent: list[int]) -> list[int]:
        """need[i] for every node, bottom-up. ok[i] is the set (bit mask) of UTF-8 decoder states from
        which node i's byte and everything below it decode to whole characters."""
        steps = _utf8_steps()
        memo: dict[int, int] = {}
        n = len(self.node_byte)
        below, child_ok = [0] * n, [0xFF] * n
        need = [NEVER_BIT] * n
        node_byte, node_end, token_pos = self.node_byte, self.node_end, self.node_token_pos
        for i in range(n - 1, -1, -1):
            byte, ok_below = node_byte[i], child_ok[i]
            key = byte << 9 | (token_pos[i] >= 0) << 8 | ok_below
            ok = memo.get(key)
            if ok is None:
                ok = 0
                for q in range(8):
                    after = steps[q][byte]
                    if after >= 0 and (token_pos[i] < 0 or after == 0) and ok_below >> after & 1:
                        ok |= 1 << q
                memo[key] = ok
            if node_end[i] > i + 1 and ok_below & 1:
                need[i] = below[i]
            p = parent[i]
            if p >= 0:
                child_ok[p] &= ok
                below[p] |= below[i] | (1 << byte if byte < 128 else NONASCII_BIT)
        return need

    def walk(self, rows: list[list[int]], blocked: list[int], start: int):
        """Run the DFA `rows` from `start` over the trie. Returns (positions, states, ranges, dead): the
        token at token_order[position] leads to the matching state; each (first, stop, state) range of
        token_order leads to `state` as a whole; the (first, stop) ranges in `dead` are not allowed."""
        node_byte, node_depth, node_end, need = self.node_byte, self.node_depth, self.node_end, self.need
        node_token_pos, tokens_before = self.node_token_pos, self.tokens_before
        states = [start] * (self.max_depth + 1)
        positions, next_states, ranges, dead = [], [], [], []
        add_position, add_state, add_range, add_dead = positions.append, next_states.append, ranges.append, dead.append
        i, n = 0, len(node_byte)
        while i < n:
            depth = node_depth[i]
            state = rows[states[depth]][node_byte[i]]
            if state:
                if not need[i] & blocked[state]:
                    end = node_end[i]
                    add_range((tokens_before[i], tokens_before[end], state))
                    i = end
                    continue
                pos = node_token_pos[i]
                if pos >= 0:
                    add_position(pos)
                    add_state(state)
                states[depth + 1] = state
                i += 1
            else:
                end = node_end[i]
                add_dead((tokens_before[i], tokens_before[end]))
                i = end
        return positions, next_states, ranges, dead


def blocked_masks(rows: list[list[int]]) -> list[int]:
    """Per DFA state, the complement of what it loops on (see the module docstring)."""
    masks = []
    for s, row in enumerate(rows):
        loops = 0
        for b in range(128):
            if row[b] == s:
                loops |= 1 << b
        if s and _loops_on_every_multibyte_char(rows, s):
            loops |= NONASCII_BIT
        masks.append(~loops & _ALL_BITS)
    return masks


def _loops_on_every_multibyte_char(rows, s) -> bool:
    """True when every 2-, 3- and 4-byte UTF-8 character takes state s back to s."""
    for lead_first, lead_last, continuations in (
            (0xC2, 0xDF, ((0x80, 0xBF),)),
            (0xE0, 0xE0, ((0xA0, 0xBF), (0x80, 0xBF))),
            (0xE1, 0xEC, ((0x80, 0xBF), (0x80, 0xBF))),
            (0xED, 0xED, ((0x80, 0x9F), (0x80, 0xBF))),
            (0xEE, 0xEF, ((0x80, 0xBF), (0x80, 0xBF))),
            (0xF0, 0xF0, ((0x90, 0xBF), (0x80, 0xBF), (0x80, 0xBF))),
            (0xF1, 0xF3, ((0x80, 0xBF), (0x80, 0xBF), (0x80, 0xBF))),
            (0xF4, 0xF4, ((0x80, 0x8F), (0x80, 0xBF), (0x80, 0xBF)))):
        frontier = {rows[s][b] for b in range(lead_first, lead_last + 1)}
        for first, last in continuations:
            if 0 in frontier:
                return False
            frontier = {rows[t][b] for t in frontier for b in range(first, last + 1)}
        if frontier != {s}:
            return False
    return True
