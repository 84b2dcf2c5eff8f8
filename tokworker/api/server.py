"""The HTTP front door: OpenAI's and Anthropic's APIs over a TokenizerPool and an Engine, on aiohttp.

    api = Api(pool, engine, ApiOptions(served_model_name=["my-model"]))
    await api.start()                    # the engine, then the step loop
    app = api.app()                      # an aiohttp Application: run it, or mount it (app.add_subapp)

Routes: POST /v1/chat/completions, /v1/completions, /v1/responses, /v1/messages (streamed and whole; the
work of each is generation.py's), /v1/messages/count_tokens, /tokenize, /detokenize (vLLM's shapes); GET
/v1/models, /health (503 while draining, without a ready worker, or while the engine is down: health.py),
/metrics (Prometheus). API keys and CORS are access.py's. A request body is read once, bounded by
`max_request_bytes`, refused when it is declared another format than JSON or nests deeper than
bodies.MAX_DEPTH, and decoded into its Struct (a field it does not know is ignored and logged once).
Errors are the route's own body (OpenAI's; Anthropic's on /v1/messages*, vLLM's on its render tier's routes,
wherever the app is mounted) with the status their code implies, Retry-After on a 503, and one rate-limited
log line each (errorlog.py: a traceback only for a bug); the access log has one line per request.
"""

from __future__ import annotations

import asyncio
import logging
import time

import msgspec
from aiohttp import web, web_log

from tokworker.api.access import Access
from tokworker.api.count_tokens import CountTokens
from tokworker.api.errorlog import ErrorLog
from tokworker.api.errors import NOT_FOUND, ApiError, check_vocabulary, vllm_body
from tokworker.api.generation import EXCHANGE, Generations
from tokworker.api.fanout import priced
from tokworker.api.health import EngineHealth
from tokworker.api.limits import BodyBudget
from tokworker.api.metrics import Metrics
from tokworker.api.options import ApiOptions
from tokworker.api.plan import (Served, chat_messages, plain, plan_chat, plan_completion, plan_messages,
                                plan_responses, request_template_kwargs)
from tokworker.api.render import RenderTier, json_response
from tokworker.api.derender import DerenderTier
from tokworker.api.bodies import MAX_DEPTH, decode_body, nesting_over
from tokworker.api.requests import (ChatCompletionRequest, CompletionRequest, DetokenizeRequest, MessagesRequest,
                                    ResponsesRequest, TokenizeRequest)
from tokworker.api.serving import Serving
from tokworker.frontend.errors import PoolError
from tokworker.protocol.messages import ErrorCode
from tokworker.wire import home
from tokworker.wire.common import error_headers

log = logging.getLogger("tokworker.api")
IGNORED_LOGGED = 1024                   # distinct unknown fields logged (each once), then no more
JSON_TYPES = ("application/json", "application/octet-stream")    # or none, or a +json type
# every plan priced before any work: n and prompt lists fan out, and no max_tokens may pass the context
PRICED_CHAT, PRICED_COMPLETION = priced(plan_chat), priced(plan_completion)
PRICED_RESPONSES, PRICED_MESSAGES = priced(plan_responses), priced(plan_messages)


class Api:
    """See the module's docstring."""

    def __init__(self, pool, engine, options: ApiOptions | None = None, model_root: str = ""):
        self.pool = pool
        self.engine = engine
        self.options = options or ApiOptions()
        self.names = list(self.options.served_model_name) or [model_root or "default"]
        self.model_root = model_root
        self.metrics = Metrics(self.names[0])
        self.errors = ErrorLog(log)
        self.serving = Serving(pool, engine, self.metrics, self.options.max_buffer_bytes)
        self.served: Served | None = None
        self.draining = False
        self.created = int(time.time())
        self._loop_task: asyncio.Task | None = None
        self.generations: Generations | None = None
        self.metrics.gauges = self._gauges
        self._ignored_fields: set[tuple[str, str]] = set()
        self.metrics.running = engine.running
        self.watch = EngineHealth(engine, self.options.health_interval)
        options = self.options
        self.access = Access(options.api_key, metrics_open=options.metrics_open,
                             allowed_origins=options.allowed_origins, allowed_methods=options.allowed_methods,
                             allowed_headers=options.allowed_headers, allow_credentials=options.allow_credentials)
        self.bodies = BodyBudget(options.max_body_bytes_in_flight, options.body_timeout_s,
                                 options.max_body_bytes_per_client)

    async def start(self) -> None:
        await self.engine.start(self.pool)
        max_len = self.options.max_model_len or self.engine.max_model_len or 32768
        self.served = Served(self.names[0], self.pool.info.tool_parser, max_len, self.pool.info.vocab_size,
                             max_choices=min(self.options.max_concurrent_requests, self.pool.max_streams),
                             room=self._room)
        self.generations = Generations(self)
        self._loop_task = asyncio.create_task(self.serving.run(), name="tokworker-step-loop")
        self._loop_task.add_done_callback(_report_crash)
        self.watch.start()

    async def close(self) -> None:
        await self.watch.close()
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
        await self.engine.close()

    async def drain(self) -> None:
        """Take no new requests (503) and let those in flight run, at most drain_timeout; then end every
        one still open with finish_reason "abort" (its last event, its end) and wait for their handlers to
        write it, at most a second."""
        self.draining = True
        deadline = time.monotonic() + self.options.drain_timeout
        while self.serving.exchanges and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self.serving.exchanges:
            await self.serving.abort_all("the drain timeout")
            deadline = time.monotonic() + 1.0
            while self.serving.exchanges and time.monotonic() < deadline:
                await asyncio.sleep(0.01)

    def app(self) -> web.Application:
        access = self.access
        app = web.Application(client_max_size=self.options.max_request_bytes,
                              middlewares=[access.preflight, self._errors, access.authenticate, self.watch.gate])
        app.on_response_prepare.append(access.cors_headers)
        post = [("/v1/chat/completions", self.chat), ("/v1/completions", self.completions),
                ("/v1/responses", self.responses), ("/v1/messages", self.messages),
                ("/tokenize", self.tokenize), ("/detokenize", self.detokenize)]
        get = [("/v1/models", self.models), ("/health", self.health), ("/metrics", self.prometheus)]
        for path, handler in post:
            app.router.add_post(path, handler)
        for path, handler in get:
            app.router.add_get(path, handler)
        app.router.add_routes(RenderTier(self).routes() + DerenderTier(self).routes() + CountTokens(self).routes())
        return app

    # ------------------------------------------------------------ generation routes
    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self.generations.handle(request, ChatCompletionRequest, PRICED_CHAT)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self.generations.handle(request, CompletionRequest, PRICED_COMPLETION)

    def _room(self) -> int:
        """Choices a request may open now: each counts as a request and as a pool stream."""
        return min(self.options.max_concurrent_requests - self.serving.exchanges,
                   self.pool.max_streams - self.pool.open_streams)

    async def responses(self, request: web.Request) -> web.StreamResponse:
        return await self.generations.handle(request, ResponsesRequest, PRICED_RESPONSES)

    async def messages(self, request: web.Request) -> web.StreamResponse:
        return await self.generations.handle(request, MessagesRequest, PRICED_MESSAGES)

    async def read(self, request: web.Request) -> bytes:
        declared = request.content_type
        if "Content-Type" in request.headers and declared not in JSON_TYPES and not declared.endswith("+json"):
            raise ApiError.invalid(f"the body is declared {declared!r} (Content-Type): send JSON, as application/json")
        return await self.bodies.read(request, self.options.max_request_bytes)

    def decode(self, raw: bytes, kind: type):
        if nesting_over(raw, MAX_DEPTH):
            raise ApiError.invalid(f"the body nests arrays and objects deeper than {MAX_DEPTH} levels")
        try:
            body, unknown = decode_body(raw, kind)
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            raise ApiError.of(error) from None
        for field in unknown:
            self._ignored(kind, field)
        model = getattr(body, "model", None)
        if model is not None and model not in self.names:
            raise ApiError(NOT_FOUND, f"the model `{model}` does not exist (this server serves "
                                      f"{', '.join(self.names)})", "model")
        return body

    def _ignored(self, kind: type, field: str) -> None:
        """A field the body's Struct does not know is ignored, as vLLM ignores it, and logged once."""
        key = (kind.__name__, field[:100])
        if key in self._ignored_fields or len(self._ignored_fields) >= IGNORED_LOGGED:
            return
        self._ignored_fields.add(key)
        log.warning("a %s carried the field %r, which this server does not know: ignored (logged once)", *key)

    # ------------------------------------------------------------ the other routes
    async def tokenize(self, request: web.Request) -> web.Response:
        body = self.decode(await self.read(request), TokenizeRequest)
        if (body.prompt is None) == (body.messages is None):
            raise ApiError.invalid("give either prompt or messages", "prompt")
        if body.messages is not None:
            tools = [plain(t) for t in body.tools] if body.tools else None
            ids = (await self.pool.render(chat_messages(body.messages), tools,
                                          add_generation_prompt=body.add_generation_prompt,
                                          continue_final_message=body.continue_final_message,
                                          chat_template=body.chat_template,
                                          **request_template_kwargs(body.chat_template_kwargs))).ids
        else:
            add_special = True if body.add_special_tokens is None else body.add_special_tokens
            ids = await self.pool.encode(body.prompt, add_special_tokens=add_special)
        strings = None
        if body.return_token_strs:                          # one message for all of them, not one per token
            strings = await self.pool.decode([[i] for i in ids]) if ids else []
        return json_response({"count": len(ids), "max_model_len": self.served.max_model_len, "tokens": ids,
                              "token_strs": strings})

    async def detokenize(self, request: web.Request) -> web.Response:
        body = self.decode(await self.read(request), DetokenizeRequest)
        check_vocabulary(body.tokens, self.pool.info.vocab_size, "tokens")
        return json_response({"prompt": await self.pool.decode(body.tokens)})

    async def models(self, request: web.Request) -> web.Response:
        return json_response({"object": "list", "data": [
            {"id": name, "object": "model", "created": self.created, "owned_by": "tokworker",
             "root": self.model_root or name, "parent": None, "max_model_len": self.served.max_model_len}
            for name in self.names]})

    async def health(self, request: web.Request) -> web.Response:
        ready = not self.draining and self.watch.ok and any(link.ready for link in self.pool.links)
        return web.Response(status=200 if ready else 503)

    async def prometheus(self, request: web.Request) -> web.Response:
        return web.Response(text=self.metrics.text(), content_type="text/plain", charset="utf-8")

    def _gauges(self) -> dict:
        return {"tokworker_requests_running": ("HTTP requests being served.", self.serving.exchanges),
                "tokworker_streams_open": ("Streams open on the pool.", self.pool.open_streams),
                "tokworker_engine_requests_running": ("Requests the engine is working on.", self.engine.running()),
                "tokworker_pool_queue_depth": ("Requests in flight to the pool's workers.",
                                               sum(link.load for link in self.pool.links)),
                # read like the gauges, written as a counter (its name ends in _total)
                "tokworker_handover_fallbacks_total": ("Direct responses forwarded because their worker could "
                                                       "not take the client's socket at once.",
                                                       self.pool.handover_fallbacks)}

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
            self.errors.failed(request, failure)
            response = self._error_response(request, ApiError.of(failure), logged=True)
        self.metrics.request(route, response.status)
        return response

    def _error_response(self, request: web.Request, error: ApiError, status: int | None = None,
                        logged: bool = False) -> web.Response:
        """The error in the shape of the route's API, wherever the app is mounted."""
        status = status or error.status
        if not logged:
            self.errors.refused(request, status, error.code, error.message, error.param)
        return web.Response(status=status, body=error_body(request, error, status), headers=error_headers(status))


def error_body(request: web.Request, error: ApiError, status: int) -> bytes:
    """`error` in the shape of the API its route serves: read from the route's handler, not its path, so an
    app mounted under a prefix answers the same."""
    handler = request.match_info.handler
    if isinstance(getattr(handler, "__self__", None), (RenderTier, DerenderTier)):
        return vllm_body(error)
    api = ROUTE_API.get(getattr(handler, "__func__", None), "chat")
    return home(api).error_body(status, error.code, error.message, error.param)


# routes that answer in another API's error shape than OpenAI's
ROUTE_API = {Api.messages: "anthropic", CountTokens.count: "anthropic"}


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


def _report_crash(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("the step loop stopped", exc_info=task.exception())
