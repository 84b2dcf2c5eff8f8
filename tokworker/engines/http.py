"""What the engines behind an HTTP token API share (llama-server, vLLM's tokens-only server, SGLang): one
aiohttp ClientSession per engine with a bounded connection pool, one streamed POST per request in a task of
its own, and abort by cancelling that task (which closes the connection: each of these servers frees the
request's slot when its client goes away).

A subclass names its `route`, builds the request's body (`body`) and reads each SSE `data:` payload
(`read`: emit the ids it carries, return True once the request finished); `abort_posts` names what to POST
besides closing the connection, for an engine that has an abort route. add() returns once the engine
answered 200, so a refusal (a bad grammar, a prompt too long, a full server) is add()'s EngineError; a
failure after that is an output with finish "error". Nothing here blocks the loop: the one read per event
is aiohttp's.

Every wait on the engine is bounded (EngineLimits): connecting, its response headers (a request the engine
never answers ends with code timeout, and its connection is closed), each read of a streamed response, and
the bytes read of an error body. An add() cancelled before the engine answered (its client went away) closes
its connection at once, so clients giving up cannot exhaust the bounded connection pool.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Sequence

import msgspec

from tokworker.constrain.regex_syntax import RegexError
from tokworker.constrain.tool_choice import tool_call_pattern
from tokworker.engines.base import Engine, EngineError, Guide, SamplingParams
from tokworker.engines.options import EngineLimits
from tokworker.protocol.messages import ErrorCode

# The engine's answer to a request, as the HTTP caller's: what the request asked wrongly stays the client's
# (400, 413, 422), a full engine is 429 as there; anything else is the engine's failure, not the request's:
# 503 unreachable or loading (llama-server answers 503 while it loads the model), 504 a timeout, the rest 502.
STATUS_CODES = {400: ErrorCode.INVALID, 413: ErrorCode.TOO_LARGE, 422: ErrorCode.INVALID, 429: ErrorCode.OVERLOADED,
                501: ErrorCode.UNAVAILABLE, 503: ErrorCode.ENGINE_UNAVAILABLE, 504: ErrorCode.ENGINE_TIMEOUT}
log = logging.getLogger("tokworker.engines")
DATA = b"data: "
JSON = {"Content-Type": "application/json"}
WAIT_LOG_S = 10.0                  # how often the wait for an engine at start is said in the log
encode = msgspec.json.encode
DONE = b"[DONE]"


class HttpEngine(Engine):
    """An engine reached over HTTP at `url`; subclasses set `name`, `route` and implement body() and read()."""

    route = "/"
    health_route = "/health"                        # llama-server's, vLLM's and SGLang's: 200 when ready

    def __init__(self, url: str, *, limits: EngineLimits = EngineLimits(), max_event_bytes: int = 4 << 20,
                 health_timeout: float = 2.0):
        super().__init__()
        self.url = url.rstrip("/")
        self.limits = limits
        self.max_connections = limits.max_connections
        self.max_event_bytes = max_event_bytes     # one SSE line (SGLang's default events grow with the output)
        self.health_timeout = health_timeout
        self.vocab_size = 1 << 62                  # the pool's, from start(): an id past it is the engine's error
        self.session = None
        self.health_session = None                 # its own connection: a pool full of streams is not a dead engine
        self.tasks: dict[str, asyncio.Task] = {}
        self.kept: dict[str, object] = {}              # what read() keeps per request between its events
        self.posts: set[asyncio.Task] = set()          # abort POSTs in flight (awaited by close)

    async def start(self, pool) -> None:
        import aiohttp

        await super().start(pool)
        if pool is not None:
            self.vocab_size = pool.info.vocab_size
        # aiohttp refuses a line past twice its read buffer: that bounds one event in bytes
        limits = self.limits
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limits.max_connections),
                                             timeout=aiohttp.ClientTimeout(sock_connect=limits.connect_timeout_s,
                                                                           sock_read=limits.read_timeout_s),
                                             read_bufsize=self.max_event_bytes // 2)
        self.health_session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1))
        try:
            await self._probe_until_ready(pool)
        except BaseException:
            await self.close_sessions()
            raise

    async def _probe_until_ready(self, pool) -> None:
        """The probe, again every second while the engine does not answer (started beside this process, it
        may still be loading its model), at most `start_wait_s` seconds, saying so every WAIT_LOG_S."""
        import aiohttp

        began = time.monotonic()
        said = began
        while True:
            try:
                return await self.probe(pool)
            except (aiohttp.ClientError, OSError, ValueError, asyncio.TimeoutError) as error:
                waited = time.monotonic() - began
                if waited >= self.limits.start_wait_s:
                    raise EngineError(ErrorCode.ENGINE_UNAVAILABLE, f"{self.name} at {self.url} does not answer "
                                                                    f"after {waited:.0f} s: {error}") from None
                if time.monotonic() - said >= WAIT_LOG_S or said == began:
                    said = time.monotonic()
                    log.warning("waiting for %s at %s (%s); up to %.0f s more (--engine-start-wait-s)", self.name,
                                self.url, error, self.limits.start_wait_s - waited)
            await asyncio.sleep(min(1.0, max(self.limits.start_wait_s - (time.monotonic() - began), 0.0)))

    async def probe(self, pool) -> None:
        """Check the engine answers before the first request, and take its context length: vLLM and SGLang
        both list their model on /v1/models with a `max_model_len`."""
        models = (await self.get_json("/v1/models")).get("data") or [{}]
        self.max_model_len = models[0].get("max_model_len")

    async def get_json(self, path: str, max_bytes: int = 4 << 20):
        """GET a JSON document of at most `max_bytes` (ValueError past it, or on another status than 200)."""
        async with asyncio.timeout(self.limits.header_timeout_s):
            response = await self.session.get(self.url + path)
        async with response:
            if response.status != 200:
                raise ValueError(f"GET {path} answered {response.status}: {await self.error_text(response)}")
            raw = await read_bounded(response, max_bytes + 1)
            if len(raw) > max_bytes:
                raise ValueError(f"GET {path} answered more than {max_bytes} bytes")
            return msgspec.json.decode(raw)

    async def error_text(self, response) -> str:
        """The readable part of an error response's body, of which at most `error_bytes` are read."""
        raw = await read_bounded(response, self.limits.error_bytes)
        response.close()                           # the rest is never read: the connection goes
        return message(raw)

    async def request(self, path: str, body: dict):
        """POST `body` and wait for the engine's response headers, at most `header_timeout_s` seconds."""
        async with asyncio.timeout(self.limits.header_timeout_s):
            return await self.session.post(self.url + path, data=encode(body), headers=JSON)

    async def close(self) -> None:
        for task in list(self.tasks.values()):
            task.cancel()
        await asyncio.gather(*self.tasks.values(), *self.posts, return_exceptions=True)
        await self.close_sessions()

    async def close_sessions(self) -> None:
        for session in (self.session, self.health_session):
            if session is not None:
                await session.close()

    def running(self) -> int:
        return len(self.tasks)

    async def healthy(self) -> bool:
        """GET the engine's health route: 200 within health_timeout seconds, or not healthy."""
        import aiohttp

        if self.health_session is None or self.health_session.closed:
            return False
        try:
            async with self.health_session.get(self.url + self.health_route,
                                        timeout=aiohttp.ClientTimeout(total=self.health_timeout)) as response:
                return response.status == 200
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
            return False

    def emit(self, request_id: str, ids: list[int], logprobs: list | None = None, finish: str | None = None,
             error: EngineError | None = None) -> None:
        """Engine.emit, refusing ids outside the vocabulary: an engine on another model is the engine's error
        (502), not a bad request."""
        if ids and (min(ids) < 0 or max(ids) >= self.vocab_size):
            bad = next(i for i in ids if not 0 <= i < self.vocab_size)
            raise EngineError(ErrorCode.ENGINE_ERROR, f"{self.name} sent token id {bad}, outside the model's "
                                                      f"vocabulary (0..{self.vocab_size - 1}): is it the same model?")
        super().emit(request_id, ids, logprobs, finish, error)

    def body(self, request_id: str, prompt_ids: Sequence[int], sampling: SamplingParams) -> dict:
        """The request's JSON body; the ids in it as a list (`id_list`: an array('I') is made one here)."""
        raise NotImplementedError

    def read(self, request_id: str, payload: bytes, sampling: SamplingParams) -> bool:
        """Emit what one `data:` payload carries; True when it ended the request."""
        raise NotImplementedError

    async def add(self, request_id: str, prompt_ids: Sequence[int], sampling: SamplingParams) -> None:
        body = self.body(request_id, prompt_ids, sampling)
        accepted = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(self._stream(request_id, body, sampling, accepted))
        self.tasks[request_id] = task
        task.add_done_callback(lambda _: self.forget(request_id))
        try:
            await accepted                 # the engine's refusal is add()'s
        except BaseException:
            task.cancel()                  # cancelled before the engine answered: its connection goes now
            raise

    def forget(self, request_id: str) -> None:
        """The request's task ended (finished, failed or aborted): drop what was kept for it."""
        self.tasks.pop(request_id, None)
        self.kept.pop(request_id, None)

    def abort_posts(self, request_ids: list[str]) -> list[tuple[str, dict]]:
        """(path, body) of each POST that aborts these requests on the engine; none: closing is enough."""
        return []

    def abort(self, request_ids: list[str]) -> None:
        running = [request_id for request_id in request_ids if request_id in self.tasks]
        for path, body in self.abort_posts(running):
            post = asyncio.get_running_loop().create_task(self._post(path, body))
            self.posts.add(post)
            post.add_done_callback(self.posts.discard)
        for request_id in running:
            self.tasks.pop(request_id).cancel()   # closes the connection: the engine frees the request's slot

    async def _post(self, path: str, body: dict) -> None:
        import aiohttp

        try:
            async with await self.request(path, body) as response:
                if response.status != 200:
                    log.warning("%s %s answered %d: %s", self.name, path, response.status,
                                await self.error_text(response))
        except (aiohttp.ClientError, OSError) as error:      # the closed connection aborts it all the same
            log.warning("%s %s failed: %s", self.name, path, error)

    async def _stream(self, request_id: str, body: dict, sampling: SamplingParams, accepted: asyncio.Future):
        read = self.read
        try:
            async with await self.request(self.route, body) as response:
                if response.status != 200:
                    raise EngineError(STATUS_CODES.get(response.status, ErrorCode.ENGINE_ERROR),
                                      f"{self.name} answered {response.status}: {await self.error_text(response)}")
                accepted.set_result(None)
                async for line in response.content:
                    if line.startswith(DATA) and read(request_id, line[6:].rstrip(), sampling):
                        return
            raise EngineError(ErrorCode.ENGINE_ERROR, f"{self.name} ended the stream before the request finished")
        except asyncio.CancelledError:
            if not accepted.done():                # aborted (or closed) while its add() waits: that add ends too
                accepted.set_exception(EngineError(ErrorCode.UNAVAILABLE, f"{self.name}: the request was aborted "
                                                                          f"before the engine answered"))
            raise
        except Exception as failure:               # whatever it is, the request ends with it: nothing hangs
            error = _engine_error(failure, self.name, self.url, self.max_event_bytes, self.limits)
            if not accepted.done():
                accepted.set_exception(error)
            else:
                self.emit(request_id, [], finish="error", error=error)


async def read_bounded(response, limit: int) -> bytes:
    """At most `limit` bytes of a response's body (each read bounded by the session's read timeout)."""
    chunks, size = [], 0
    while size < limit and (chunk := await response.content.read(limit - size)):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _engine_error(failure: Exception, name: str, url: str, max_event_bytes: int,
                  limits: EngineLimits) -> EngineError:
    import aiohttp
    from aiohttp.http_exceptions import LineTooLong

    if isinstance(failure, EngineError):
        return failure
    if isinstance(failure, aiohttp.ConnectionTimeoutError):  # these three are TimeoutErrors: first
        return EngineError(ErrorCode.UNAVAILABLE, f"{name} at {url}: no connection within "
                                                  f"{limits.connect_timeout_s:g} s (--engine-connect-timeout-s)")
    if isinstance(failure, aiohttp.ServerTimeoutError):
        return EngineError(ErrorCode.TIMEOUT, f"{name} at {url} sent nothing for {limits.read_timeout_s:g} s "
                                              f"(--engine-read-timeout-s)")
    if isinstance(failure, asyncio.TimeoutError):
        return EngineError(ErrorCode.TIMEOUT, f"{name} at {url} sent no response headers within "
                                              f"{limits.header_timeout_s:g} s (--engine-header-timeout-s)")
    if isinstance(failure, LineTooLong):
        return EngineError(ErrorCode.ENGINE_ERROR, f"{name} sent an event over {max_event_bytes} bytes")
    if isinstance(failure, asyncio.TimeoutError):
        return EngineError(ErrorCode.ENGINE_TIMEOUT, f"{name} at {url} timed out: {failure}")
    if isinstance(failure, (aiohttp.ClientError, OSError)):       # refused, reset, closed mid-stream
        return EngineError(ErrorCode.ENGINE_UNAVAILABLE, f"{name} at {url}: {failure}")
    log.exception("%s sent what the adapter cannot read", name)
    return EngineError(ErrorCode.ENGINE_ERROR, f"{name} sent what the adapter cannot read: {failure!r}"[:500])


def guide_pattern(guide: Guide, engine: str) -> str:
    """The regex a Guide without a schema stands for: its own `pattern`, or a call of its tools in the
    model's tool-call format (what the pool's masks are compiled from). EngineError when it cannot be made."""
    try:
        return guide.pattern or tool_call_pattern(guide.tools, guide.tool_name, guide.tool_format or "hermes")
    except (ValueError, RegexError) as error:
        raise EngineError(ErrorCode.INVALID, f"cannot constrain {engine}'s output: {error}")


def message(raw: bytes) -> str:
    """The readable part of an engine's error body (OpenAI's {"error": {"message"}}, FastAPI's {"detail"}).

    >>> message(b'{"error": {"message": "prompt too long", "code": 400}}')
    'prompt too long'
    >>> message(b'{"detail": "Not Found"}')
    'Not Found'
    >>> message(b'<html>oops</html>')
    '<html>oops</html>'
    """
    try:
        body = msgspec.json.decode(raw)
        error = body.get("error")
        text = error.get("message") if isinstance(error, dict) else error or body.get("detail")
        return str(text or body)[:500]
    except (msgspec.DecodeError, AttributeError):
        return raw[:500].decode("utf-8", "replace")
