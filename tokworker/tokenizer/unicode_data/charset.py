"""Sets of code points as boundary lists, and their fastest exact spelling for the `regex` module.

Matching a class written as hundreds of explicit ranges is ~20x slower in `regex` than a property such as
\\p{L}, so a set is spelled as the `regex` module's own version of the reference expression, corrected by
the few code points where the two Unicode versions disagree (`[\\p{L}--[...]]`, V1 set syntax), and the
corrections are nested behind range guards so that ordinary characters fail them after one comparison.
"""

from __future__ import annotations

import array
import bisect
import functools

import regex

from . import boundaries, data

MAX_CODE = 0x110000
EMPTY: tuple[int, ...] = ()
EVERYTHING: tuple[int, ...] = (0, MAX_CODE)
_GUARD_FANOUT = 4
_MAX_CORRECTIONS = 48  # ranges; beyond this the set is spelled out explicitly


def _combine(a, b, keep) -> tuple[int, ...]:
    """Boundary list of {x : keep(x in a, x in b)}, for keep(False, False) == False."""
    points = sorted(set(a).union(b))
    right = bisect.bisect_right
    states = list(map(keep, [right(a, p) & 1 for p in points], [right(b, p) & 1 for p in points]))
    return tuple(p for p, now, before in zip(points, states, [0] + states) if now != before)


def union(a, b):
    if not a or not b:
        return tuple(a or b)
    return _combine(a, b, int.__or__)


def intersection(a, b):
    if not a or not b:
        return EMPTY
    return _combine(a, b, int.__and__)


def difference(a, b):
    if not a or not b:
        return tuple(a)
    return _combine(a, b, lambda x, y: x & (1 - y))


def symmetric_difference(a, b):
    return _combine(a, b, int.__xor__)


def complement(a):
    """Toggle membership at 0 and at the end of the code space."""
    body = list(a[1:]) if a[:1] == (0,) or a[:1] == [0] else [0, *a]
    if body[-1:] == [MAX_CODE]:
        body.pop()
    else:
        body.append(MAX_CODE)
    return tuple(body)


def of_char(cp: int) -> tuple[int, int]:
    return (cp, cp + 1)


def contains(bounds, cp: int) -> bool:
    return bisect.bisect_right(bounds, cp) % 2 == 1


def ranges(bounds):
    return list(zip(bounds[::2], bounds[1::2]))


def escape(cp: int) -> str:
    """One code point for a `regex` pattern, inside or outside a set (V1 needs '-', '&', '~', '|' escaped)."""
    if cp < 0x80 and chr(cp).isalnum():
        return chr(cp)
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}" if cp < 0x10000 else f"\\U{cp:08x}"


def _range_text(start: int, end: int) -> str:
    last = end - 1
    if last == start:
        return escape(start)
    if last == start + 1:
        return escape(start) + escape(last)
    return f"{escape(start)}-{escape(last)}"


def explicit(bounds) -> str:
    """A V1 set matching exactly `bounds`: ranges behind nested range guards (a few comparisons per char)."""
    pairs = ranges(bounds)
    if not pairs:
        return "[^\\x00-\\U0010ffff]"
    return _guarded(pairs)


def _guarded(pairs) -> str:
    if len(pairs) <= _GUARD_FANOUT:
        return "[" + "".join(_range_text(a, b) for a, b in pairs) + "]"
    size = -(-len(pairs) // _GUARD_FANOUT)
    parts = [pairs[k:k + size] for k in range(0, len(pairs), size)]
    inner = "".join(f"[{_range_text(p[0][0], p[-1][1])}&&{_guarded(p)}]" if len(p) > 1 else _guarded(p)
                    for p in parts)
    return f"[{inner}]"


def spell(wanted, regex_set, expression: str | None) -> str:
    """A V1 set for `wanted`, given a `regex` set expression whose members are `regex_set`."""
    if expression is None or regex_set is None:
        return explicit(wanted)
    extra = difference(regex_set, wanted)
    missing = difference(wanted, regex_set)
    if len(extra) + len(missing) > 2 * _MAX_CORRECTIONS:
        return explicit(wanted)
    spelled = expression
    if extra:
        spelled = f"[{spelled}--{explicit(extra)}]"
    if missing:
        spelled = f"[{spelled}{explicit(missing)}]"
    return spelled


class CharSet:
    """A set being built: the reference's members, and the same set as the `regex` module reads
    `expression` (None when there is no such expression and the set must be spelled out)."""

    __slots__ = ("wanted", "regex_set", "expression")

    def __init__(self, wanted, regex_set=None, expression=None):
        self.wanted, self.regex_set, self.expression = wanted, regex_set, expression

    @classmethod
    def literal(cls, bounds):
        return cls(bounds, bounds, explicit(bounds))

    def negated(self) -> CharSet:
        if self.expression is None:
            return CharSet(complement(self.wanted))
        return CharSet(complement(self.wanted), complement(self.regex_set), f"[^{self.expression}]")

    def spell(self) -> str:
        return spell(self.wanted, self.regex_set, self.expression)


def set_union(items: list[CharSet]) -> CharSet:
    wanted = EMPTY
    for item in items:
        wanted = union(wanted, item.wanted)
    if any(item.expression is None for item in items):
        return CharSet(wanted)
    regex_set = EMPTY
    for item in items:
        regex_set = union(regex_set, item.regex_set)
    return CharSet(wanted, regex_set, "[" + "".join(item.expression for item in items) + "]")


def set_intersection(left: CharSet, right: CharSet) -> CharSet:
    wanted = intersection(left.wanted, right.wanted)
    if left.expression is None or right.expression is None:
        return CharSet(wanted)
    return CharSet(wanted, intersection(left.regex_set, right.regex_set),
                f"[{left.expression}&&{right.expression}]")


class Atoms:
    """The probed classes of one flavor ("tokenizers" or "tiktoken"): name -> members, and the `regex`
    module's members for the matching `regex` expression (shipped when `regex` is the probed version,
    measured otherwise)."""

    def __init__(self, flavor: str):
        self.flavor = flavor
        self._tables = data()["flavors"][flavor]
        self.aliases = {_loose(k): v for k, v in self._tables["aliases"].items()}
        self.names = {_loose(k[3:]): k for k in self._tables["atoms"] if k[:3] in ("gc:", "sc:")}
        self._same_regex = regex.__version__ == data()["probed_with"]["regex"]

    def lookup(self, name: str) -> str | None:
        """The atom for a \\p{name}: general category or script, by any alias, matched loosely."""
        key = _loose(name)
        return self.names.get(key) or self.aliases.get(key)

    def has(self, atom: str) -> bool:
        return atom in self._tables["atoms"]

    @functools.lru_cache(maxsize=512)
    def members(self, atom: str) -> tuple[int, ...]:
        return tuple(boundaries(self._tables["atoms"][atom]))

    def regex_expression(self, atom: str) -> str | None:
        return self._tables["regex_exprs"].get(atom)

    @functools.lru_cache(maxsize=512)
    def regex_members(self, atom: str) -> tuple[int, ...] | None:
        expression = self.regex_expression(atom)
        if expression is None:
            return None
        if self._same_regex:
            return symmetric_difference(self.members(atom), tuple(boundaries(self._tables["regex_diff"][atom])))
        return measure_regex(expression)

    @functools.cached_property
    def orbits(self) -> dict[int, tuple[int, ...]]:
        """Code point -> every code point the flavor's (?i) matching treats as the same letter."""
        return {cp: tuple(orbit) for orbit in self._tables["folds"]["orbits"] for cp in orbit}

    @functools.cached_property
    def multi_folds(self) -> dict[int, str]:
        return {cp: folded for cp, folded in self._tables["folds"]["multi"]}

    def fold_closure(self, bounds) -> tuple[int, ...]:
        """`bounds` plus every case-fold partner of its members."""
        partners = sorted({p for cp, orbit in self.orbits.items() if contains(bounds, cp) for p in orbit})
        added: list[int] = []
        for cp in partners:
            if added and added[-1] == cp:
                added[-1] = cp + 1
            else:
                added += [cp, cp + 1]
        return union(bounds, added)


@functools.lru_cache(maxsize=128)
def measure_regex(expression: str) -> tuple[int, ...]:
    """The members of a `regex` set expression, by matching every scalar value (a few tens of ms)."""
    compiled = regex.compile(f"(?V1){expression}+")
    out: list[int] = []
    for match in compiled.finditer(_all_scalars()):
        start, end = match.span()
        pieces = [(start, 0xD800), (0xD800, end)] if start < 0xD800 < end else [(start, end)]
        for a, b in pieces:  # the surrogate gap splits a run of positions
            first, last = _scalar_at(a), _scalar_at(b - 1) + 1
            if out and out[-1] == first:
                out[-1] = last
            else:
                out += [first, last]
    return tuple(out)


@functools.lru_cache(maxsize=1)
def _all_scalars() -> str:
    codes = array.array("I", range(0xD800))
    codes.extend(range(0xE000, MAX_CODE))
    return codes.tobytes().decode("utf-32-le")


def _scalar_at(position: int) -> int:
    return position if position < 0xD800 else position + 0x800


def _loose(name: str) -> str:
    return "".join(c for c in name.upper() if c not in " _-")
