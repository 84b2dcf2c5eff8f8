"""One generation request from its body to its last byte: the prompt phase (render or encode, the context
check, the streams opened with the response's chunk format, the requests handed to the engine, the
headers), then the step loop's work (serving.py) until the response ends, and a whole response's body.

A burst of new requests waits for the pool here (bounded in bytes by --max-queued-bytes) rather than
overrunning its bounded in-flight requests.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Callable

import msgspec
from aiohttp import web
from aiohttp.http import SERVER_SOFTWARE, HttpVersion11
from aiohttp.web_response import rfc822_formatted_time

from tokworker.api.errors import CONTEXT_LENGTH, ApiError, check_vocabulary
from tokworker.api.plan import Plan
from tokworker.api.sent_bytes import sent_bytes
from tokworker.api.serving import Choice, Exchange
from tokworker.frontend.errors import PoolError
from tokworker.protocol.deltas import room
from tokworker.protocol.messages import ErrorCode, OpenStream
from tokworker.wire import home
from tokworker.wire.common import LAST_CHUNK, header_lines, http_chunk

EXCHANGE = web.RequestKey("tokworker.exchange", Exchange)
PROMPTS_PER_WORKER = 64      # requests in their prompt phase at once, per worker (the pool bounds its in-flight)
JSON_HEADERS = {"Content-Type": "application/json"}
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
# a direct stream's head around its Server-Timing and Date, in aiohttp's order (its prepare adds the last four)
_HEAD = "HTTP/1.1 200 OK\r\n" + "".join(f"{name}: {value}\r\n" for name, value in SSE_HEADERS.items()) + \
    "Server-Timing: "
_CHUNKED = "\r\nTransfer-Encoding: chunked\r\nDate: "
_HEAD_END = f"\r\nServer: {SERVER_SOFTWARE}\r\nConnection: close\r\n"
# a direct response's client may go as soon as its worker wrote the end, before that worker's step reply
# (which ends the exchange here) arrives: a disconnect ends it only if that reply has not come by then
DIRECT_GRACE_S = 1.0


class Generations:
    """The generation routes' work for one server (its pool, engine, step loop and options)."""

    def __init__(self, api):
        self.api = api
        self.pool, self.engine, self.serving, self.options = api.pool, api.engine, api.serving, api.options
        self.metrics = api.metrics
        self.queued_bytes = 0
        self._prompts_gate = asyncio.Semaphore(PROMPTS_PER_WORKER * len(self.pool.links))

    async def handle(self, request: web.Request, kind: type, planner: Callable) -> web.StreamResponse:
        if self.api.draining:
            raise ApiError(ErrorCode.SHUTTING_DOWN, "the server is shutting down")
        if self.serving.exchanges >= self.options.max_concurrent_requests:
            raise ApiError(ErrorCode.OVERLOADED, f"{self.serving.exchanges} requests in flight, the server's "
                                                 f"limit (--max-concurrent-requests)")
        arrived = time.perf_counter()
        raw = await self.api.read(request)
        plan = planner(self.api.decode(raw, kind), self.api.served)
        parsed = time.perf_counter()
        if self.queued_bytes + len(raw) > self.options.max_queued_bytes:
            raise ApiError(ErrorCode.OVERLOADED, f"{self.queued_bytes} bytes of requests wait for the pool, the "
                                                 f"server's limit (--max-queued-bytes)")
        self.queued_bytes += len(raw)
        try:
            await self.metrics.queued(self._prompts_gate.acquire())
        finally:
            self.queued_bytes -= len(raw)
        try:
            exchange, response = await self._start(request, plan, (parsed - arrived, time.perf_counter() - parsed))
        finally:
            self._prompts_gate.release()
        return await self._finish(exchange, response)

    async def prompts(self, plan: Plan) -> list[list[int]]:
        """A plan's prompts as ids: its messages rendered, or its completion prompts encoded and checked."""
        if plan.render is not None:
            return [(await self.pool.render(**plan.render)).ids]
        texts = [p for p in plan.prompts if isinstance(p, str)]
        encoded = iter(await self.pool.encode(texts, add_special_tokens=plan.add_special_tokens) if texts else ())
        prompts = [next(encoded) if isinstance(p, str) else p for p in plan.prompts]
        for prompt in prompts:
            check_vocabulary(prompt, self.pool.info.vocab_size, "prompt")
        return prompts

    def max_tokens(self, plan: Plan, prompt: list[int]) -> int:
        """The tokens a prompt may generate: the request's, or what the context leaves (ApiError past it)."""
        limit = self.api.served.max_model_len
        allowed = room(len(prompt), plan.max_tokens, limit)
        if allowed:
            return allowed
        field = "prompt" if plan.prompts is not None else "input" if plan.api == "responses" else "messages"
        if len(prompt) >= limit:
            raise ApiError(CONTEXT_LENGTH, f"the prompt is {len(prompt)} tokens, and this model's context is "
                                           f"{limit} tokens", field)
        raise ApiError.invalid(f"this model's context is {limit} tokens, and the request asks for "
                               f"{len(prompt) + plan.max_tokens} ({len(prompt)} in the prompt, "
                               f"{plan.max_tokens} to generate)", "max_tokens")

    async def _start(self, request: web.Request, plan: Plan, before: tuple[float, float]
                     ) -> tuple[Exchange, web.StreamResponse | None]:
        """The prompt phase: render (opening the streams in the same trip) or encode, check against the
        context, open the streams, hand the requests to the engine, and (streamed) send the headers. `before`:
        the seconds the body took to read and map, and to wait for its turn (the Server-Timing header's first
        parts)."""
        exchange = request[EXCHANGE] = Exchange(plan, int(time.time()),
                                                home(plan.api).id_prefix + secrets.token_hex(12))
        total = plan.n * (1 if plan.prompts is None else len(plan.prompts))
        exchange.choices = [Choice(f"{exchange.id}-{index}", index, exchange) for index in range(total)]
        began = time.perf_counter()
        if plan.render is not None:
            prompts = [await self._render_open(exchange)]
            rendered = opened = time.perf_counter()
            limits = [self.max_tokens(plan, prompts[0])]
        else:
            prompts = await self.prompts(plan)
            rendered = time.perf_counter()
            limits = [self.max_tokens(plan, prompt) for prompt in prompts]
            exchange.prompt_tokens = sum(len(p) for p in prompts)     # the usage chunk's, written in a worker
            await self._open(exchange, prompts, [msgspec.structs.replace(plan.params, max_tokens=limit)
                                                 for limit in limits], total)
            opened = time.perf_counter()
        exchange.prompt_ids = prompts
        exchange.prompt_tokens = sum(len(p) for p in prompts)
        self.metrics.prompt_tokens += exchange.prompt_tokens
        sampling = [msgspec.structs.replace(plan.sampling, max_tokens=limit) for limit in limits]
        # admitted: from here on, whatever is cancelled, the exchange ends exactly once (Serving.end)
        self.serving.admit(exchange)
        try:
            return await self._engage(request, exchange, prompts, sampling, before, (began, rendered, opened))
        except BaseException:
            self.serving.end(exchange, "the client disconnected before its response began")
            raise

    async def _engage(self, request, exchange: Exchange, prompts, sampling, before, marks):
        """Hand the admitted exchange's requests to the engine and (streamed) send the headers."""
        plan = exchange.plan
        began, rendered, opened = marks
        try:
            guide = plan.sampling.guide
            if guide is not None and guide.grammar is not None and not self.engine.grammars:
                raise ApiError.invalid(f"a GBNF grammar needs an engine that takes one (llama.cpp); this server's "
                                       f"engine is {self.engine.name}", plan.guide_param)
            # each choice its own seed (seed + index within its prompt's choices), as vLLM; one choice (the
            # usual request) is added without a task of its own
            adds = [self.engine.add(c.name, prompts[c.index // plan.n],
                                    sampling[c.index // plan.n].for_choice(c.index % plan.n)) for c in exchange.choices]
            await (adds[0] if len(adds) == 1 else asyncio.gather(*adds))
        except Exception as error:
            self.serving.fail(exchange, _guide_error(error, plan))
        if exchange.error is not None:
            raise exchange.error
        exchange.timing = (f"parse;dur={before[0] * 1e3:.2f}, queue;dur={before[1] * 1e3:.2f}, "
                           f"prompt;dur={(rendered - began) * 1e3:.2f}, open;dur={(opened - rendered) * 1e3:.2f}, "
                           f"engine;dur={(time.perf_counter() - opened) * 1e3:.2f}")
        response = None
        if plan.stream:
            direct = exchange.direct and request.version == HttpVersion11     # (chunked needs HTTP/1.1)
            if direct:
                # its worker writes the headers too, before its first events: aiohttp writes nothing of it
                if self._hand_over(exchange, request.transport, await _stream_head(request, exchange.timing)):
                    exchange.begin(request.transport)
                    return exchange, WrittenByWorker()
            response = web.StreamResponse(headers={**SSE_HEADERS, "Server-Timing": exchange.timing})
            response.enable_chunked_encoding()
            if direct:
                response.force_close()          # the same headers as its worker's would have been
            await response.prepare(request)
            exchange.begin(request.transport)
        elif exchange.direct:                   # the worker writes the whole response, its headers with it
            exchange.transport = request.transport
            self._hand_over(exchange, request.transport, await _head(request, exchange.timing))
        return exchange, response

    def _hand_over(self, exchange: Exchange, transport, head: bytes = b"") -> bool:
        """Direct responses: the streams' worker writes the rest itself (a streamed one: `head`, its status
        line and headers, then every choice's events and the tail; a whole response: the status line, `head`,
        the body), or, when it cannot take the socket at once, this process forwards the response as any other
        (a streamed one's headers written here first). True when the socket is on its way to the worker; False
        when this process keeps it: forwarded, or the hand-over failed (the exchange is ended)."""
        first, *others = exchange.choices
        fd = transport.get_extra_info("socket").fileno()
        if exchange.plan.stream:                # what was on the wire before its worker wrote (Generations._lost)
            exchange.handed_at = (sent_bytes(fd), len(head))
        try:
            exchange.direct = self.pool.hand_over(first.name, fd, [c.name for c in others], head)
        except (OSError, PoolError) as error:
            self.serving.end(exchange, f"its worker cannot take the client's socket: {error}")
            return False
        return exchange.direct

    async def _finish(self, exchange: Exchange, response: web.StreamResponse | None) -> web.StreamResponse:
        """Wait for the step loop to end the exchange; a whole response's body is written now."""
        try:
            await exchange.done
        except asyncio.CancelledError:
            if exchange.direct:         # its worker may have written its end already: its step reply says so
                asyncio.get_running_loop().call_later(DIRECT_GRACE_S, self.serving.end, exchange,
                                                      "the client disconnected")
            else:
                self.serving.end(exchange, "the client disconnected")
            raise
        if type(response) is WrittenByWorker:
            if self._lost(exchange):            # its worker died having written nothing: answered here
                raise exchange.error
            exchange.transport.close()          # the worker holds its own copy until its bytes are out
            return response
        if response is None:
            error = exchange.error
            if self._written_by_worker(exchange) and (error is None or error.code != ErrorCode.WORKER_LOST):
                # the worker wrote the response (or the error's); closing this copy of the socket, the
                # status here is only the access log's and the metrics' (aiohttp's write of it fails quietly)
                exchange.transport.close()
                return web.Response(status=200 if error is None else error.status)
            if error is not None:               # a lost worker wrote nothing: this process answers its error
                raise error
            return web.Response(body=self._whole(exchange), headers={**JSON_HEADERS, "Server-Timing": exchange.timing})
        if exchange.direct:
            # the worker wrote the body, its end included, and holds the socket until its bytes are out;
            # closing ours lets aiohttp's own end of the response fail quietly (nothing more is written)
            exchange.transport.close()
        elif not exchange.gone:
            await response.write(self._tail(exchange))
            await response.write_eof()
        return response

    def _lost(self, exchange: Exchange) -> bool:
        """A direct stream whose worker died (worker_lost) ends as well as the bytes on its socket allow:
        True when none of its worker's reached it (the API's own status and error body answer it, as for a
        request that failed before its response began); else, when its head is out and its worker never said
        it held bytes back (StreamUpdate.behind: the body stops at an event's end), the format's error event
        and the body's end are written here; otherwise (mid-chunk, or a socket without TCP's counts) the
        body stays cut, and the connection's close ends it."""
        error, transport = exchange.error, exchange.transport
        if error is None or error.code != ErrorCode.WORKER_LOST or exchange.handed_at is None or \
                transport.is_closing():
            return False
        before, head = exchange.handed_at
        now = sent_bytes(transport.get_extra_info("socket").fileno())
        if before is None or now is None:
            return False
        if now == before:
            return True
        if now - before >= head and not exchange.behind:
            transport.write(http_chunk(exchange.error_event(error)) + LAST_CHUNK)
        return False

    def _written_by_worker(self, exchange: Exchange) -> bool:
        """A direct whole response is its worker's to write, unless that worker died before its end (it wrote
        nothing) and its streams were rebuilt as forwarded ones on another."""
        streams = self.pool.streams
        return exchange.direct and all(getattr(streams.get(c.name), "sink", True) for c in exchange.choices)

    async def _render_open(self, exchange: Exchange):
        """A chat's prompt rendered and its choices' streams opened on it, in one trip to one worker; the
        prompt's ids (an array('I'), as its worker packed them). With direct streaming that worker writes the
        whole response to the client (the choices after the first write to the first one's socket). A prompt
        that leaves no room in the context opens nothing, and is refused here."""
        plan = exchange.plan
        params = msgspec.structs.replace(plan.params, max_tokens=plan.max_tokens)
        sink = self.options.direct_streaming
        base = msgspec.structs.replace(exchange.format, n=len(exchange.choices))
        first = exchange.choices[0].name
        opens = [OpenStream(stream_id=c.name, params=params, chunks=msgspec.structs.replace(base, index=c.index),
                            sink=sink, sink_of=first if sink and c.index else None) for c in exchange.choices]
        reply, streams = await self.pool.render_open(opens, self.api.served.max_model_len, **plan.render)
        if not streams:
            self.max_tokens(plan, reply.ids)          # raises: the worker applies the same rule
        exchange.direct = bool(streams) and all(stream.sink for stream in streams)
        return reply.ids

    async def _open(self, exchange: Exchange, prompts, params, total: int) -> None:
        """Completions: the first choice's stream opened on its prompt, then the others on its worker: one
        worker serves the response (with direct streaming, it writes all of it to the client)."""
        plan = exchange.plan
        opened = []
        sink = self.options.direct_streaming
        base = msgspec.structs.replace(exchange.format, n=total)
        first = exchange.choices[0]

        async def open_one(choice: Choice, beside: str | None = None):
            p = choice.index // plan.n
            chunks = msgspec.structs.replace(base, index=choice.index)
            stream = await self.pool.open_stream(
                choice.name, params[p], prompt_ids=prompts[p], buffer=False, chunks=chunks, sink=sink, beside=beside,
                prompt_tokens=exchange.prompt_tokens if total > 1 and beside is None else None)
            opened.append(stream)

        try:
            await open_one(first)
            await asyncio.gather(*(open_one(c, first.name) for c in exchange.choices[1:]))
        except BaseException:
            if opened:
                await asyncio.shield(self.pool.close_stream(*(stream.id for stream in opened)))
            raise
        exchange.direct = all(stream.sink for stream in opened)

    def _tail(self, exchange: Exchange) -> bytes:
        """What follows a streamed response's last event (the one usage chunk of several choices, [DONE])."""
        return exchange.home.tail(msgspec.structs.replace(exchange.format, n=len(exchange.choices)),
                                  [c.usage for c in exchange.choices], exchange.plan.include_usage,
                                  exchange.prompt_tokens)

    def _whole(self, exchange: Exchange) -> bytes:
        """A whole response: its choices' finished JSON from their workers, joined."""
        plan = exchange.plan
        return exchange.home.body(exchange.format, [c.body for c in exchange.choices],
                                  [c.usage for c in exchange.choices], exchange.prompt_tokens,
                                  exchange.prompt_ids[0] if plan.return_token_ids else None)


class WrittenByWorker(web.StreamResponse):
    """A direct streamed response whose worker wrote all of it, headers included (`_stream_head`): aiohttp
    prepares and ends nothing (its status is the access log's and the metrics')."""

    async def prepare(self, request):
        return None

    async def write_eof(self, data: bytes = b"") -> None:
        return None


async def _stream_head(request: web.Request, timing: str) -> bytes:
    """A direct streamed response's status line and headers, for its worker to write: what aiohttp's prepare
    writes for the same response (an HTTP/1.1 request; chunked, Connection: close, Date, Server, then what the
    apps' on_response_prepare signals add: CORS), byte for byte (tests/test_api_direct.py compares them). The
    signals get a response of their own to add to (tokworker's only adds), the rest is written as a string:
    half the CPU of building it in a response's headers."""
    response = web.StreamResponse()
    for app in request.match_info.apps:
        await app.on_response_prepare.send(request, response)
    added = "".join([f"{name}: {value}\r\n" for name, value in response.headers.items()])
    return f"{_HEAD}{timing}{_CHUNKED}{rfc822_formatted_time()}{_HEAD_END}{added}\r\n".encode()


async def _head(request: web.Request, timing: str) -> bytes:
    """A whole response's headers, for its worker to write: the JSON type, Server-Timing, and what the
    apps' on_response_prepare signals add (CORS), as aiohttp would send them."""
    response = web.Response(headers={**JSON_HEADERS, "Server-Timing": timing})
    for app in request.match_info.apps:
        await app.on_response_prepare.send(request, response)
    return header_lines(response.headers)


def _guide_error(error: Exception, plan: Plan) -> ApiError:
    """An engine's refusal; a constraint's names the field that asked for it."""
    api_error = ApiError.of(error)
    if plan.guide_param is not None and api_error.param is None and api_error.status == 400:
        api_error.param = plan.guide_param
    return api_error
