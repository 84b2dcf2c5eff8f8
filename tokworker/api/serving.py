"""The one owner of the engine step loop: each engine step's ids go to the pool in one `pool.step`, and each
stream's update goes to its HTTP response, written straight to the client's transport. The loop is the
engine's listener (Engine.listen): an engine step calls it, so no task wakes for one.

One Exchange per HTTP request (its plan, its choices, its response), one Choice per stream (n choices, or
prompts x n for Completions). A streamed choice's SSE bytes are written by the loop as they arrive, framed as
HTTP/1.1 chunks on the transport, so no per-request task wakes per step; a whole response's choices are
gathered in their workers, and each sends its finished JSON once, with its end. The loop aborts the engine's
request when the text side ends a stream first (a stop string, a stop token id), and ends the exchange when
its client goes away or falls more than `max_buffer_bytes` behind.
"""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial

from tokworker.api.errors import ApiError
from tokworker.api.metrics import Metrics
from tokworker.frontend.errors import PoolError
from tokworker.protocol.deltas import ChunkFormat
from tokworker.protocol.messages import ErrorCode, StreamError
from tokworker.wire import home
from tokworker.wire.common import http_chunk

log = logging.getLogger("tokworker.api")


class Choice:
    """One stream of an exchange: its name on the pool and in the engine, its index in the response, and
    (whole) the choice's finished JSON from its worker."""

    __slots__ = ("name", "index", "exchange", "body", "engine_done", "usage", "ended", "last_at", "finish")

    def __init__(self, name: str, index: int, exchange: "Exchange"):
        self.name = name
        self.index = index
        self.exchange = exchange
        self.body = b""
        self.engine_done = False
        self.usage = None
        self.ended = False
        self.last_at = 0.0                  # its engine output before this one (inter-token latency)
        self.finish: str | None = None      # its finish reason (request_success)


class Exchange:
    """One HTTP request being served: its choices, its transport (streamed) and the future its handler
    awaits. `error` is set when it failed before the response began (then the handler answers it). `home`
    writes what the API process writes of it (tokworker.wire): the whole body from the choices' bodies, the
    tail, the errors."""

    __slots__ = ("plan", "id", "created", "choices", "transport", "backlog", "done", "closed", "started_at",
                 "first_at", "tokens", "open", "error", "gone", "prompt_tokens", "prompt_ids", "timing",
                 "direct", "bytes_out", "home", "format", "events", "numbered", "behind", "handed_at")

    def __init__(self, plan, created: int, id: str):
        self.plan = plan
        self.home = home(plan.api)
        self.id = id
        self.created = created
        # what every choice's format repeats (its index aside)
        self.format = ChunkFormat(id=id, model=plan.model, created=created, api=plan.api, echo=plan.echo,
                                  whole=not plan.stream, token_ids=plan.return_token_ids and not plan.stream)
        self.numbered = plan.api == "responses"   # its events carry sequence numbers
        self.events = 0                    # ... and so many were forwarded (an error event numbers its own)
        self.choices: list[Choice] = []
        self.transport = None
        self.backlog: list[bytes] | None = [] if plan.stream else None   # events before the headers went out
        self.done = asyncio.get_running_loop().create_future()
        self.closed = False                # over: done, failed or dropped (a cancelled handler cancels `done`)
        self.started_at = time.monotonic()
        self.first_at: float | None = None
        self.tokens = 0
        self.open = 0
        self.error: ApiError | None = None
        self.gone = False                  # the client disconnected or fell behind
        self.prompt_tokens = 0
        self.prompt_ids: list[list[int]] = []
        self.timing = ""                   # the Server-Timing header: the prompt phase's parts
        self.direct = False                # its worker writes the body to the client (direct streaming)
        self.bytes_out = 0                 # body bytes written here (the access log's)
        self.behind = False                # direct: its worker said it holds bytes its client has not taken
        self.handed_at: tuple | None = None   # direct, streamed: (bytes its socket had sent, head's length)

    def write(self, data: bytes, limit: int) -> bool:
        """Write one HTTP/1.1 chunk; False when the client is gone or more than `limit` bytes behind. A
        directly streamed body is its worker's to write: nothing is written here (its worker's death is ended
        by the handler: Generations._lost)."""
        if self.direct:
            return True
        transport = self.transport
        if transport is None:
            if self.backlog is None:
                return False
            self.backlog.append(data)
            return True
        if transport.is_closing() or transport.get_write_buffer_size() > limit:
            return False
        transport.write(http_chunk(data))
        self.bytes_out += len(data)
        return True

    def error_event(self, error: ApiError) -> bytes:
        """`error` as the last event of this response, in its format."""
        return self.home.error_event(self.format, error.status, error.code, error.message, error.param,
                                     self.events)

    def begin(self, transport) -> None:
        """The response's headers are out: from now on events go straight to the client."""
        self.transport = transport
        backlog, self.backlog = self.backlog, None
        for data in backlog or ():
            transport.write(http_chunk(data))


class Serving:
    """See the module's docstring. `run()` listens to the engine until cancelled; `admit` registers an
    exchange's choices before the engine sees them; `end` ends an exchange from outside (client gone, handler
    cancelled)."""

    def __init__(self, pool, engine, metrics: Metrics, max_buffer_bytes: int):
        self.pool = pool
        self.engine = engine
        self.metrics = metrics
        self.max_buffer_bytes = max_buffer_bytes
        self.choices: dict[str, Choice] = {}
        self.exchanges = 0
        self._stepping = False             # a step waits for its answer (_step)
        pool.on_news = self._deliver_each  # what a direct stream's worker tells between the steps' answers

    def _deliver_each(self, updates: dict) -> None:
        """Each update to its choice (one already ended is skipped): a step's answer, or news."""
        choices = self.choices
        for name, update in updates.items():
            choice = choices.get(name)
            if choice is not None:
                self._deliver(choice, update)

    def _fail_each(self, names, error: Exception) -> None:
        """A pool step of these streams failed: each one's exchange fails with it."""
        choices = self.choices
        for name in names:
            choice = choices.get(name)
            if choice is not None:
                self.fail(choice.exchange, ApiError.of(error))

    def admit(self, exchange: Exchange) -> None:
        for choice in exchange.choices:
            self.choices[choice.name] = choice
        exchange.open = len(exchange.choices)
        self.exchanges += 1

    async def run(self) -> None:
        """The step loop, as the engine's listener (Engine.listen) until cancelled."""
        self.engine.listen(self._step)
        try:
            await asyncio.get_running_loop().create_future()
        finally:
            self.engine.listen(None)

    def _step(self) -> None:
        """What the engine has waiting goes to the pool as one step. One step at a time: while one waits for
        its answer, the engine's next outputs gather, and go once it comes (each stream's ids in order)."""
        if self._stepping:
            return
        take = self.engine.take_outputs
        while True:
            outputs = take()
            if not outputs:
                return
            step, finish, aborted = self._gather(outputs)
            if not step and not finish:
                continue
            try:
                sent = self.pool.submit_step(step, finish, aborted)
            except Exception as error:
                self._step_failed(step, error)
                continue
            if not sent.done():
                self._stepping = True
                sent.add_done_callback(partial(self._answered, step))
                return
            self._answer(step, sent)

    def _answered(self, step: dict, sent: asyncio.Future) -> None:
        self._stepping = False
        self._answer(step, sent)
        self._step()

    def _answer(self, step: dict, sent: asyncio.Future) -> None:
        if sent.cancelled():
            self._step_failed(step, PoolError(ErrorCode.CLOSED, "the pool closed before the step was answered"))
        elif (error := sent.exception()) is not None:
            self._step_failed(step, error)
        else:
            self._deliver_each(sent.result())

    def _step_failed(self, step: dict, error: Exception) -> None:
        """A PoolError, or a bug: those streams fail, the steps go on."""
        if not isinstance(error, PoolError):
            log.error("a step of %d streams failed", len(step), exc_info=error)
        self._fail_each(step, error)

    def _gather(self, outputs: list) -> tuple[dict, list, list]:
        """The engine's outputs as one pool step: (ids by stream, those it ends, those of them aborted);
        what fails in the engine fails its exchange here."""
        choices, gap, now = self.choices, self.metrics.gap, time.monotonic()
        step, finish, aborted = {}, [], []
        for out in outputs:
            choice = choices.get(out.request_id)
            if choice is None:
                continue
            if out.error is not None:
                choice.engine_done = True
                self.fail(choice.exchange, ApiError.of(out.error))
                continue
            ids = out.ids
            exchange = choice.exchange
            if choice.last_at:
                gap(now - choice.last_at)
            if exchange.first_at is None and ids:
                exchange.first_at = now
                self.metrics.first_token.observe(now - exchange.started_at)
            choice.last_at = now
            exchange.tokens += len(ids)
            step[out.request_id] = ids if out.logprobs is None else (ids, out.logprobs)
            if out.finish is not None:
                choice.engine_done = True
                finish.append(out.request_id)
                if out.finish == "abort":
                    aborted.append(out.request_id)
        return step, finish, aborted

    def _deliver(self, choice: Choice, update) -> None:
        exchange = choice.exchange
        sse = update.sse
        if sse:
            if not exchange.write(sse, self.max_buffer_bytes):
                self.end(exchange, "the client went away" if exchange.transport is None or
                         exchange.transport.is_closing() else
                         f"the client fell more than {self.max_buffer_bytes} bytes behind")
                return
            if exchange.numbered:                     # an error event numbers itself after these
                exchange.events += sse.count(b"\n\n")
        finish_reason = update.finish_reason
        if finish_reason is None:
            if update.behind:
                exchange.behind = True
            return
        if finish_reason == "error":
            self.fail(exchange, ApiError(getattr(update, "code", ErrorCode.INTERNAL),
                                         getattr(update, "message", "") or "the stream failed"))
            return
        choice.usage = update.usage
        choice.body = update.body
        choice.finish = finish_reason
        # a direct stream's abort: its worker can no longer write to the client (a whole response's worker
        # writes its end, aborted or not)
        if finish_reason == "abort" and exchange.direct and exchange.plan.stream:
            self.end(exchange, "the client went away")
            return
        self._end_choice(choice)

    async def abort_all(self, why: str) -> None:
        """End every open choice now with finish_reason "abort" (the drain timeout): each response gets its
        last event (or its whole body) and its end in its format, and the engine's requests are aborted."""
        names = list(self.choices)
        if not names:
            return
        log.info("%s: %d streams end with finish_reason abort", why, len(names))
        try:
            updates = await self.pool.step({}, names, names)
        except PoolError as error:
            updates = {}
            self._fail_each(names, error)
        self._deliver_each(updates)
        for name in names:                  # a stream the pool had already closed ends here all the same
            choice = self.choices.get(name)
            if choice is not None:
                self.end(choice.exchange, why)

    def _end_choice(self, choice: Choice) -> None:
        if choice.ended:
            return
        choice.ended = True
        self.choices.pop(choice.name, None)
        if not choice.engine_done:
            self.engine.abort([choice.name])
        exchange = choice.exchange
        exchange.open -= 1
        if exchange.open == 0:
            self._close(exchange)

    def _close(self, exchange: Exchange) -> None:
        if exchange.closed:
            return
        exchange.closed = True
        self.exchanges -= 1
        if not exchange.done.done():
            exchange.done.set_result(None)
        end = time.monotonic()
        self.metrics.latency.observe(end - exchange.started_at)
        self.metrics.closed(exchange)
        self.metrics.generation_tokens += exchange.tokens
        if exchange.first_at is not None and exchange.tokens > 1:
            self.metrics.per_token.observe((end - exchange.first_at) / (exchange.tokens - 1))

    def fail(self, exchange: Exchange, error: ApiError) -> None:
        """A choice failed: a whole response fails as a whole (its handler answers the error); a streamed one
        gets the error event and ends (a direct one from its worker, which owns the body's bytes)."""
        if exchange.closed:
            return
        exchange.error = error
        if exchange.direct:
            self._drop(exchange, StreamError(error.status, error.code, error.message, error.param))
            return
        if exchange.transport is not None:            # the response began: the error is its last event
            exchange.write(exchange.error_event(error), self.max_buffer_bytes)
        self._drop(exchange)

    def end(self, exchange: Exchange, why: str) -> None:
        """The client is gone (or hopelessly behind): abort its engine requests and close its streams now."""
        if exchange.closed:
            return
        exchange.gone = True
        log.info("%s: %s; its engine requests are aborted", exchange.id, why)
        self._drop(exchange)

    def _drop(self, exchange: Exchange, error: StreamError | None = None) -> None:
        """End the exchange now: its engine requests aborted, its streams closed (a direct one's worker
        first writes `error` to the client), its handler woken."""
        if exchange.direct and exchange.transport is not None and error is None:
            exchange.transport.close()
        names = [c.name for c in exchange.choices if not c.ended]
        for choice in exchange.choices:
            choice.ended = True
            self.choices.pop(choice.name, None)
        aborted = [c.name for c in exchange.choices if not c.engine_done]
        if aborted:
            self.engine.abort(aborted)
        if names:
            asyncio.ensure_future(self._close_streams(names, error))
        self._close(exchange)

    async def _close_streams(self, names: list[str], error: StreamError | None = None) -> None:
        try:
            await self.pool.close_stream(*names, error=error)
        except PoolError as error:
            log.debug("closing streams %s: %s", names, error)
