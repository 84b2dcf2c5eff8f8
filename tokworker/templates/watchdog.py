"""A CPU-time and memory budget that really stops a render (or any guarded call).

The budget counts the guarded thread's own CPU time (its clock from time.pthread_getcpuclockid), not the
wall clock: on a busy host a render waits for a core, and waiting must cost latency, never a refusal (with
four CPU hogs beside a renderer at low priority, 26 of 35 real templates used to time out on their first
compile against a 1 s wall budget). A much larger wall-clock ceiling stays as a backstop for a thread
that blocks without using CPU.

A thread timeout only stops waiting: the render goes on burning CPU. Instead one daemon thread watches
every guarded call and, when one runs out of CPU time, passes its wall ceiling, or the process' resident
memory grows past its budget, raises an exception INSIDE the guarded thread with PyThreadState_SetAsyncExc.
CPython delivers it at the next bytecode boundary, so a Jinja loop or macro stops within milliseconds; a
single C call can't be interrupted, which is why bounds.py prices every allocating operation before it runs.

The injected exception derives from BaseException, so no `except Exception` in Jinja's runtime swallows it.
Where CPython itself swallows it (delivered inside a gc callback or a __del__, reported as unraisable),
the call would run on: it is fired again at every poll until the call ends, and a call that ends with a
result before any firing reached it returns that result (its work is done and whole). When the call ends
its job is closed under a lock and what may still be pending is landed and caught in the call's own frame
(only inside try blocks, where no exception escapes), so it never reaches the caller's code after the call
has returned. Guards
nest (a worker's request budget around a render's): each call answers only for its own verdict.
"""

from __future__ import annotations

import ctypes
import gc
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


def _land_pending(thread_id: int) -> None:
    """In thread `thread_id` (the caller's), once its job is closed: fire Interrupted at it anew (replacing
    one still pending) and catch it here. A delivered exception lowers the interpreter's async-exception
    flag; withdrawing one (SetAsyncExc with NULL) leaves it raised on CPython 3.11, so every thread then took
    the eval loop's slow path at every check, and code under sys.settrace re-ran an instruction for ever (a
    test suite hung so after the sandbox tests). Withdrawn only if it never lands (another thread's delivery
    lowered the flag first). The collector waits meanwhile: landing in a gc callback, it would be swallowed
    there and reported as unraisable."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        _set_async_exc(thread_id, id(Interrupted))
        for _ in range(100_000):            # a loop's back edge checks for it
            pass
        _set_async_exc(thread_id, None)
    except Interrupted:
        pass
    finally:
        if collecting:
            gc.enable()


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


def _cpu_clock(thread_id: int):
    """A function reading `thread_id`'s CPU time, or None where threads have no clock of their own."""
    try:
        clock = time.pthread_getcpuclockid(thread_id)
        time.clock_gettime(clock)
    except (AttributeError, OSError):
        return None
    return lambda: time.clock_gettime(clock)


class _Job:
    __slots__ = ("thread_id", "cpu_now", "cpu_deadline", "wall_deadline", "memory_growth", "memory_ceiling",
                 "verdict", "done")

    def __init__(self, thread_id: int, cpu_seconds: float, wall_seconds: float, memory_growth: int | None):
        self.thread_id = thread_id
        self.cpu_now = _cpu_clock(thread_id)
        now = time.monotonic()
        if self.cpu_now is None:           # no thread clock: the CPU budget falls back to the wall clock
            self.cpu_now, self.cpu_deadline = time.monotonic, now + cpu_seconds
        else:
            self.cpu_deadline = time.thread_time() + cpu_seconds
        self.wall_deadline = now + wall_seconds
        self.memory_growth = memory_growth
        self.memory_ceiling: int | None = None   # set by the watchdog at its first look at the job
        self.verdict: str | None = None          # "time", "wall" or "memory" once fired
        self.done = False


def ceiling(cpu_seconds: float) -> float:
    """The default wall-clock backstop for a CPU budget: far above what a busy host stretches a render to,
    for calls that block instead of computing."""
    return max(60.0, 10 * cpu_seconds)


class Watchdog:
    """Runs callables under a CPU-time, wall-clock and memory budget (one shared daemon thread, started on
    first use)."""

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

    def run(self, function, cpu_seconds: float, max_memory_growth: int | None = None,
            wall_seconds: float | None = None, what: str = "the call"):
        """function(), which may use `cpu_seconds` of its thread's CPU time, `wall_seconds` of wall clock
        (default: ceiling(cpu_seconds)) and grow resident memory by `max_memory_growth` bytes; past any of
        them it is stopped with TimeoutError or MemoryError naming `what`.

        Costs a lock round trip and a clock read: the watchdog, once busy, polls every 10 ms for a second
        after its last job, so a steady stream of calls never has to wake it, and the memory baseline is
        read by the watchdog at its first poll (a call shorter than that never pays for reading it)."""
        wall_seconds = ceiling(cpu_seconds) if wall_seconds is None else wall_seconds
        job = self._start(threading.get_ident(), cpu_seconds, wall_seconds, max_memory_growth or None)
        completed = False
        try:
            result = function()
            completed = True
        except Interrupted:
            if job.verdict is None:
                raise                               # an outer call's verdict: it goes on up
            result = None
        finally:
            while True:                             # an exception arriving here is retried, never let out
                try:
                    self._finish(job)
                    break
                except Interrupted:
                    pass
        if completed or job.verdict is None:       # every firing swallowed (gc callbacks): the work is whole
            return result
        if job.verdict == "memory":
            raise MemoryError(f"{what} grew resident memory by more than {max_memory_growth:,} bytes")
        if job.verdict == "wall":
            raise TimeoutError(f"{what} ran past the wall-clock ceiling of {wall_seconds:g} s")
        raise TimeoutError(f"{what} used more than its budget of {cpu_seconds:g} s of CPU time")

    def _start(self, thread_id: int, cpu_seconds: float, wall_seconds: float, memory: int | None) -> _Job:
        job = _Job(thread_id, cpu_seconds, wall_seconds, memory)
        with self._wake:
            self._start_locked()
            self._jobs.add(job)
            if self._idle:
                self._wake.notify()
        return job

    def _finish(self, job: _Job) -> None:
        """Close the job (in its own thread) and land what it may have left pending (the caller retries if
        that arrives here)."""
        with self._lock:
            job.done = True
            self._jobs.discard(job)
        if job.verdict is not None:
            _land_pending(job.thread_id)

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
                self._wake.wait(_POLL_SECONDS)
                now = time.monotonic()
                rss = resident_bytes() if any(j.memory_growth for j in self._jobs) else None
                for job in self._jobs:
                    if job.done:
                        continue
                    if job.verdict is not None:           # fired before and still running: swallowed
                        _set_async_exc(job.thread_id, id(Interrupted))
                        continue
                    if job.memory_growth and job.memory_ceiling is None and rss is not None:
                        job.memory_ceiling = rss + job.memory_growth
                    try:
                        spent = job.cpu_now() >= job.cpu_deadline
                    except OSError:                 # the thread is gone: its job is about to close
                        continue
                    if spent:
                        job.verdict = "time"
                    elif now >= job.wall_deadline:
                        job.verdict = "wall"
                    elif job.memory_ceiling is not None and rss is not None and rss > job.memory_ceiling:
                        job.verdict = "memory"
                    else:
                        continue
                    _set_async_exc(job.thread_id, id(Interrupted))


WATCHDOG = Watchdog()
