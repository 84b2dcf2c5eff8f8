"""The HTTP server's own bounds, below the routes: how long a request's head and body may take to arrive,
how many bytes of request bodies the process holds while they arrive, and how many connections it keeps
open (below the process's descriptor limit).

    limits = ServerLimits(header_timeout_s=10.0)        # options.py
    runner = GuardedRunner(app, limits, connection_limit(None, reserve=128)[0], handler_cancellation=True)
    body = await BodyBudget(256 << 20, 60.0).read(request, max_size=32 << 20)

A client sees each bound as an HTTP answer where HTTP allows one: a head not complete within
`header_timeout_s` gets 408 and the connection closes; a body not complete within `body_timeout_s` gets 408; a
body that would take the process's bodies past their budget gets 429, before its first byte is read when
its Content-Length says so (413 when that alone is past the budget); a connection past the limit first
closes the oldest idle connection (one waiting between requests, then one still sending its head), and when
every connection is busy with a request the new one gets 503 and is closed.
"""

from __future__ import annotations

import asyncio
import logging
import resource

import msgspec
from aiohttp import web

from tokworker.api.errors import ApiError
from tokworker.api.options import ServerLimits
from tokworker.protocol.messages import ErrorCode

log = logging.getLogger("tokworker.api")
RESERVED_DESCRIPTORS = 128         # the pool's sockets, the listening socket, logs, pipes, the event loop's own
DISCARD_BYTES = 256 * 1024         # of a refused body, read and dropped so its client reads the answer (as Go's)
LINGER_S = 1.0                     # how long a connection answered 408 reads and drops its client's bytes
CLOSE_AFTER = web.RequestKey("tokworker.close_after", bool)


class RequestTimeout(ApiError):
    """A request that did not arrive in time: 408."""

    @property
    def status(self) -> int:
        return 408


def connection_limit(requested: int | None, reserve: int) -> tuple[int, int]:
    """(client connections allowed, the descriptor limit). The soft RLIMIT_NOFILE is raised to the hard
    one first (as vLLM does); `reserve` descriptors are kept for everything that is not a client connection.
    ValueError when `requested` does not fit under the limit.

    >>> allowed, nofile = connection_limit(None, reserve=128)
    >>> allowed == nofile - 128
    True
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    room = soft - reserve
    if room < 16:
        raise ValueError(f"RLIMIT_NOFILE is {soft}: too few descriptors for clients once {reserve} are kept for "
                         f"the pool, the engine and files (raise it with ulimit -n)")
    if requested is None:
        return room, soft
    if requested > room:
        raise ValueError(f"--max-connections {requested} does not fit under RLIMIT_NOFILE {soft} with {reserve} "
                         f"descriptors kept for the pool, the engine and files (at most {room})")
    return requested, soft


class BodyBudget:
    """Request bodies counted while they arrive, against one budget for the whole process (`held` bytes now,
    at most `max_bytes`) and one per client address (at most `per_client`, so one client's unfinished bodies
    cannot take the whole budget from the others); each body must arrive within `timeout` seconds."""

    def __init__(self, max_bytes: int, timeout: float, per_client: int | None = None):
        self.max_bytes = max_bytes
        self.per_client = max_bytes if per_client is None else per_client
        self.timeout = timeout
        self.held = 0
        self.by_client: dict[str, int] = {}          # only clients with bodies arriving now

    async def read(self, request: web.BaseRequest, max_size: int) -> bytes:
        """The whole body of `request`, at most `max_size` bytes (413 past it)."""
        declared = request.content_length
        if declared is not None and declared > max_size:
            raise self._refuse(request, ErrorCode.TOO_LARGE, f"the request body is over {max_size} bytes "
                                                             f"(--max-request-bytes)")
        client = request.remote or ""
        if declared is not None:
            self._check(request, client, declared, 0)
        content = request.content
        if declared is not None and content.is_eof() and content.total_bytes == declared:
            return content.read_nowait()   # it all came with the head: nothing to wait for, no timer
        taken = declared or 0              # a declared length is reserved before its first byte
        self._take(client, taken)
        body = bytearray()
        try:
            async with asyncio.timeout(self.timeout):
                while chunk := await content.readany():
                    size = len(body) + len(chunk)
                    if size > max_size:
                        raise self._refuse(request, ErrorCode.TOO_LARGE, f"the request body is over {max_size} "
                                                                         f"bytes (--max-request-bytes)", size)
                    if size > taken:
                        self._check(request, client, size - taken, size)
                        self._take(client, size - taken)
                        taken = size
                    body += chunk
        except TimeoutError:
            request.protocol.close()
            raise RequestTimeout(ErrorCode.TIMEOUT, f"the request body did not arrive within {self.timeout:g} s "
                                                    f"(--body-timeout-s)") from None
        finally:
            self._take(client, -taken)
        return bytes(body)

    def _check(self, request: web.BaseRequest, client: str, more: int, received: int) -> None:
        """Refuse a body whose `more` bytes would pass the process's budget or its client's."""
        if self.held + more > self.max_bytes:
            raise self._refuse(request, ErrorCode.TOO_LARGE if more > self.max_bytes else ErrorCode.OVERLOADED,
                               f"request bodies being received hold {self.held} bytes; {more} more would pass the "
                               f"server's {self.max_bytes} (--max-body-bytes-in-flight)", received)
        mine = self.by_client.get(client, 0)
        if mine + more > self.per_client:
            raise self._refuse(request, ErrorCode.TOO_LARGE if more > self.per_client else ErrorCode.OVERLOADED,
                               f"this client's request bodies being received hold {mine} bytes; {more} more would "
                               f"pass its {self.per_client} (--max-body-bytes-per-client)", received)

    def _take(self, client: str, size: int) -> None:
        self.held += size
        mine = self.by_client.get(client, 0) + size
        if mine:
            self.by_client[client] = mine
        else:
            self.by_client.pop(client, None)

    @staticmethod
    def _refuse(request: web.BaseRequest, code: str, message: str, received: int = 0) -> ApiError:
        """The rest of this body is not wanted: no keep-alive after the answer, and when more than
        DISCARD_BYTES of it may follow (or its length is unknown), no reading it just to drop it (aiohttp
        would, for up to 10 s, at a client's full speed: a hundred refused 32 MB bodies stalled the loop
        seconds): the connection closes once the answer is written."""
        request.protocol.close()
        declared = request.content_length
        request[CLOSE_AFTER] = declared is None or declared - received > DISCARD_BYTES
        return ApiError(code, message)


def raw_answer(status: int, reason: str, code: str, message: str) -> bytes:
    """A whole HTTP/1.1 error answer that closes the connection, for where no request object exists yet.

    >>> raw_answer(408, "Request Timeout", "timeout", "late").split(b"\\r\\n")[0]
    b'HTTP/1.1 408 Request Timeout'
    """
    body = msgspec.json.encode({"error": {"message": message, "type": "invalid_request_error" if status < 500
                                          else "service_unavailable_error", "param": None, "code": code}})
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n").encode() + body


class GuardedHandler(web.RequestHandler):
    """aiohttp's connection protocol with a deadline on each request's head and the server's connection limit."""

    def connection_made(self, transport) -> None:
        self.lingering = False             # answered and closing: what still arrives is dropped
        self.head_bytes = 0                # bytes of the next head received so far
        self.head_timer = None
        self.body = None                   # the last request's body (aiohttp's StreamReader)
        super().connection_made(transport)
        manager = self._manager
        if not manager.admit(self):
            transport.write(raw_answer(503, "Service Unavailable", ErrorCode.OVERLOADED,
                                       f"{len(manager.connections) - 1} connections are open, every one in a "
                                       f"request: the server's limit (--max-connections)"))
            self.force_close()
            return
        self._arm()

    def _arm(self) -> None:
        self.head_timer = self._loop.call_later(self._manager.limits.header_timeout_s, self._head_late)

    def data_received(self, data: bytes) -> None:
        if self.lingering:
            return
        parsed = self._request_count
        body = self.body                           # still arriving: these are its bytes, not a head's
        busy = self._request_in_progress or self._messages or body is not None and not body.is_eof()
        super().data_received(data)
        if self._request_count != parsed:          # a head is complete: its deadline is met
            self.body = self._messages[-1][1] if self._messages else None
            self.head_bytes = 0
            if self.head_timer is not None:
                self.head_timer.cancel()
                self.head_timer = None
        elif not busy:                             # bytes of a head (a body's are read under its own timeout)
            self.head_bytes += len(data)
            if self.head_timer is None:
                self._arm()

    async def finish_response(self, request, response, start_time):
        answered = await super().finish_response(request, response, start_time)
        if request.get(CLOSE_AFTER):       # a refused body's rest is not read (BodyBudget._refuse)
            self.force_close()
        return answered

    def connection_lost(self, exc) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None
        super().connection_lost(exc)

    def idle(self) -> bool:
        """Between requests with nothing of the next one received (what a full server closes first)."""
        return self.lingering or not (self._request_in_progress or self._messages or self.head_bytes or
                                      self._force_close)

    def reading_head(self) -> bool:
        return bool(self.head_bytes) and not (self._request_in_progress or self._messages or self._force_close)

    def _head_late(self) -> None:
        self.head_timer = None
        if self.transport is None or self._request_in_progress or self._messages:
            return
        self._manager.late += 1
        self._answer_and_linger(raw_answer(408, "Request Timeout", ErrorCode.TIMEOUT,
                                           f"the request's head did not arrive within "
                                           f"{self._manager.limits.header_timeout_s:g} s (--header-timeout-s)"))

    def _answer_and_linger(self, answer: bytes) -> None:
        """Write `answer`, end our side, and read and drop what the client still sends for up to LINGER_S (or
        until it ends its side) before closing. A close with the client's bytes unread resets the connection,
        and the reset can reach the client before it has read the answer (nginx's lingering close)."""
        transport = self.transport
        transport.write(answer)
        self.lingering, self.head_bytes = True, 0
        if transport.can_write_eof():
            transport.write_eof()
        self.head_timer = self._loop.call_later(LINGER_S, self.force_close)


class GuardedServer(web.Server):
    """aiohttp's Server making GuardedHandlers, `max_connections` of them at once."""

    limits: ServerLimits
    max_connections: int

    def __call__(self) -> GuardedHandler:
        return GuardedHandler(self, loop=self._loop, **self._kwargs)

    def admit(self, handler: GuardedHandler) -> bool:
        """Room for `handler`'s new connection: past the limit, the oldest idle connection is closed, else
        the oldest still sending its head; False when every other connection is in a request."""
        if len(self._connections) <= self.max_connections:
            return True
        others = [h for h in self._connections if h is not handler and h.transport is not None]
        victim = next((h for h in others if h.idle()), None) or next((h for h in others if h.reading_head()),
                                                                     None)
        if victim is None:
            self.refused += 1
            return False
        self.evicted += 1
        if not victim.idle():                      # it was sending a head: say why it goes
            victim.transport.write(raw_answer(503, "Service Unavailable", ErrorCode.OVERLOADED,
                                              "the server closed this connection to make room: it was still "
                                              "sending its request's head (--max-connections)"))
        victim.force_close()
        self._connections.pop(victim, None)
        return True


class GuardedRunner(web.AppRunner):
    """web.AppRunner whose server keeps `limits` (aiohttp's keep-alive timeout among them)."""

    def __init__(self, app: web.Application, limits: ServerLimits, max_connections: int, **kwargs):
        super().__init__(app, keepalive_timeout=limits.keepalive_timeout_s, **kwargs)
        self.limits = limits
        self.max_connections = max_connections

    async def _make_server(self) -> web.Server:
        plain = await super()._make_server()
        server = GuardedServer(plain.request_handler, request_factory=plain.request_factory,
                               handler_cancellation=plain.handler_cancellation, loop=plain._loop, **plain._kwargs)
        server.limits, server.max_connections = self.limits, self.max_connections
        server.refused = server.evicted = server.late = 0
        return server
