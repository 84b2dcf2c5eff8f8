"""The worker's edge: what a request (or one stream of a step) raised -> the ErrorCode its client gets."""

from __future__ import annotations

from tokworker.protocol.messages import CodedError, ErrorCode
from tokworker.templates.errors import TemplateError, UntrustedTemplateError
from tokworker.worker.limits import BudgetExceeded


def error_of(exc: BaseException, budget_s: float = 0.0) -> tuple[str, str]:
    """The one mapping from what a request raised to the (code, message) its client gets. The engine says
    "bad input" with ValueError (every error class of its own is one); anything else is a bug of ours."""
    if isinstance(exc, CodedError):
        return exc.code, exc.message
    if isinstance(exc, BudgetExceeded):
        return ErrorCode.TIMEOUT, f"over this worker's budget of {budget_s} s"
    if isinstance(exc, MemoryError):
        return ErrorCode.OUT_OF_MEMORY, "out of memory"
    if isinstance(exc, RecursionError):
        return ErrorCode.TOO_LARGE, "input nests too deeply"
    if isinstance(exc, UntrustedTemplateError):
        return ErrorCode.FORBIDDEN, f"{exc} (the operator can enable --allow-request-templates)"
    if isinstance(exc, TemplateError):
        return ErrorCode.TEMPLATE, f"{type(exc).__name__}: {exc}"
    if isinstance(exc, ValueError):
        return ErrorCode.INVALID, str(exc)
    return ErrorCode.INTERNAL, f"{type(exc).__name__}: {exc}"
