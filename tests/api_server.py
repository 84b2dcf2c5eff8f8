"""A real front door for the tests: `tokworker.api` on a real pool of worker processes and an engine (the
replay engine unless one is given),
served by aiohttp on a free loopback port from a thread of its own (its own uvloop loop), so the tests drive
it with the real, synchronous `openai` and `anthropic` SDKs and can still look at the server's state.

The replay engine plays a script chosen by the last user message: SCENARIOS maps a word in it to a reply."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import uvloop
from aiohttp import web

from tokworker.api.options import ApiOptions
from tokworker.api.server import Api
from tokworker.engines.replay import ReplayEngine
from tokworker.frontend import TokenizerPool

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}\n</tool_call>'
SCENARIOS = {
    "plain": "Hello there, 日本語 🧑‍🚀 naïve café.",
    "reasoning": "<think>\nThe user greets me; 東京 is far.\n</think>\n\nHello there, 日本語 🧑‍🚀 naïve café.",
    "tools": "<think>\nThey want the weather: I call the tool.\n</think>\n\nChecking." + CALL,
    "long": " ".join(f"word{i}" for i in range(400)),
    "stop": "Answer: 42. END and then some text the client must never see.",
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather.", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius",
                                                                                                   "fahrenheit"]}},
    "required": ["city"]}}},
         {"type": "function", "function": {"name": "get_time", "parameters": {
             "type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}]


def script(prompt_text: str, sampling) -> str | None:
    """The reply for a prompt: the scenario its last user turn names; None (the replay engine's own choice:
    the constraint's shortest text, else REPLY) for a constrained request or one that names none."""
    if sampling.guide is not None:
        return None
    last = prompt_text.rsplit("<|im_start|>user", 1)[-1]
    for name, reply in SCENARIOS.items():
        if f"scenario:{name}" in last:
            return reply
    return None


class Server:
    """The server's loop, its Api and its base URL; stop() shuts it all down."""

    def __init__(self, step_interval: float = 0.002, options: ApiOptions | None = None, engine=None, **spawn):
        self.loop = uvloop.new_event_loop()
        self.started = threading.Event()
        self.failure: BaseException | None = None
        self._stop: asyncio.Event | None = None
        self._args = (engine or ReplayEngine(script, step_interval=step_interval, max_model_len=4096),
                      options or ApiOptions(served_model_name=["tokworker-test"]), spawn)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.started.wait(120)
        if self.failure is not None:
            raise self.failure

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._serve())
        finally:                                # the loop's executor threads (pool and engine shutdown) end too
            self.loop.run_until_complete(self.loop.shutdown_default_executor())
            self.loop.close()

    async def _serve(self) -> None:
        self.engine, options, spawn = self._args
        try:
            self.pool = await TokenizerPool.spawn(workers=spawn.pop("workers", 2), **spawn)
            self.api = Api(self.pool, self.engine, options)
            await self.api.start()
            self.runner = web.AppRunner(self.api.app(), handler_cancellation=True)
            await self.runner.setup()
            site = web.TCPSite(self.runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]
            self.url = f"http://127.0.0.1:{self.port}"
            self._stop = asyncio.Event()
        except BaseException as error:
            self.failure = error
            self.started.set()
            return
        self.started.set()
        await self._stop.wait()
        await self.runner.cleanup()
        await self.api.close()
        await self.pool.close()

    def call(self, coroutine, timeout: float = 30):
        """Run a coroutine on the server's loop (to look at its state between SDK calls)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def settled(self, within: float = 1.0) -> None:
        """Nothing left running in the engine or the step loop within `within` seconds (aborts land at the
        engine's next step)."""
        began = time.monotonic()
        while self.engine.running() or self.api.serving.choices:
            assert time.monotonic() - began < within, "still running after the response ended"
            time.sleep(0.005)

    def stop(self) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(60)


@contextlib.contextmanager
def running(**kwargs):
    server = Server(**kwargs)
    try:
        yield server
    finally:
        server.stop()
