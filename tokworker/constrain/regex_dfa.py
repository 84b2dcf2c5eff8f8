"""Regex -> minimal DFA over UTF-8 bytes.

Tokens are byte strings and a token may end in the middle of a character, so the automaton a token walk
runs on must read bytes, not characters. Each code point set of the syntax tree becomes the UTF-8 byte
sequences that encode it (surrogates have no UTF-8 form and are left out), the tree becomes a Thompson NFA,
and subset construction over byte classes gives a DFA that is then trimmed (states that cannot reach an
accepting state all become the dead state 0) and minimized. Compiled DFAs are cached by pattern, within
_CACHE_BYTES.

Each step is priced before it runs, so a small hostile pattern (or the schema behind it: nested anyOf,
$ref fan-out) is refused in well under a second instead of using a request's whole budget: the pattern's
length (parsing is about a microsecond a character), the NFA's size from the syntax tree (repeats
multiply), and the subset construction's work (NFA states visited) as it goes.
"""

from __future__ import annotations

from collections import OrderedDict, deque

from tokworker.constrain.regex_syntax import ALT, CAT, SET, RegexError, parse

MAX_PATTERN_CHARS = 256 * 1024
MAX_NFA_STATES = 100_000
MAX_DFA_STATES = 50_000
MAX_DFA_WORK = 1_000_000    # NFA moves and closures visited by the subset construction (about 2 s at most)
_CACHE_BYTES = 64 * 1024 * 1024
DEAD = 0
_UTF8_LIMITS = (0x7F, 0x7FF, 0xFFFF, 0x10FFFF)


def utf8_sequences(lo: int, hi: int) -> list[list[tuple[int, int]]]:
    """The code points lo..hi as sequences of byte ranges: each sequence is a product of byte ranges, and
    together they encode exactly the non-surrogate code points of the range."""
    if lo <= 0xDFFF and hi >= 0xD800:
        return (utf8_sequences(lo, 0xD7FF) if lo < 0xD800 else []) + (
            utf8_sequences(0xE000, hi) if hi > 0xDFFF else [])
    for limit in _UTF8_LIMITS[:-1]:
        if lo <= limit < hi:
            return utf8_sequences(lo, limit) + utf8_sequences(limit + 1, hi)
    if hi < 0x80:
        return [[(lo, hi)]]
    length = next(n for n, limit in enumerate(_UTF8_LIMITS, 1) if hi <= limit)
    for i in range(1, length):
        mask = (1 << (6 * i)) - 1
        if lo & ~mask != hi & ~mask:
            if lo & mask:
                return utf8_sequences(lo, lo | mask) + utf8_sequences((lo | mask) + 1, hi)
            if hi & mask != mask:
                return utf8_sequences(lo, (hi & ~mask) - 1) + utf8_sequences(hi & ~mask, hi)
    first, last = chr(lo).encode(), chr(hi).encode()
    return [list(zip(first, last))]


class _Nfa:
    """Thompson NFA: per state a list of (byte_lo, byte_hi, target) edges and a list of epsilon targets."""

    def __init__(self):
        self.edges: list[list] = []
        self.eps: list[list] = []

    def state(self) -> int:
        self.edges.append([])
        self.eps.append([])
        return len(self.edges) - 1

    def build(self, node, entry: int) -> int:
        """Add `node` starting at `entry`; return its exit state."""
        kind = node[0]
        if kind == SET:
            exit_ = self.state()
            for lo, hi in node[1]:
                for sequence in utf8_sequences(lo, hi):
                    current = entry
                    for i, (blo, bhi) in enumerate(sequence):
                        target = exit_ if i == len(sequence) - 1 else self.state()
                        self.edges[current].append((blo, bhi, target))
                        current = target
            return exit_
        if kind == CAT:
            for item in node[1]:
                entry = self.build(item, entry)
            return entry
        if kind == ALT:
            exit_ = self.state()
            for option in node[1]:
                start = self.state()
                self.eps[entry].append(start)
                self.eps[self.build(option, start)].append(exit_)
            return exit_
        body, lo, hi = node[1], node[2], node[3]
        for _ in range(lo):
            entry = self.build(body, entry)
        if hi == -1:
            loop, exit_ = self.state(), self.state()
            self.eps[entry].append(loop)
            self.eps[loop].append(exit_)
            self.eps[self.build(body, loop)].append(loop)
            return exit_
        exit_ = self.state()
        for _ in range(hi - lo):
            self.eps[entry].append(exit_)
            entry = self.build(body, entry)
        self.eps[entry].append(exit_)
        return exit_


def nfa_size(node) -> int:
    """How many states _Nfa.build makes for `node`, counted from the tree (a repeat counts its body once)."""
    kind = node[0]
    if kind == SET:
        return 1 + sum(len(sequence) - 1 for lo, hi in node[1] for sequence in utf8_sequences(lo, hi))
    if kind == CAT:
        return sum(map(nfa_size, node[1]))
    if kind == ALT:
        return 1 + sum(1 + nfa_size(option) for option in node[1])
    body, lo, hi = nfa_size(node[1]), node[2], node[3]
    return lo * body + (2 + body if hi == -1 else 1 + (hi - lo) * body)


def _byte_classes(nfa: _Nfa) -> list[int]:
    """class index per byte: bytes no edge tells apart share a class."""
    cuts = {0, 256}
    for edges in nfa.edges:
        for lo, hi, _ in edges:
            cuts.add(lo)
            cuts.add(hi + 1)
    classes, index = [0] * 256, -1
    for byte in range(256):
        if byte in cuts:
            index += 1
        classes[byte] = index
    return classes


def _subset_construction(nfa: _Nfa, start: int, final: int, classes: list[int]):
    n_classes = classes[-1] + 1
    moves = []
    for edges in nfa.edges:
        by_class: dict[int, list[int]] = {}
        for lo, hi, target in edges:
            for c in range(classes[lo], classes[hi] + 1):
                by_class.setdefault(c, []).append(target)
        moves.append(by_class)
    eps = nfa.eps

    def closure(states):
        seen, stack = set(states), list(states)
        while stack:
            for t in eps[stack.pop()]:
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
        return frozenset(seen)

    closures: dict[frozenset, frozenset] = {}

    work = 0

    def closure_of(targets):
        nonlocal work
        key = frozenset(targets)
        found = closures.get(key)
        if found is None:
            found = closures[key] = closure(key)
            work += len(found)
        return found

    first = closure([start])
    index = {frozenset(): 0, first: 1}
    sets, table = [frozenset(), first], [[0] * n_classes, None]
    queue = deque([first])
    while queue:
        current = queue.popleft()
        if work > MAX_DFA_WORK:
            raise RegexError(f"regex too complex (its DFA takes more than {MAX_DFA_WORK:,} steps to build)")
        row = [0] * n_classes
        gathered: dict[int, set] = {}
        for s in current:
            work += len(moves[s])
            for c, targets in moves[s].items():
                gathered.setdefault(c, set()).update(targets)
        for c, targets in gathered.items():
            target = closure_of(targets)
            if target not in index:
                if len(sets) >= MAX_DFA_STATES:
                    raise RegexError(f"regex too complex (more than {MAX_DFA_STATES} DFA states)")
                index[target] = len(sets)
                sets.append(target)
                table.append(None)
                queue.append(target)
            row[c] = index[target]
        table[index[current]] = row
    accepting = [final in s for s in sets]
    return table, accepting


def _minimize(table, accepting):
    """Trim states that cannot reach acceptance into state 0, then merge equivalent states (Hopcroft).
    Returns (table, accepting) renumbered with 0 dead and 1 initial, the rest in breadth-first order."""
    n = len(table)
    reverse = [[] for _ in range(n)]
    for s, row in enumerate(table):
        for t in set(row):
            reverse[t].append(s)
    live = {s for s in range(n) if accepting[s]}
    stack = list(live)
    while stack:
        for p in reverse[stack.pop()]:
            if p not in live:
                live.add(p)
                stack.append(p)
    live.discard(0)
    block = _refine(table, [(1 + accepting[s]) if s in live else 0 for s in range(n)])
    order, seen = [], {0: 0}
    if block[1]:
        seen[block[1]] = 1
        order.append(1)
    for s in order:
        for t in table[s]:
            if block[t] not in seen:
                seen[block[t]] = len(seen)
                order.append(t)
    new_table = [[0] * len(table[0])] + [[seen[block[t]] for t in table[s]] for s in order]
    return new_table, [False] + [accepting[s] for s in order]


def _refine(table, initial: list[int]) -> list[int]:
    """Hopcroft's partition refinement on the live part (block 0, the dead states, is left as it is, and a
    transition into it counts as missing, as in Valmari's version for partial automata): the coarsest
    partition finer than `initial` in which states of a block go to the same block on every byte class."""
    n = len(table)
    predecessors: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for s, row in enumerate(table):
        if initial[s]:
            for c, t in enumerate(row):
                if initial[t]:
                    predecessors[t].append((c, s))
    numbering: dict[int, int] = {0: 0}
    block_of = [numbering.setdefault(b, len(numbering)) if b else 0 for b in initial]
    blocks: list[set[int]] = [set() for _ in numbering]
    for s, b in enumerate(block_of):
        if b:
            blocks[b].add(s)
    pending = list(range(1, len(blocks)))
    queued = set(pending)
    while pending:
        splitter = pending.pop()
        queued.discard(splitter)
        sources_by_class: dict[int, list[int]] = {}
        for t in list(blocks[splitter]):
            for c, s in predecessors[t]:
                sources_by_class.setdefault(c, []).append(s)
        for sources in sources_by_class.values():
            hit_by_block: dict[int, list[int]] = {}
            for s in sources:
                hit_by_block.setdefault(block_of[s], []).append(s)
            for b, hit in hit_by_block.items():
                if len(hit) == len(blocks[b]):
                    continue
                new = len(blocks)
                part = set(hit)
                blocks[b] -= part
                blocks.append(part)
                for s in hit:
                    block_of[s] = new
                chosen = new if b in queued or len(part) <= len(blocks[b]) else b
                if chosen not in queued:
                    pending.append(chosen)
                    queued.add(chosen)
    return block_of


class Dfa:
    """A minimal byte DFA. `rows[state][byte]` is the next state; state 0 is dead, state 1 initial
    (when the language is empty there is only the dead state and `initial` is 0)."""

    def __init__(self, pattern: str):
        if len(pattern) > MAX_PATTERN_CHARS:
            raise RegexError(f"regex of {len(pattern):,} characters is over the limit of {MAX_PATTERN_CHARS:,}")
        tree = parse(pattern)
        size = nfa_size(tree)
        if size >= MAX_NFA_STATES:
            raise RegexError(f"regex too large ({size:,} NFA states, over the limit of {MAX_NFA_STATES:,})")
        nfa = _Nfa()
        start = nfa.state()
        final = nfa.build(tree, start)
        classes = _byte_classes(nfa)
        table, accepting = _minimize(*_subset_construction(nfa, start, final, classes))
        self.pattern = pattern
        self.rows = [[row[c] for c in classes] for row in table]
        self.accepting = accepting
        self.initial = 1 if len(table) > 1 else DEAD

    @property
    def num_states(self) -> int:
        return len(self.rows)

    def walk(self, state: int, data: bytes) -> int:
        rows = self.rows
        for byte in data:
            state = rows[state][byte]
            if not state:
                return DEAD
        return state

    def fullmatch(self, data: bytes | str) -> bool:
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogatepass")
        return self.accepting[self.walk(self.initial, data)]

    def sample(self, rng, max_bytes: int = 200, stop_probability: float = 0.25) -> bytes:
        """A random string of the language: at each step a uniformly chosen next state, then a byte that
        leads there; once past max_bytes it heads for the nearest accepting state."""
        if self.initial == DEAD:
            raise RegexError("the regex matches nothing")
        distance = self._distance_to_accept()
        out, state = bytearray(), self.initial
        while True:
            targets: dict[int, list[int]] = {}
            for byte, t in enumerate(self.rows[state]):
                if t:
                    targets.setdefault(t, []).append(byte)
            if self.accepting[state] and (not targets or len(out) >= max_bytes or rng.random() < stop_probability):
                return bytes(out)
            if len(out) >= max_bytes:
                targets = {t: b for t, b in targets.items() if distance[t] < distance[state]}
            target = rng.choice(sorted(targets))
            out.append(rng.choice(targets[target]))
            state = target

    def _distance_to_accept(self) -> list[int]:
        n = len(self.rows)
        reverse = [[] for _ in range(n)]
        for s, row in enumerate(self.rows):
            for t in set(row):
                reverse[t].append(s)
        distance = [n] * n
        queue = deque(s for s in range(n) if self.accepting[s])
        for s in queue:
            distance[s] = 0
        while queue:
            s = queue.popleft()
            for p in reverse[s]:
                if distance[p] == n:
                    distance[p] = distance[s] + 1
                    queue.append(p)
        return distance


_CACHE: OrderedDict[str, Dfa] = OrderedDict()


def compile_dfa(pattern: str) -> Dfa:
    """The DFA of `pattern`, cached (a forced tool call reuses one pattern for every request) within
    _CACHE_BYTES, least recently used first out."""
    dfa = _CACHE.get(pattern)
    if dfa is not None:
        _CACHE.move_to_end(pattern)
        return dfa
    dfa = _CACHE[pattern] = Dfa(pattern)
    total = sum(map(_cost, _CACHE.values()))
    while total > _CACHE_BYTES and len(_CACHE) > 1:
        total -= _cost(_CACHE.popitem(last=False)[1])
    return dfa


def _cost(dfa: Dfa) -> int:
    """Bytes a DFA holds: a row of 256 references per state, and its pattern."""
    return 2100 * dfa.num_states + 2 * len(dfa.pattern)
