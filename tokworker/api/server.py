"""The HTTP front door: OpenAI's and Anthropic's APIs over a TokenizerPool and an Engine, on aiohttp.

    api = Api(pool, engine, ApiOptions(served_model_name=["my-model"]))
    await api.start()                    # the engine, then the step loop
    app = api.app()                      # an aiohttp Application: run it, or mount it (app.add_subapp)

Routes: POST /v1/chat/completions, /v1/completions, /v1/responses, /v1/messages (streamed and whole),
/tokenize, /detokenize (vLLM's shapes); GET /v1/models, /health, /metrics (Prometheus). A request body is
read once, bounded by `max_request_bytes`, decoded strictly into its Struct, mapped by plan.py, rendered by
the pool, and handed to the engine; its streams are opened with the response's chunk format, so a streamed
body is the SSE bytes the workers wrote, ending in `data: [DONE]` (chat and completions). Errors are
OpenAI's body (Anthropic's on /v1/messages) with the status their code implies.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from typing import Callable

import msgspec
from aiohttp import web, web_log

from tokworker.api import whole
from tokworker.api.errors import NOT_FOUND, ApiError, anthropic_body, openai_body
from tokworker.api.metrics import Metrics
from tokworker.api.plan import (Plan, Served, chat_messages, plain, plan_chat, plan_completion, plan_messages,
                                plan_responses)
from tokworker.api.requests import (ChatCompletionRequest, CompletionRequest, DetokenizeRequest, MessagesRequest,
                                    ResponsesRequest, TokenizeRequest)
from tokworker.api.serving import DONE, Choice, Exchange, Serving
from tokworker.frontend.errors import PoolError
from tokworker.protocol.deltas import ChunkFormat
from tokworker.protocol.messages import ErrorCode
from tokworker.sse.chat import usage_event

log = logging.getLogger("tokworker.api")
ID_PREFIX = {"chat": "chatcmpl-", "completions": "cmpl-", "responses": "resp_", "anthropic": "msg_"}
EXCHANGE = web.RequestKey("tokworker.exchange", Exchange)
PROMPTS_PER_WORKER = 64      # requests in their prompt phase at once, per worker (the pool bounds its in-flight)
_JSON = {"Content-Type": "application/json"}
_SSE = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


class ApiOptions(msgspec.Struct, kw_only=True):
    """The front door's settings (each is a `tokworker api` flag)."""

    served_model_name: list[str] = []        # the names requests may give as `model`; the first is reported
    max_model_len: int | None = None         # None: the engine's
    max_request_bytes: int = 32 * 1024 * 1024
    max_concurrent_requests: int = 4096
    max_buffer_bytes: int = 4 * 1024 * 1024  # a streamed response this far behind its client is cut
    max_queued_bytes: int = 64 * 1024 * 1024 # request bodies waiting for the pool to take their prompts
    direct_streaming: bool = False           # local workers write single-choice streamed bodies themselves
    drain_timeout: float = 30.0


class Api:
    """See the module's docstring."""

    def __init__(self, pool, engine, options: ApiOptions | None = None, model_root: str = ""):
        self.pool = pool
        self.engine = engine
        self.options = options or ApiOptions()
        self.names = list(self.options.served_model_name) or [model_root or "default"]
        self.model_root = model_root
        self.metrics = Metrics()
        self.serving = Serving(pool, engine, self.metrics, self.options.max_buffer_bytes)
        self.served: Served | None = None
        self.draining = False
        self.created = int(time.time())
        self._loop_task: asyncio.Task | None = None
        self._prompts_gate: asyncio.Semaphore | None = None
        self.queued_bytes = 0
        self.metrics.gauges = self._gauges

    async def start(self) -> None:
        await self.engine.start(self.pool)
        max_len = self.options.max_model_len or self.engine.max_model_len or 32768
        self.served = Served(self.names[0], self.pool.info.tool_parser, max_len)
        # A burst of new requests waits here for the pool, rather than overrunning its bounded in-flight
        # requests (which would answer 429 to work that only had to wait a moment).
        self._prompts_gate = asyncio.Semaphore(PROMPTS_PER_WORKER * len(self.pool.links))
        self._loop_task = asyncio.create_task(self.serving.run(), name="tokworker-step-loop")
        self._loop_task.add_done_callback(_report_crash)

    async def close(self) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
        await self.engine.close()

    async def drain(self) -> None:
        """Take no new requests (503) and wait for those in flight, at most drain_timeout."""
        self.draining = True
        deadline = time.monotonic() + self.options.drain_timeout
        while self.serving.exchanges and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.options.max_request_bytes, middlewares=[self._errors])
        post = [("/v1/chat/completions", self.chat), ("/v1/completions", self.completions),
                ("/v1/responses", self.responses), ("/v1/messages", self.messages),
                ("/tokenize", self.tokenize), ("/detokenize", self.detokenize)]
        get = [("/v1/models", self.models), ("/health", self.health), ("/metrics", self.prometheus)]
        for path, handler in post:
            app.router.add_post(path, handler)
        for path, handler in get:
            app.router.add_get(path, handler)
        return app

    # ------------------------------------------------------------ generation routes
    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, ChatCompletionRequest, plan_chat)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, CompletionRequest, plan_completion)

    async def responses(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, ResponsesRequest, plan_responses)

    async def messages(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, MessagesRequest, plan_messages)

    async def _generate(self, request: web.Request, kind: type, planner: Callable) -> web.StreamResponse:
        if self.draining:
            raise ApiError(ErrorCode.SHUTTING_DOWN, "the server is shutting down")
        if self.serving.exchanges >= self.options.max_concurrent_requests:
            raise ApiError(ErrorCode.OVERLOADED, f"{self.serving.exchanges} requests in flight, the server's "
                                                 f"limit (--max-concurrent-requests)")
        arrived = time.perf_counter()
        raw = await self._read(request)
        plan = planner(self._decode(raw, kind), self.served)
        parsed = time.perf_counter()
        if self.queued_bytes + len(raw) > self.options.max_queued_bytes:
            raise ApiError(ErrorCode.OVERLOADED, f"{self.queued_bytes} bytes of requests wait for the pool, the "
                                                 f"server's limit (--max-queued-bytes)")
        self.queued_bytes += len(raw)
        try:
            await self._prompts_gate.acquire()
        finally:
            self.queued_bytes -= len(raw)
        try:
            exchange, response = await self._start(request, plan, (parsed - arrived, time.perf_counter() - parsed))
        finally:
            self._prompts_gate.release()
        return await self._finish(exchange, response)

    async def _read(self, request: web.Request) -> bytes:
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise ApiError(ErrorCode.TOO_LARGE, f"the request body is over {self.options.max_request_bytes} bytes "
                                                f"(--max-request-bytes)") from None

    def _decode(self, raw: bytes, kind: type):
        try:
            body = msgspec.json.decode(raw, type=kind)
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            raise ApiError.of(error) from None
        model = getattr(body, "model", None)
        if model is not None and model not in self.names:
            raise ApiError(NOT_FOUND, f"the model `{model}` does not exist (this server serves "
                                      f"{', '.join(self.names)})", "model")
        return body

    async def _prompts(self, plan: Plan) -> list[list[int]]:
        if plan.render is not None:
            return [(await self.pool.render(**plan.render)).ids]
        texts = [p for p in plan.prompts if isinstance(p, str)]
        encoded = iter(await self.pool.encode(texts, add_special_tokens=plan.add_special_tokens) if texts else ())
        prompts = [next(encoded) if isinstance(p, str) else p for p in plan.prompts]
        vocab = self.pool.info.vocab_size
        for prompt in prompts:
            bad = next((i for i in prompt if not 0 <= i < vocab), None)
            if bad is not None:
                raise ApiError.invalid(f"token id {bad} is not in the vocabulary (0..{vocab - 1})", "prompt")
        return prompts

    def _max_tokens(self, plan: Plan, prompt: list[int]) -> int:
        limit = self.served.max_model_len
        field = "prompt" if plan.prompts is not None else "input" if plan.api == "responses" else "messages"
        if len(prompt) >= limit:
            raise ApiError(ErrorCode.TOO_LARGE, f"the prompt is {len(prompt)} tokens, and this model's context is "
                                                f"{limit} tokens", field)
        if plan.max_tokens is None:
            return limit - len(prompt)
        if len(prompt) + plan.max_tokens > limit:
            raise ApiError.invalid(f"this model's context is {limit} tokens, and the request asks for "
                                   f"{len(prompt) + plan.max_tokens} ({len(prompt)} in the prompt, "
                                   f"{plan.max_tokens} to generate)", "max_tokens")
        return plan.max_tokens

    async def _start(self, request: web.Request, plan: Plan, before: tuple[float, float]
                     ) -> tuple[Exchange, web.StreamResponse | None]:
        """The prompt phase: render or encode, check against the context, open the streams, hand the
        requests to the engine, and (streamed) send the headers. `before`: the seconds the body took to
        read and map, and to wait for its turn (the Server-Timing header's first parts)."""
        exchange = request[EXCHANGE] = Exchange(plan, ID_PREFIX[plan.api] + secrets.token_hex(12), int(time.time()))
        began = time.perf_counter()
        prompts = await self._prompts(plan)
        rendered = time.perf_counter()
        limits = [self._max_tokens(plan, prompt) for prompt in prompts]
        exchange.prompt_ids = prompts
        exchange.prompt_tokens = sum(len(p) for p in prompts)
        self.metrics.prompt_tokens += exchange.prompt_tokens
        total = len(prompts) * plan.n
        for p, prompt in enumerate(prompts):
            for j in range(plan.n):
                index = p * plan.n + j
                exchange.choices.append(Choice(f"{exchange.id}-{index}", index, exchange, not plan.stream))
        params = [msgspec.structs.replace(plan.params, max_tokens=limit) for limit in limits]
        sampling = [msgspec.structs.replace(plan.sampling, max_tokens=limit) for limit in limits]
        await self._open(exchange, prompts, params, total)
        opened = time.perf_counter()
        self.serving.admit(exchange)
        try:
            await asyncio.gather(*(self.engine.add(c.name, prompts[c.index // plan.n], sampling[c.index // plan.n])
                                   for c in exchange.choices))
        except Exception as error:
            self.serving.fail(exchange, _guide_error(error, plan))
        if exchange.error is not None:
            raise exchange.error
        exchange.timing = (f"parse;dur={before[0] * 1e3:.2f}, queue;dur={before[1] * 1e3:.2f}, "
                           f"prompt;dur={(rendered - began) * 1e3:.2f}, open;dur={(opened - rendered) * 1e3:.2f}, "
                           f"engine;dur={(time.perf_counter() - opened) * 1e3:.2f}")
        response = None
        if plan.stream:
            response = web.StreamResponse(headers={**_SSE, "Server-Timing": exchange.timing})
            response.enable_chunked_encoding()
            if exchange.direct:
                response.force_close()          # "Connection: close": the connection ends with the worker's body
            await response.prepare(request)
            if exchange.direct:
                self._hand_over(exchange, request.transport)
            exchange.begin(request.transport)
        return exchange, response

    def _hand_over(self, exchange: Exchange, transport) -> None:
        """Direct streaming: the headers are out; the stream's worker writes the rest of the body itself."""
        choice = exchange.choices[0]
        try:
            self.pool.hand_over(choice.name, transport.get_extra_info("socket").fileno())
        except (OSError, PoolError) as error:
            self.serving.end(exchange, f"its worker cannot take the client's socket: {error}")

    async def _finish(self, exchange: Exchange, response: web.StreamResponse | None) -> web.StreamResponse:
        """Wait for the step loop to end the exchange; a whole response's body is written now."""
        try:
            await exchange.done
        except asyncio.CancelledError:
            self.serving.end(exchange, "the client disconnected")
            raise
        if response is None:
            if exchange.error is not None:
                raise exchange.error
            return web.Response(body=msgspec.json.encode(self._whole(exchange)),
                                headers={**_JSON, "Server-Timing": exchange.timing})
        if exchange.direct:
            # the worker wrote the body, its end included, and holds the socket until its bytes are out;
            # closing ours lets aiohttp's own end of the response fail quietly (nothing more is written)
            exchange.transport.close()
        elif not exchange.gone:
            await response.write(self._tail(exchange))
            await response.write_eof()
        return response

    async def _open(self, exchange: Exchange, prompts, params, total: int) -> None:
        plan = exchange.plan
        opened = []

        direct = plan.stream and total == 1 and self.options.direct_streaming

        async def open_one(choice: Choice):
            p = choice.index // plan.n
            chunks = ChunkFormat(id=exchange.id, model=plan.model, created=exchange.created, index=choice.index,
                                 api=plan.api, n=total, echo=plan.echo) if plan.stream else None
            stream = await self.pool.open_stream(choice.name, params[p], prompt_ids=prompts[p], buffer=False,
                                                 chunks=chunks, sink=direct)
            exchange.direct = stream.sink
            opened.append(choice.name)

        try:
            await asyncio.gather(*(open_one(c) for c in exchange.choices))
        except BaseException:
            if opened:
                await asyncio.shield(self.pool.close_stream(*opened))
            raise
        if plan.echo and not plan.stream:
            texts = await self.pool.decode(prompts, skip_special_tokens=plan.params.skip_special_tokens)
            exchange.prefixes = [texts[c.index // plan.n] for c in exchange.choices]

    def _tail(self, exchange: Exchange) -> bytes:
        """What follows a streamed response's last event: the one usage chunk of several choices, [DONE]."""
        plan = exchange.plan
        if plan.api not in ("chat", "completions"):
            return b""
        tail = b""
        if plan.include_usage and len(exchange.choices) > 1:
            tail = usage_event(exchange.id, plan.model, exchange.created, [c.usage for c in exchange.choices],
                               object="chat.completion.chunk" if plan.api == "chat" else "text_completion")
        return tail + DONE

    def _whole(self, exchange: Exchange) -> dict:
        plan = exchange.plan
        collected = [c.collected for c in exchange.choices]
        logprobs = plan.params.logprobs is not None
        if plan.api == "chat":
            return whole.chat_completion(exchange.id, plan.model, exchange.created, collected, exchange.prompt_tokens,
                                         exchange.prompt_ids[0] if plan.return_token_ids else None, logprobs)
        if plan.api == "completions":
            prefixes = exchange.prefixes or [""] * len(collected)
            return whole.text_completion(exchange.id, plan.model, exchange.created, collected,
                                         exchange.prompt_tokens, prefixes, logprobs, plan.return_token_ids)
        if plan.api == "responses":
            return whole.response_object(exchange.id, plan.model, exchange.created, collected[0],
                                         exchange.prompt_tokens, logprobs)
        return whole.anthropic_message(exchange.id, plan.model, collected[0], exchange.prompt_tokens)

    # ------------------------------------------------------------ the other routes
    async def tokenize(self, request: web.Request) -> web.Response:
        body = self._decode(await self._read(request), TokenizeRequest)
        if (body.prompt is None) == (body.messages is None):
            raise ApiError.invalid("give either prompt or messages", "prompt")
        if body.messages is not None:
            tools = [plain(t) for t in body.tools] if body.tools else None
            ids = (await self.pool.render(chat_messages(body.messages), tools,
                                          add_generation_prompt=body.add_generation_prompt,
                                          continue_final_message=body.continue_final_message,
                                          chat_template=body.chat_template,
                                          **(body.chat_template_kwargs or {}))).ids
        else:
            add_special = True if body.add_special_tokens is None else body.add_special_tokens
            ids = await self.pool.encode(body.prompt, add_special_tokens=add_special)
        strings = [await self.pool.decode([i]) for i in ids] if body.return_token_strs else None
        return _json({"count": len(ids), "max_model_len": self.served.max_model_len, "tokens": ids,
                      "token_strs": strings})

    async def detokenize(self, request: web.Request) -> web.Response:
        body = self._decode(await self._read(request), DetokenizeRequest)
        vocab = self.pool.info.vocab_size
        bad = next((i for i in body.tokens if i >= vocab), None)
        if bad is not None:
            raise ApiError.invalid(f"token id {bad} is not in the vocabulary (0..{vocab - 1})", "tokens")
        return _json({"prompt": await self.pool.decode(body.tokens)})

    async def models(self, request: web.Request) -> web.Response:
        return _json({"object": "list", "data": [
            {"id": name, "object": "model", "created": self.created, "owned_by": "tokworker",
             "root": self.model_root or name, "parent": None, "max_model_len": self.served.max_model_len}
            for name in self.names]})

    async def health(self, request: web.Request) -> web.Response:
        ready = not self.draining and any(link.ready for link in self.pool.links)
        return web.Response(status=200 if ready else 503)

    async def prometheus(self, request: web.Request) -> web.Response:
        return web.Response(text=self.metrics.text(), content_type="text/plain", charset="utf-8")

    def _gauges(self) -> dict:
        return {"tokworker_requests_running": ("HTTP requests being served.", self.serving.exchanges),
                "tokworker_streams_open": ("Streams open on the pool.", self.pool.open_streams),
                "tokworker_engine_requests_running": ("Requests the engine is working on.", self.engine.running()),
                "tokworker_pool_queue_depth": ("Requests in flight to the pool's workers.",
                                               sum(link.load for link in self.pool.links))}

    # ------------------------------------------------------------ errors
    @web.middleware
    async def _errors(self, request: web.Request, handler) -> web.StreamResponse:
        route = request.match_info.route.resource.canonical if request.match_info.route.resource else "other"
        try:
            response = await handler(request)
        except web.HTTPException as http:
            code = NOT_FOUND if http.status == 404 else ErrorCode.INVALID
            error = ApiError(code, f"{request.method} {request.path}: {http.reason}")
            response = self._error_response(request, error, http.status)
        except (ApiError, PoolError, msgspec.ValidationError) as failure:
            response = self._error_response(request, ApiError.of(failure))
        except asyncio.CancelledError:
            self.metrics.request(route, 499)
            raise
        except Exception as failure:
            log.exception("%s %s failed", request.method, request.path)
            response = self._error_response(request, ApiError.of(failure))
        self.metrics.request(route, response.status)
        return response

    def _error_response(self, request: web.Request, error: ApiError, status: int | None = None) -> web.Response:
        body = anthropic_body(error) if request.path == "/v1/messages" else openai_body(error)
        return web.Response(status=status or error.status, body=body, headers=_JSON)


class AccessLogger(web_log.AbstractAccessLogger):
    """One line per request: who, what, the status, the request's id, its tokens in and out, the bytes its
    body took (written here, or by the worker for a direct stream: "direct"), and the time it took."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        exchange = request.get(EXCHANGE)
        if exchange is None:
            detail = f"{response.body_length}B"
        else:
            body = "direct" if exchange.direct else f"{exchange.bytes_out or response.body_length}B"
            detail = f"{exchange.id} prompt={exchange.prompt_tokens} generated={exchange.tokens} {body}"
        self.logger.info('%s "%s %s" %d %s %.3fs', request.remote, request.method, request.path_qs,
                         response.status, detail, time)


def _guide_error(error: Exception, plan: Plan) -> ApiError:
    """An engine's refusal; a constraint's names the field that asked for it."""
    api_error = ApiError.of(error)
    if plan.guide_param is not None and api_error.param is None and api_error.status == 400:
        api_error.param = plan.guide_param
    return api_error


def _json(data) -> web.Response:
    return web.Response(body=msgspec.json.encode(data), headers=_JSON)


def _report_crash(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("the step loop stopped", exc_info=task.exception())
