"""Stop strings on streamed text.

A stop string can arrive split over several deltas ("</ans" + "wer>"), and the client must never see any
part of it. Two rules do it with work bounded by the delta and the longest stop, not by the text so far:

1. Only the held-back tail plus the new delta is searched: every earlier match was already found, and a
   match that ends in the delta can only start inside the held tail (rule 2 guarantees that).
2. The longest tail of the text that is a proper prefix of some stop string is held back until the next
   delta proves it is or is not a stop.

When several stops could match, the one that completes first (smallest end, then earliest start) wins:
that is where generation, checked token by token, would have stopped, so the answer does not depend on
how the text was split into deltas.

Most deltas cannot touch a stop at all: with nothing held, a delta holding none of the stops' first
characters is returned as it is. The tables behind these checks depend only on the stop strings, so
streams with the same stops share one (requests of a deployment tend to repeat theirs).
"""

from __future__ import annotations

_PLANS: dict[tuple, "_StopPlan"] = {}
_PLAN_LIMIT = 256  # distinct stop lists kept; the oldest is dropped beyond that


class _StopPlan:
    """What the checker needs to know about one list of stop strings, computed once."""

    __slots__ = ("stops", "firsts", "prefixes_by_end")

    def __init__(self, stops: tuple[str, ...]):
        self.stops = tuple(dict.fromkeys(s for s in stops if s))
        self.firsts = frozenset(s[0] for s in self.stops)
        # Every proper prefix of every stop (the tails worth holding back), filed by its last character,
        # longest first: a text's tail can only be one of those ending in the text's last character.
        prefixes = sorted({s[:k] for s in self.stops for k in range(1, len(s))}, key=len, reverse=True)
        by_end: dict[str, list[str]] = {}
        for prefix in prefixes:
            by_end.setdefault(prefix[-1], []).append(prefix)
        self.prefixes_by_end = {end: tuple(group) for end, group in by_end.items()}


def _plan(stops) -> _StopPlan:
    key = tuple(stops)
    plan = _PLANS.get(key)
    if plan is None:
        if len(_PLANS) >= _PLAN_LIMIT:
            del _PLANS[next(iter(_PLANS))]
        plan = _PLANS[key] = _StopPlan(key)
    return plan


class StopChecker:
    """`add(delta) -> str` returns the text that may be streamed now; `finish() -> str` releases the
    held tail when the stream ended without a stop. After a match `stopped` is True, `matched` is the stop
    string, the returned text ends just before it (or just after it with include_stop), and everything
    later is dropped."""

    __slots__ = ("_stops", "_firsts", "_prefixes_by_end", "_include", "_held", "stopped", "matched", "holding")

    def __init__(self, stops, include_stop: bool = False):
        if isinstance(stops, str):
            stops = [stops]
        for stop in stops:
            if type(stop) is not str:
                raise ValueError(f"stop strings must be str, not {type(stop).__name__}")
        plan = _plan(stops)
        self._stops, self._firsts, self._prefixes_by_end = plan.stops, plan.firsts, plan.prefixes_by_end
        self._include = include_stop
        self._held = ""
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
        held = self._held
        if held:
            text = held + delta
        elif self.stopped:
            return ""
        elif self._firsts.isdisjoint(delta):  # no stop can begin in this delta: nothing to find or hold
            return delta
        else:
            text = delta
        if can_stop:
            for stop in self._stops:
                if stop in text:  # a cheap filter: the exact rules (where a match may end) come next
                    found = self._earliest_match(text, len(held))
                    if found is not None:
                        end, start, stop = found
                        self.stopped, self.matched, self._held = True, stop, ""
                        self.holding = True
                        return text[:end] if self._include else text[:start]
                    break
        candidates = self._prefixes_by_end.get(text[-1])
        if candidates is not None:
            for prefix in candidates:  # longest first: the longest tail that could still become a stop
                if text.endswith(prefix):
                    self._held = prefix
                    self.holding = True
                    return text[:-len(prefix)]
        self._held = ""
        self.holding = False
        return text

    def finish(self) -> str:
        """The stream ended: the held tail was not a stop after all."""
        held, self._held = self._held, ""
        self.holding = self.stopped
        return "" if self.stopped else held

    def _earliest_match(self, text: str, old: int):
        """(end, start, stop) of the first stop to complete in text[old:], or None. A match must end
        after `old`: text before it was already searched (or could not stop)."""
        best = None
        for stop in self._stops:
            start = text.find(stop, max(0, old - len(stop) + 1))
            if start >= 0:
                candidate = (start + len(stop), start, stop)
                if best is None or candidate[:2] < best[:2]:
                    best = candidate
        return best
