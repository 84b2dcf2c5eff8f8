"""The front door's settings: ApiOptions (its routes' bounds, access and CORS) and ServerLimits (the HTTP
server's connection-level bounds), msgspec Structs without aiohttp, so that `tokworker api` makes a flag of
every described field from its declaration here: `--` and the field's name (`--max-request-bytes`), its type
and default, the description its help; `syntax` says how a list is spelled on the command line.

    options = ApiOptions(served_model_name=["my-model"], api_key=["sk-1"])
    await serve_http(spawn, options, engine, limits=ServerLimits(header_timeout_s=5.0))
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

def _flag(description: str, *, metavar: str | None = None,
          syntax: Literal["words", "repeatable", "json"] | None = None) -> msgspec.Meta:
    """A flag's declaration; for a list, its `syntax`: "words" (`--x a b`: the last flag's words),
    "repeatable" (`--x a --x b c`: all of them) or "json" (`--x '["a", "b"]'`, as vllm serve's).

    >>> _flag("CORS: origins allowed", metavar="JSON", syntax="json").extra
    {'metavar': 'JSON', 'syntax': 'json'}
    """
    extra = {key: value for key, value in (("metavar", metavar), ("syntax", syntax)) if value is not None}
    return msgspec.Meta(description=description, extra=extra or None)


class ApiOptions(msgspec.Struct, kw_only=True):
    """The front door's settings (each described one is a `tokworker api` flag; `drain_timeout` is the
    daemon's `--drain-timeout`, which the front door reads too).

    >>> ApiOptions().allowed_origins, ApiOptions(max_request_bytes=1024).max_request_bytes
    (['*'], 1024)
    """

    served_model_name: Annotated[list[str], _flag(
        "the model names requests may give as `model`; the first is reported (default: the model folder)",
        metavar="NAME", syntax="words")] = []
    max_model_len: Annotated[int | None, _flag("context length (default: the engine's)")] = None
    max_request_bytes: Annotated[int, _flag("largest request body in bytes; past it 413")] = 32 * 1024 * 1024
    max_concurrent_requests: Annotated[int, _flag("requests served at once; more get 429")] = 4096
    max_buffer_bytes: Annotated[int, _flag(
        "bytes a streamed response may fall behind its client before it is cut")] = 4 * 1024 * 1024
    max_queued_bytes: Annotated[int, _flag(
        "request bytes that may wait for the pool to take their prompts; more get 429")] = 64 * 1024 * 1024
    direct_streaming: Annotated[bool, _flag(
        "local workers write every response (streamed or whole, all its choices) to the client themselves, so "
        "the API process only moves ids (the default where the workers are on this host; --no-direct-streaming "
        "forwards every response through the API process)")] = True
    drain_timeout: float = 30.0
    derender_state_bytes: Annotated[int, _flag(
        "bytes of streamed derender sequences kept in the workers (vLLM's render tier routes, derender.py); "
        "past it the least recently used is closed")] = 64 * 1024 * 1024
    derender_max_streams: Annotated[int, _flag(
        "streamed derender sequences kept at once, all clients together (at most half the pool's streams: the "
        "generation routes keep the rest); past it the least recently used of the client holding the most is "
        "closed")] = 1024
    derender_idle_s: Annotated[float, _flag(
        "seconds a streamed derender sequence may wait for its next chunk before it is closed")] = 300.0
    api_key: Annotated[list[str], _flag(
        "require one of these keys (repeatable), as `Authorization: Bearer KEY` or `x-api-key: KEY`, on every "
        "route but /health (default: VLLM_API_KEY's and TOKWORKER_API_KEY's, when set; else none, every route "
        "open; access.py)", metavar="KEY", syntax="repeatable")] = []
    metrics_open: Annotated[bool, _flag("serve /metrics without an API key")] = False
    allowed_origins: Annotated[list[str], _flag("CORS: origins allowed, a JSON list", metavar="JSON",
                                                syntax="json")] = msgspec.field(default_factory=lambda: ["*"])
    allowed_methods: Annotated[list[str], _flag("CORS: methods allowed, a JSON list", metavar="JSON",
                                                syntax="json")] = msgspec.field(default_factory=lambda: ["*"])
    allowed_headers: Annotated[list[str], _flag("CORS: request headers allowed, a JSON list", metavar="JSON",
                                                syntax="json")] = msgspec.field(default_factory=lambda: ["*"])
    allow_credentials: Annotated[bool, _flag("CORS: allow credentials (cookies)")] = False
    health_interval: Annotated[float, _flag(
        "seconds between two checks of the engine's health; /health answers 503 while it fails (health.py)",
        metavar="SECONDS")] = 1.0
    max_body_bytes_in_flight: Annotated[int, _flag(
        "bytes of request bodies being received, all clients together; past it 429")] = 256 * 1024 * 1024
    max_body_bytes_per_client: Annotated[int, _flag(
        "bytes of request bodies being received from one client address; past it 429")] = 64 * 1024 * 1024
    body_timeout_s: Annotated[float, _flag(
        "seconds a request body may take to arrive; past it 408 (limits.py)")] = 60.0


class ServerLimits(msgspec.Struct, frozen=True, kw_only=True):
    """The connection-level bounds (limits.py's GuardedRunner keeps them)."""

    header_timeout_s: Annotated[float, _flag(
        "seconds a request's head may take to arrive, from a connection's start or the first byte after its "
        "previous response; past it 408 and the connection closes")] = 10.0
    keepalive_timeout_s: Annotated[float, _flag("seconds an idle connection is kept")] = 75.0
    max_connections: Annotated[int | None, _flag(
        "client connections open at once (default: RLIMIT_NOFILE less the descriptors the pool, the engine and "
        "files need); past it the oldest idle one is closed, else 503")] = None
