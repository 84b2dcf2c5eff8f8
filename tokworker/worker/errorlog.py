"""A worker's error replies: counted by code (for `tokworker status`) and logged with their request ids,
bounded: each line is cut to a few hundred characters and at most a burst of lines goes out per second
(the lines held back are counted and reported in the next one), so a client that sends garbage in a
loop cannot flood the log."""

from __future__ import annotations

import logging
import time

from tokworker.protocol.messages import ErrorCode

# Errors of the request itself or of the protocol's routine: worth a line, not an alarm.
ROUTINE = frozenset((ErrorCode.MALFORMED, ErrorCode.UNKNOWN_TYPE, ErrorCode.INVALID, ErrorCode.TOO_LARGE,
                     ErrorCode.FORBIDDEN, ErrorCode.TEMPLATE, ErrorCode.UNKNOWN_STREAM, ErrorCode.UNKNOWN_CONSTRAINT,
                     ErrorCode.STREAM_EXISTS, ErrorCode.UNSUPPORTED_VERSION, ErrorCode.STALE,
                     ErrorCode.SHUTTING_DOWN))
MAX_LINE_CHARS = 300


class RequestErrors:
    def __init__(self, log: logging.Logger, per_second: float = 5.0, burst: int = 20):
        self.log = log
        self.by_code: dict[str, int] = {}       # bounded by the codes a worker sends
        self.per_second, self.burst = per_second, burst
        self._tokens = float(burst)
        self._last = time.monotonic()
        self._held_back = 0

    def record(self, request_id: int, code: str, message: str, who: str) -> None:
        self.by_code[code] = self.by_code.get(code, 0) + 1
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.per_second)
        self._last = now
        if self._tokens < 1:
            self._held_back += 1
            return
        self._tokens -= 1
        held, self._held_back = self._held_back, 0
        self.log.log(logging.INFO if code in ROUTINE else logging.WARNING, "request %d from %s failed: %s: %s%s",
                     request_id, who, code, message[:MAX_LINE_CHARS],
                     f" ({held} more error(s) not logged)" if held else "")
