"""Work counted, not timed: a test that guards against a blow-up (quadratic or exponential work, a regex or
template bomb) counts the lines of Python the work runs, which is the same on every machine however loaded;
a clock on a shared 2-core CI box is not. Where the work is in another process, its CPU seconds (cpu_s) are
the next best thing: a loaded machine stretches its wall clock, hardly its CPU time. Speed itself is
measured in bench/. Where a test must see an answer come soon (a bystander served during an attack), it holds
the answer to RESPONSIVE_S, far above a healthy answer however loaded the machine and far below the bug's."""

from __future__ import annotations

import ctypes
import os
import sys
import threading

#: how long a bystander's request may take while an attack runs, or an answer due "at once": the bugs the
#: tests replay stalled one 4.7-16 s (or for ever); a healthy server answers in milliseconds, and a loaded
#: 2-core CI box stretches that to a few hundred at worst, never to this
RESPONSIVE_S = 3.0


class TooMuchWork(BaseException):
    """Raised inside the traced work once it passes its limit: a BaseException, so the work's own
    `except Exception` cannot swallow it, and the blow-up a test guards against ends at the limit."""


class _Unstick(BaseException):
    """Delivered to this very thread to clear the interpreter's async-exception flag (_unstick)."""


# a prototype of its own: ctypes.pythonapi's function object is shared with the watchdog, which sets its own
_set_async_exc = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.py_object)(
    ("PyThreadState_SetAsyncExc", ctypes.pythonapi))


def _unstick() -> None:
    """Clear a stuck eval breaker before tracing. The template watchdog withdraws an exception it fired too
    late with PyThreadState_SetAsyncExc(thread, NULL), which (CPython 3.11) raises the interpreter's
    async-exception flag that only a delivered exception lowers; traced code then re-runs the first
    instruction of every function it enters, for ever (a test suite hung 600 s in lines_run that way, after
    the sandbox tests). An exception delivered here, and caught, lowers the flag."""
    try:
        _set_async_exc(threading.get_ident(), _Unstick)
        for _ in range(1000):            # a loop's back edge checks the eval breaker: it lands here at last
            pass
    except _Unstick:
        pass


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
    _unstick()
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
