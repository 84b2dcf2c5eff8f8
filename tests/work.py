"""Work counted, not timed: a test that guards against a blow-up (quadratic or exponential work, a regex or
template bomb) counts the lines of Python the work runs, which is the same on every machine however loaded;
a clock on a shared 2-core CI box is not. Speed itself is measured in bench/."""

from __future__ import annotations

import sys


class TooMuchWork(BaseException):
    """Raised inside the traced work once it passes its limit: a BaseException, so the work's own
    `except Exception` cannot swallow it, and the blow-up a test guards against ends at the limit."""


def lines_run(work, limit: int | None = None) -> int:
    """How many lines of Python `work()` runs (in this thread; C code counts as the line that called it).
    With `limit`, the work is stopped once it passes `limit` lines and the count returned is limit + 1.

    >>> lines_run(lambda: sum(i for i in range(10))) > lines_run(lambda: sum(i for i in range(5)))
    True
    >>> lines_run(lambda: [i for i in range(10**9)], limit=1000)
    1001
    """
    count = 0

    def trace(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
            if limit is not None and count > limit:
                raise TooMuchWork
        return trace

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        work()
    except TooMuchWork:
        pass
    finally:
        sys.settrace(previous)
    return count
