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
_QUIET_POLLS = 100           # keep polling this long (1 s) after the last job before sleeping
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.argtypes = (ctypes.c_ulong, ctypes.c_void_p)
_set_async_exc.restype = ctypes.c_int


class Interrupted(BaseException):
    """Injected into a guarded thread; never seen outside `Watchdog.run`."""


_statm = {"pid": None, "fd": None}


def resident_bytes() -> int | None:
    """The process' resident set size, or None where /proc is not available. The file stays open (a pread
    costs a few microseconds, an open 50); it is reopened after a fork, since the inherited descriptor would
    still describe the parent."""
    try:
        if _statm["pid"] != os.getpid():
            _statm["fd"] = os.open("/proc/self/statm", os.O_RDONLY)
            _statm["pid"] = os.getpid()
        return int(os.pread(_statm["fd"], 128, 0).split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return None


class _Job:
    __slots__ = ("thread_id", "deadline", "memory_growth", "memory_ceiling", "verdict", "done")

    def __init__(self, thread_id: int, deadline: float, memory_growth: int | None):
        self.thread_id, self.deadline, self.memory_growth = thread_id, deadline, memory_growth
        self.memory_ceiling: int | None = None   # set by the watchdog at its first look at the job
        self.verdict: str | None = None          # "time" or "memory" once fired
        self.done = False


class Watchdog:
    """Runs callables under a time and memory budget (one shared daemon thread, started on first use)."""

    def __init__(self):
        self._reset()
        if hasattr(os, "register_at_fork"):
            # a forked worker gets no watchdog thread and maybe a lock held by it at the fork: start afresh
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._jobs: set[_Job] = set()
        self._thread: threading.Thread | None = None
        self._idle = True          # waiting with no timeout: a new job must wake it

    def run(self, function, seconds: float, max_memory_growth: int | None):
        """function() or raise TimeoutError / MemoryError when it overruns its budget.

        Costs a lock round trip: the watchdog, once busy, polls every 10 ms for a second after its last job,
        so a steady stream of renders never has to wake it, and the memory baseline is read by the watchdog
        at its first poll (a render shorter than that never pays for reading it)."""
        job = _Job(threading.get_ident(), time.monotonic() + seconds, max_memory_growth or None)
        with self._wake:
            self._start_locked()
            self._jobs.add(job)
            if self._idle:
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
        quiet_polls = 0
        with self._wake:
            while True:
                if not self._jobs:
                    quiet_polls += 1
                    if quiet_polls > _QUIET_POLLS:
                        self._idle = True
                        self._wake.wait()
                        self._idle = False
                    else:
                        self._wake.wait(_POLL_SECONDS)
                    continue
                quiet_polls = 0
                next_deadline = min(job.deadline for job in self._jobs)
                self._wake.wait(max(0.0, min(_POLL_SECONDS, next_deadline - time.monotonic())))
                now = time.monotonic()
                rss = resident_bytes() if any(j.memory_growth for j in self._jobs) else None
                for job in self._jobs:
                    if job.done or job.verdict is not None:
                        continue
                    if job.memory_growth and job.memory_ceiling is None and rss is not None:
                        job.memory_ceiling = rss + job.memory_growth
                    if now >= job.deadline:
                        job.verdict = "time"
                    elif job.memory_ceiling is not None and rss is not None and rss > job.memory_ceiling:
                        job.verdict = "memory"
                    else:
                        continue
                    _set_async_exc(job.thread_id, id(Interrupted))


WATCHDOG = Watchdog()
