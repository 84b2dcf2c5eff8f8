"""Whether the engine can take requests, known before anyone asks: a background task polls the engine's own
health (`Engine.healthy()`: llama-server's, vLLM's or SGLang's /health; in-process engines always are, and are
not polled) every `interval` seconds, so /health answers from memory (a load balancer's probe costs the engine nothing) and a
generation request meets a 503 with Retry-After at once while the engine is unreachable or loading, instead
of waiting on a connection that will fail.

    watch = EngineHealth(engine, interval=1.0)
    watch.start()                  # after engine.start(): the engine answered then
    watch.ok                       # the last poll's answer
    app = web.Application(middlewares=[..., watch.gate])
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from tokworker.api.errors import ApiError
from tokworker.engines.base import Engine
from tokworker.protocol.messages import ErrorCode

log = logging.getLogger("tokworker.api")
GENERATION_ROUTES = frozenset(("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages"))


class EngineHealth:
    """See the module's docstring. A poll that takes longer than `interval` (bounded by the engine's own
    health timeout) counts as unhealthy."""

    def __init__(self, engine, interval: float = 1.0):
        self.engine = engine
        self.interval = interval
        self.ok = True                     # engine.start() succeeded: it answered
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Poll in the background, unless the engine has no health of its own to ask (in-process engines are
        always healthy): then nothing wakes the loop for it."""
        if type(self.engine).healthy is not Engine.healthy:
            self._task = asyncio.create_task(self._poll(), name="tokworker-engine-health")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                ok = await asyncio.wait_for(self.engine.healthy(), timeout=max(self.interval, 2.0))
            except asyncio.TimeoutError:
                ok = False
            except Exception:                          # a bug in an adapter must not end the watch
                log.exception("%s: the health check failed", self.engine.name)
                ok = False
            if ok != self.ok:
                log.log(logging.INFO if ok else logging.WARNING, "the %s engine is %s", self.engine.name,
                        "healthy again" if ok else "unreachable or not ready: /health answers 503")
            self.ok = ok

    @web.middleware
    async def gate(self, request: web.Request, handler):
        """A generation request while the engine is down: 503 engine_unavailable (with Retry-After)."""
        if not self.ok and request.path in GENERATION_ROUTES:
            raise ApiError(ErrorCode.ENGINE_UNAVAILABLE, f"the {self.engine.name} engine is unreachable or still "
                                                         f"loading; retry later")
        return await handler(request)
