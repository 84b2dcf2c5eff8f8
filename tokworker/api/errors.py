"""One error vocabulary from the engine through the wire to the HTTP caller: every failure is a CodedError
(an ErrorCode value and a message), and this module maps it to an HTTP status; each wire format writes it
in its own shape (tokworker.wire: `error_body` before the headers, `error_event` mid-stream).

    >>> error = ApiError.invalid("max_tokens must be at least 1", "max_tokens")
    >>> error.status, error.body("chat")
    (400, b'{"error":{"message":"max_tokens must be at least 1","type":"invalid_request_error","param":"max_tokens","code":"invalid"}}')
    >>> error.body("anthropic")
    b'{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens must be at least 1"}}'
"""

from __future__ import annotations

import re

import msgspec

from tokworker.protocol.messages import CodedError, ErrorCode
from tokworker.wire import home

NOT_FOUND = "not_found"             # an unknown model or route (HTTP only)
CONTEXT_LENGTH = "context_length_exceeded"   # a prompt over the context: OpenAI's code, a 400 (HTTP only)
UNAUTHORIZED = "invalid_api_key"    # no API key, or not one of --api-key's (HTTP only; OpenAI's code)

STATUS = {
    ErrorCode.MALFORMED: 400, ErrorCode.UNKNOWN_TYPE: 400, ErrorCode.INVALID: 400, ErrorCode.TEMPLATE: 400,
    ErrorCode.STREAM_EXISTS: 400, ErrorCode.UNSUPPORTED_VERSION: 400, ErrorCode.FORBIDDEN: 403,
    NOT_FOUND: 404, CONTEXT_LENGTH: 400, ErrorCode.TOO_LARGE: 413, ErrorCode.OVERLOADED: 429,
    ErrorCode.UNAVAILABLE: 501, ErrorCode.SHUTTING_DOWN: 503, ErrorCode.WORKER_LOST: 503, ErrorCode.TIMEOUT: 504,
    UNAUTHORIZED: 401, ErrorCode.ENGINE_ERROR: 502, ErrorCode.ENGINE_UNAVAILABLE: 503, ErrorCode.ENGINE_TIMEOUT: 504,
    # the pool's own trouble with a stream or a worker: the server's, and worth a retry
    ErrorCode.UNKNOWN_STREAM: 503, ErrorCode.STREAM_FAILED: 503, ErrorCode.STALE: 503, ErrorCode.CLOSED: 503,
    ErrorCode.WORKER_FAILED: 503, ErrorCode.OUT_OF_MEMORY: 503, ErrorCode.UNKNOWN_CONSTRAINT: 503,
    ErrorCode.CONSTRAINT_CHANGED: 503,
}
_PATH = re.compile(r" - at (?:`key` in )?`\$\.?([^`]*)`$")
_MISSING = re.compile(r"missing required field `([^`]*)`")


class ApiError(CodedError):
    """A request's failure as the HTTP caller sees it: `param` names the offending field (dotted, with
    list indexes: `messages[0].role`), `status` follows from the code."""

    def __init__(self, code: str, message: str, param: str | None = None):
        super().__init__(code, message)
        self.param = param

    @property
    def status(self) -> int:
        return STATUS.get(self.code, 500)

    def body(self, api: str) -> bytes:
        """This error as the error body of the wire format `api`."""
        return home(api).error_body(self.status, self.code, self.message, self.param)

    @classmethod
    def invalid(cls, message: str, param: str | None = None) -> "ApiError":
        return cls(ErrorCode.INVALID, message, param)

    @classmethod
    def of(cls, error: BaseException) -> "ApiError":
        """Any failure as an ApiError: a CodedError keeps its code; anything else is internal."""
        if isinstance(error, ApiError):
            return error
        if isinstance(error, msgspec.ValidationError):
            return from_validation(error)
        if isinstance(error, msgspec.DecodeError):
            return cls(ErrorCode.MALFORMED, f"the body is not valid JSON: {error}")
        if isinstance(error, CodedError):
            return cls(error.code, error.message or error.code)
        return cls(ErrorCode.INTERNAL, f"internal error: {type(error).__name__}")


def check_vocabulary(ids, vocab_size: int, param: str) -> None:
    """An ApiError naming `param` for the first id outside the vocabulary.

    >>> check_vocabulary([1, 7], 5, "prompt")
    Traceback (most recent call last):
    ...
    tokworker.api.errors.ApiError: invalid: token id 7 is not in the vocabulary (0..4)
    """
    bad = next((i for i in ids if not 0 <= i < vocab_size), None)
    if bad is not None:
        raise ApiError.invalid(f"token id {bad} is not in the vocabulary (0..{vocab_size - 1})", param)


def from_validation(error: msgspec.ValidationError) -> ApiError:
    """msgspec's message names the path (`... - at `$.messages[0].role``): that path, and a missing field's
    name, make the param.

    >>> e = from_validation(msgspec.ValidationError("Invalid enum value 'robot' - at `$.messages[0].role`"))
    >>> e.param, e.message
    ('messages[0].role', "Invalid enum value 'robot' - at `messages[0].role`")
    >>> from_validation(msgspec.ValidationError("Object missing required field `function` - at `$.tools[0]`")).param
    'tools[0].function'
    """
    text = str(error)
    match = _PATH.search(text)
    param = match.group(1) if match and match.group(1) else None
    if match is not None:
        text = text[:match.start()] + (f" - at `{param}`" if param else "")
    missing = _MISSING.search(text)
    if missing is not None:
        param = f"{param}.{missing.group(1)}" if param else missing.group(1)
    return ApiError(ErrorCode.INVALID, text, param)


def vllm_body(error: ApiError) -> bytes:
    """vLLM's own error body (its render tier's routes answer with it): OpenAI's shape, with vLLM's type
    names and the HTTP status as `code`.

    >>> vllm_body(ApiError(NOT_FOUND, "the model `x` does not exist", "model"))
    b'{"error":{"message":"the model `x` does not exist","type":"NotFoundError","param":"model","code":404}}'
    """
    return home("derender_chat").error_body(error.status, error.code, error.message, error.param)
