"""The frontend's typed errors: one class per thing a caller would handle differently, all CodedErrors
carrying the protocol's ErrorCode value in `.code`."""

from __future__ import annotations

from tokworker.protocol.messages import CodedError, ErrorCode


class PoolError(CodedError):
    """What the pool raises: the worker's error as it was sent, or the frontend's own (closed, worker_lost...)."""


class InvalidRequest(PoolError, ValueError):
    """The request itself is wrong (bad fields, too large, forbidden, a template that raised): do not retry."""


class Overloaded(PoolError):
    """The pool is at its bounds (in-flight requests, open streams): retry later or shed load."""


class RequestTimeout(PoolError):
    """No reply within the request's timeout."""


class WorkerLost(PoolError):
    """The worker serving this request died or was unreachable more times than the pool retries."""


class ShuttingDown(WorkerLost):
    """The worker is draining (SIGTERM): it finishes its open streams but takes no new work. The pool sends
    new work to its other workers; this reaches a caller only when every worker is shutting down."""


class NoSuchSocket(WorkerLost):
    """An ipc endpoint with no socket file and no daemon starting on it: nothing to wait for."""


class StreamFailed(PoolError):
    """A stream ended with an error instead of a finish reason (its deltas so far were delivered)."""


class UnknownStream(PoolError, KeyError):
    """A stream id this pool never opened (or already closed and forgot)."""


_BY_CODE = {
    ErrorCode.OVERLOADED: Overloaded,
    ErrorCode.TIMEOUT: RequestTimeout,
    ErrorCode.WORKER_LOST: WorkerLost,
    ErrorCode.SHUTTING_DOWN: ShuttingDown,
    ErrorCode.UNKNOWN_STREAM: UnknownStream,
    ErrorCode.STREAM_FAILED: StreamFailed,
    ErrorCode.MALFORMED: InvalidRequest,
    ErrorCode.UNKNOWN_TYPE: InvalidRequest,
    ErrorCode.INVALID: InvalidRequest,
    ErrorCode.TOO_LARGE: InvalidRequest,
    ErrorCode.FORBIDDEN: InvalidRequest,
    ErrorCode.TEMPLATE: InvalidRequest,
    ErrorCode.STREAM_EXISTS: InvalidRequest,
    ErrorCode.UNSUPPORTED_VERSION: InvalidRequest,
}


def error_for(code: str, message: str = "") -> PoolError:
    """The exception for an ErrorReply's code (PoolError for codes without a narrower class)."""
    return _BY_CODE.get(code, PoolError)(code, message)
