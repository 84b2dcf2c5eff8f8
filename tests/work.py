"""Work counted, not timed: a test that guards against a blow-up (quadratic or exponential work, a regex or
template bomb) counts the lines of Python the work runs, which is the same on every machine however loaded;
a clock on a shared 2-core CI box is not. Where the work is in another process, its CPU seconds (cpu_s) are
the next best thing: a loaded machine stretches its wall clock, hardly its CPU time. Speed itself is
measured in bench/. Where a test must see an answer come soon (a bystander served during an attack), it holds
the answer to RESPONSIVE_S, far above a healthy answer however loaded the machine and far below the bug's."""

from __future__ import annotations

import os
import sys

#: how long a bystander's request may take while an attack runs, or an answer due "at once": the bugs the
#: tests replay stalled one 4.7-16 s (or for ever); a healthy server answers in milliseconds, and a loaded
#: 2-core CI box stretches that to a few hundred at worst, never to this
RESPONSIVE_S = 3.0


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


def cpu_s(pid: int) -> float:
    """A process's CPU seconds so far (user + system, from /proc/PID/stat): what it did, which waiting for
    a core on a shared machine does not add to as it adds to the wall clock."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
