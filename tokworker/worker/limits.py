"""Backstops that keep one bad request from taking a worker (or the host) down with it.

- Memory: RLIMIT_AS caps the worker's address space, so a runaway allocation raises MemoryError inside
  the request (answered OUT_OF_MEMORY) instead of waking the kernel's OOM killer on the whole host.
- Time: a stateless request may use `budget_s` of its thread's own CPU time (a busy host stretches the
  wall clock, which must cost latency, not a refusal), with a wall-clock ceiling far above it for work
  that blocks; past either the template watchdog stops it in pure-Python code (BudgetExceeded, answered
  TIMEOUT) and the worker goes on with the next request.
- CPU: code stuck in C ignores signal handlers, and session requests (steps) run without a wall budget,
  so RLIMIT_CPU is kept `cpu_limit_s` ahead of the CPU already used; a request that burns through it gets
  SIGXCPU, the process dies (without a core dump: RLIMIT_CORE is 0), and the launcher starts a new one
  (the frontend then re-sends and replays what it lost).
"""

from __future__ import annotations

import resource
import time

from tokworker.templates.watchdog import WATCHDOG


class BudgetExceeded(BaseException):
    """A request ran past its wall-time budget (a BaseException, so no `except Exception` on the way swallows it)."""


def apply_memory_limit(megabytes: int) -> None:
    if megabytes <= 0:
        return
    limit = megabytes << 20
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def disable_core_dumps() -> None:
    """A worker killed by SIGXCPU would otherwise dump gigabytes of core for every runaway request."""
    _, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))


class CpuBackstop:
    """Keeps the soft RLIMIT_CPU between `seconds`/2 and `seconds` ahead of the CPU used so far; re-arming
    costs a syscall only every `seconds`/2 of CPU, so calling `arm()` per request is cheap."""

    def __init__(self, seconds: int):
        self.seconds = max(1, int(seconds))
        self.armed_until = 0.0

    def arm(self) -> None:
        used = time.process_time()
        if used + self.seconds / 2 < self.armed_until:
            return
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        soft = int(used) + 1 + self.seconds
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
        self.armed_until = soft


class CpuBudget:
    """`budget.run(seconds, function, *args)`: function(*args), stopped with BudgetExceeded once it has used
    `seconds` of its thread's own CPU time, or the wall-clock ceiling (watchdog.ceiling) has passed."""

    @staticmethod
    def run(seconds: float, function, *args):
        try:
            return WATCHDOG.run(lambda: function(*args), seconds, what="the request")
        except TimeoutError:
            raise BudgetExceeded() from None
