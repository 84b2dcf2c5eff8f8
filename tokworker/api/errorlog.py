"""The front door's failures in its log: one line per refused request (method, path, client, status, code,
message and the field it names), and a traceback only for a failure that is a bug of the server's own
(answered 500). Both are rate-limited apart (a burst, then a few lines a second; the lines held back are
counted in the next one), so a client sending garbage in a loop cannot flood the log or hide a bug's line.

    >>> bucket = Bucket(per_second=0.0, burst=2)
    >>> [bucket.take() for _ in range(4)]
    [0, 0, None, None]
"""

from __future__ import annotations

import logging
import time

MAX_MESSAGE_CHARS = 300


class Bucket:
    """A token bucket: `take()` is None while over the rate (counted), else the lines held back since the
    last one that went out."""

    def __init__(self, per_second: float = 5.0, burst: int = 20):
        self.per_second, self.burst = per_second, burst
        self.tokens = float(burst)
        self.last = time.monotonic()
        self.held_back = 0

    def take(self) -> int | None:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.per_second)
        self.last = now
        if self.tokens < 1:
            self.held_back += 1
            return None
        self.tokens -= 1
        held, self.held_back = self.held_back, 0
        return held


class ErrorLog:
    def __init__(self, log: logging.Logger, per_second: float = 5.0, burst: int = 20):
        self.log = log
        self.refusals, self.bugs = Bucket(per_second, burst), Bucket(per_second, burst)

    def refused(self, request, status: int, code: str, message: str, param: str | None) -> None:
        """A request answered with an error of its own (or the server's state: 429, 503, 504)."""
        held = self.refusals.take()
        if held is not None:
            self.log.log(logging.INFO if status < 500 else logging.WARNING, "%s %s from %s: %d %s: %s%s%s",
                         request.method, request.path, request.remote, status, code, message[:MAX_MESSAGE_CHARS],
                         f" (param {param})" if param else "", _held(held))

    def failed(self, request, failure: BaseException) -> None:
        """A failure no code names: a bug, with its traceback."""
        held = self.bugs.take()
        if held is not None:
            self.log.error("%s %s failed%s", request.method, request.path, _held(held), exc_info=failure)


def _held(count: int) -> str:
    return f" ({count} more not logged)" if count else ""
