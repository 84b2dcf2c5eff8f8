"""How long and how much the adapters wait on an HTTP engine: EngineLimits, a msgspec Struct without aiohttp,
so that `tokworker api` makes a flag of every field from its declaration here (`--engine-` and the field's
name: `--engine-header-timeout-s`), its description the flag's help.

    limits = EngineLimits(header_timeout_s=30.0)
    engine = VllmEngine("http://127.0.0.1:8001", limits=limits)
"""

from __future__ import annotations

from typing import Annotated

import msgspec


def _flag(description: str) -> msgspec.Meta:
    return msgspec.Meta(description=description)


class EngineLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Every wait on an HTTP engine is bounded (engines/http.py): connecting, the response headers (from
    sending a request, a free pooled connection included), each read of a streamed response (a long prefill
    is a wait before the first event), the bytes read of an error body (the rest is never read: the
    connection is closed), and the connections open at once.

    >>> limits = EngineLimits(read_timeout_s=30.0)
    >>> limits.connect_timeout_s, limits.read_timeout_s, limits.error_bytes
    (10.0, 30.0, 65536)
    """

    connect_timeout_s: Annotated[float, _flag("seconds to connect to an HTTP engine")] = 10.0
    header_timeout_s: Annotated[float, _flag(
        "seconds an HTTP engine may take to send its response headers; past it 504")] = 60.0
    read_timeout_s: Annotated[float, _flag(
        "seconds an HTTP engine may send nothing within a streamed response; past it the request ends with an "
        "error")] = 300.0
    error_bytes: Annotated[int, _flag("bytes read of an HTTP engine's error body")] = 64 * 1024
    max_connections: Annotated[int, _flag("connections to an HTTP engine at once")] = 256
    start_wait_s: Annotated[float, _flag(
        "seconds to wait at start for an HTTP engine that does not answer yet (it may be loading its model); "
        "past it tokworker api exits")] = 600.0
