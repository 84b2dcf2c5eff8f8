"""A wall-clock and memory budget that really stops a render.

A thread timeout only stops waiting: the render goes on burning CPU. Instead one daemon thread watches
every guarded call and, when one runs out of time or the process' resident memory grows past its budget,
raises an exception INSIDE the rendering thread with PyThreadState_SetAsyncExc. CPython delivers it at the
next bytecode boundary, so a Jinja loop or macro stops within milliseconds; a single C call can't be
interrupted, which is why bounds.py prices every allocating operation before it runs.

The injected exception derives from BaseException, so no `except Exception` in Jinja's runtime swallows it.
It is fired at most once per call and cleared under a lock when the call ends, so it can never escape into
the caller's code after the guarded call has returned.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time

_POLL_SECONDS = 0.01
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.argtypes = (ctypes.c_ulong, ctypes.c_void_p)
_set_async_exc.restype = ctypes.c_int


class Interrupted(BaseException):
    """Injected into a guarded thread; never seen outside `Watchdog.run`."""


def resident_bytes() -> int | None:
    """The process' resident set size, or None where /proc is not available."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return None


class _Job:
    __slots__ = ("thread_id", "deadline", "memory_ceiling", "verdict", "done")

    def __init__(self, thread_id: int, deadline: float, memory_ceiling: int | None):
        self.thread_id, self.deadline, self.memory_ceiling = thread_id, deadline, memory_ceiling
        self.verdict: str | None = None   # "time" or "memory" once fired
        self.done = False


class Watchdog:
    """Runs callables under a time and memory budget (one shared daemon thread, started on first use)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._jobs: set[_Job] = set()
        self._thread: threading.Thread | None = None

    def run(self, function, seconds: float, max_memory_growth: int | None):
        """function() or raise TimeoutError / MemoryError when it overruns its budget."""
        baseline = resident_bytes() if max_memory_growth else None
        job = _Job(threading.get_ident(), time.monotonic() + seconds,
                   baseline + max_memory_growth if baseline is not None else None)
        with self._wake:
            self._start_locked()
            self._jobs.add(job)
            self._wake.notify()
        try:
            return function()
        except Interrupted:
            pass
        finally:
            self._finish(job)
        if job.verdict == "memory":
            raise MemoryError(f"the render grew resident memory by more than {max_memory_growth:,} bytes")
        raise TimeoutError(f"the render took longer than its budget of {seconds} s")

    def _finish(self, job: _Job) -> None:
        # The exception may arrive while we are here; retry until the job is closed and nothing is pending.
        while True:
            try:
                with self._lock:
                    job.done = True
                    self._jobs.discard(job)
                    if job.verdict is not None:
                        _set_async_exc(job.thread_id, None)
                return
            except Interrupted:
                continue

    def _start_locked(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._watch, name="tokworker-template-watchdog", daemon=True)
            self._thread.start()

    def _watch(self) -> None:
        with self._wake:
            while True:
                if not self._jobs:
                    self._wake.wait()
                    continue
                now = time.monotonic()
                next_deadline = min(job.deadline for job in self._jobs)
                self._wake.wait(max(0.0, min(_POLL_SECONDS, next_deadline - now)))
                now = time.monotonic()
                rss = resident_bytes() if any(j.memory_ceiling is not None for j in self._jobs) else None
                for job in self._jobs:
                    if job.done or job.verdict is not None:
                        continue
                    if now >= job.deadline:
                        job.verdict = "time"
                    elif rss is not None and job.memory_ceiling is not None and rss > job.memory_ceiling:
                        job.verdict = "memory"
                    else:
                        continue
                    _set_async_exc(job.thread_id, id(Interrupted))


WATCHDOG = Watchdog()
