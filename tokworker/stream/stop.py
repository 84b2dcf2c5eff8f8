"""Stop strings on streamed text.

A stop string can arrive split over several deltas ("</ans" + "wer>"), and the client must never see any
part of it. An Aho-Corasick automaton over the stop strings' characters does it in one pass over each new
character, whatever was seen before: its state is the longest tail of the text so far that begins some stop
string, so a stop is found the moment its last character arrives, and the text that could still become a
stop is exactly a tail of that state, which is all that is held back.

When several stops could match, the one that completes first (smallest end, then earliest start) wins:
that is where generation, checked token by token, would have stopped, so the answer does not depend on
how the text was split into deltas.

Nothing is built per prefix: the automaton's trie stores each stop's characters once (a run of nodes with
one child each is a stretch of one string, numbered in order), plus three integers a node. A request's stop
strings are capped at MAX_STOP_BYTES together, and the automata, shared by streams with the same stops
(requests of a deployment tend to repeat theirs), are kept within _PLANS_MAX_BYTES.

Most deltas cannot touch a stop at all: with nothing held, a delta holding none of the stops' first
characters is returned as it is.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict

MAX_STOP_BYTES = 64 * 1024          # UTF-8 bytes of one request's stop strings together
_PLANS_MAX_BYTES = 32 * 1024 * 1024
_PLANS: OrderedDict[tuple, "_StopPlan"] = OrderedDict()
_EXITS_KEPT, _EXITS_WALK = 1024, 16


class StopStringError(ValueError):
    """The stop strings can't be used: not text, or more than MAX_STOP_BYTES of them."""


class _StopPlan:
    """The automaton of one list of stop strings.

    Node 0 is the root; a node is the prefix of some stop spelled by the path to it. `chain[n]` is the
    character from n to n + 1 when n + 1 is its child (a sentinel otherwise), `branches[n]` its other
    children by character; `fail[n]` the longest proper suffix of n's text that is a node, `ends[n]` the
    length of the longest stop that is a suffix of n's text (0: none), and `hold[n]` the length of the
    longest suffix of n's text that is a proper prefix of a stop (what must be held back there)."""

    __slots__ = ("stops", "firsts", "chain", "branches", "fail", "ends", "hold", "tables", "cost", "_exits")

    def __init__(self, stops: tuple[str, ...]):
        self.stops = tuple(dict.fromkeys(s for s in stops if s))
        self.firsts = frozenset(s[0] for s in self.stops)
        used = set("".join(self.stops))             # at most MAX_STOP_BYTES characters: one is free up here
        sentinel = next(chr(code) for code in range(0x10FFFF, 0, -1) if chr(code) not in used)
        chain: list[str] = [sentinel]
        branches: dict[int, dict[str, int]] = {}
        terminal = {0: 0}
        for stop in self.stops:
            node = 0
            for at, char in enumerate(stop):
                child = node + 1 if chain[node] == char else branches.get(node, {}).get(char)
                if child is None:
                    node = self._grow(chain, branches, node, stop[at:])
                    break
                node = child
            terminal[node] = len(stop)
        self.chain, self.branches = "".join(chain), branches
        self._link(len(chain), terminal)
        # what add() reads, in one attribute
        self.tables = (self.chain, branches, branches.get(0, {}), self.fail, self.ends, self.hold)
        self._exits: dict[int, frozenset] = {}
        self.cost = (16 * len(self.chain) + 120 * sum(map(len, branches.values()))
                     + 200 * min(len(self.chain), _EXITS_KEPT) + 256)

    def exits(self, node: int) -> frozenset | None:
        """The characters that lead from `node` anywhere but the root: a delta holding none of them takes
        the automaton back to the root without a match. None where finding out would walk a long chain of
        failure links (stops like "aaaa...") or past _EXITS_KEPT nodes (the rest take the full walk)."""
        found = self._exits.get(node)
        if found is None and len(self._exits) < _EXITS_KEPT:
            chars, at = set(), node
            for _ in range(_EXITS_WALK):
                chars.update(char for char, _ in self._children(at))
                if not at:
                    break
                at = self.fail[at]
            else:
                return None
            found = self._exits[node] = frozenset(chars)
        return found

    @staticmethod
    def _grow(chain: list, branches: dict, node: int, rest: str) -> int:
        """Append nodes spelling `rest` below `node`; return the last one."""
        first = len(chain)
        if node and node == first - 1 and chain[node] == chain[0]:
            chain[node] = rest[0]                    # the newest node (not the root): its chain goes on
        else:
            branches.setdefault(node, {})[rest[0]] = first
        chain.extend(rest[1:])
        chain.append(chain[0])
        return len(chain) - 1

    def _children(self, node: int):
        if self.chain[node] != self.chain[0]:
            yield self.chain[node], node + 1
        yield from self.branches.get(node, {}).items()

    def _step(self, node: int, char: str):
        """The direct child of `node` by `char`, or None."""
        if self.chain[node] == char:
            return node + 1
        children = self.branches.get(node)
        return children.get(char) if children is not None else None

    def _link(self, count: int, terminal: dict[int, int]) -> None:
        """Failure links, match lengths and hold lengths, breadth first (a node's links are shallower)."""
        fail, ends, hold = array("i", bytes(4 * count)), array("i", bytes(4 * count)), array("i", bytes(4 * count))
        depth = array("i", bytes(4 * count))
        queue = [0]
        for node in queue:
            has_children = False
            for char, child in self._children(node):
                has_children = True
                depth[child] = depth[node] + 1
                link = 0
                if node:
                    link = fail[node]
                    while True:
                        found = self._step(link, char)
                        if found is not None:
                            link = found
                            break
                        if not link:
                            break
                        link = fail[link]
                fail[child] = link
                queue.append(child)
            ends[node] = terminal.get(node) or (ends[fail[node]] if node else 0)
            hold[node] = depth[node] if has_children else hold[fail[node]]
        self.fail, self.ends, self.hold = fail, ends, hold


def _plan(stops) -> _StopPlan:
    key = tuple(stops)
    plan = _PLANS.get(key)
    if plan is not None:
        _PLANS.move_to_end(key)
        return plan
    plan = _PLANS[key] = _StopPlan(key)
    total = sum(p.cost for p in _PLANS.values())
    while total > _PLANS_MAX_BYTES and len(_PLANS) > 1:
        total -= _PLANS.popitem(last=False)[1].cost
    return plan


def check_stops(stops) -> list[str]:
    """The stop strings as a list, refused with StopStringError when one is not text or together they are
    over MAX_STOP_BYTES (UTF-8)."""
    if isinstance(stops, str):
        stops = [stops]
    size = 0
    for stop in stops:
        if type(stop) is not str:
            raise StopStringError(f"stop strings must be str, not {type(stop).__name__}")
        size += len(stop) if stop.isascii() else len(stop.encode("utf-8", "surrogatepass"))
    if size > MAX_STOP_BYTES:
        raise StopStringError(f"the stop strings hold {size:,} bytes (UTF-8), over the limit of "
                              f"{MAX_STOP_BYTES:,} per request")
    return list(stops)


class StopChecker:
    """`add(delta) -> str` returns the text that may be streamed now; `finish() -> str` releases the
    held tail when the stream ended without a stop. After a match `stopped` is True, `matched` is the stop
    string, the returned text ends just before it (or just after it with include_stop), and everything
    later is dropped."""

    __slots__ = ("_plan", "_tables", "_firsts", "_include", "_node", "_held", "_exits", "stopped", "matched",
                 "holding")

    def __init__(self, stops, include_stop: bool = False):
        plan = _plan(check_stops(stops))
        self._plan, self._tables, self._firsts = plan, plan.tables, plan.firsts
        self._include = include_stop
        self._node = 0        # the automaton's state: the longest tail of the text that begins a stop
        self._held = ""
        self._exits: frozenset | None = None   # of the state, when it is known (see _StopPlan.exits)
        self.stopped = False
        self.matched: str | None = None
        # A tail is held back, or the checker has stopped: while False, a delta holding none of `firsts` is
        # returned unchanged by add() and changes nothing (a caller may skip the call).
        self.holding = False

    @property
    def firsts(self) -> frozenset:
        """The first characters of the stop strings (see `holding`)."""
        return self._firsts

    def add(self, delta: str, can_stop: bool = True) -> str:
        """Append `delta`. With can_stop=False (the first min_tokens tokens) a stop string completed in
        this delta does not count, but the tail is still held so that a stop beginning here and ending
        later is caught."""
        node = self._node
        if not delta:           # a token that shows nothing (a skipped special) must not release the tail
            return ""
        if not node:
            if self.stopped:
                return ""
            if self._firsts.isdisjoint(delta):  # no stop can begin in this delta: nothing to find or hold
                return delta
        elif self._exits is not None and self._exits.isdisjoint(delta):   # the held tail was nothing
            text, self._node, self._held, self.holding = self._held + delta, 0, "", False
            return text
        chain, branches, root, fail, ends, hold = self._tables
        for at, char in enumerate(delta, 1):
            if not node:
                node = root.get(char, 0)
                if not node:
                    continue
            else:
                while True:
                    if chain[node] == char:
                        node += 1
                        break
                    children = branches.get(node)
                    if children is not None:
                        child = children.get(char)
                        if child is not None:
                            node = child
                            break
                    node = fail[node]
                    if not node:
                        node = root.get(char, 0)
                        break
            if ends[node] and can_stop:
                text = self._held + delta[:at]
                end = len(text)
                self.stopped, self.holding, self._node, self._held = True, True, 0, ""
                self.matched = text[end - ends[node]:]
                return text if self._include else text[:end - ends[node]]
        text = self._held + delta if self._held else delta
        keep = hold[node]
        if keep:
            self._node, self._held, self._exits, self.holding = node, text[-keep:], self._plan.exits(node), True
            return text[:-keep]
        # no tail of this state can begin a stop: as good as the root (and a caller may skip what follows)
        self._node, self._held, self.holding = 0, "", False
        return text

    def finish(self) -> str:
        """The stream ended: the held tail was not a stop after all."""
        held, self._held, self._node = self._held, "", 0
        self.holding = self.stopped
        return "" if self.stopped else held
