"""InProcessEngine: the base for an engine that runs inside the API process (the serving launcher's path).

Implement one method, `step(batch) -> [EngineOutput]`: given the running requests, return each one's
next ids (one per request for plain decoding). The base runs `step` in a thread of its own, so a step that
releases the GIL (a GPU kernel, numpy) leaves the event loop free; takes new and aborted requests between
steps; gives a constrained request its token mask for the step from the pool (`request.mask`, xgrammar's
bitmask layout: bit t % 32 of little-endian 32-bit word t // 32); ends requests at eos, a stop token id or
max_tokens; and hands every step's outputs to the server in one piece.

    class Greedy(InProcessEngine):
        name = "greedy"
        def step(self, batch):
            return [EngineOutput(r.request_id, [int(self.model([*r.prompt_ids, *r.output_ids]).argmax())])
                    for r in batch]

`request.prompt_ids` is what the server added: a chat's prompt comes as the worker packed it, an array('I')
(len, indexing, slicing, iteration, `tolist()`, the buffer protocol for numpy's `frombuffer`), a completion's
prompt as a list; no list of Python ints is built for the engine here.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Sequence

from tokworker.engines.base import Engine, EngineError, EngineOutput, SamplingParams
from tokworker.protocol.messages import ErrorCode


class Running:
    """One request inside an in-process engine: what step() reads (`output_ids` grows by the base)."""

    __slots__ = ("request_id", "prompt_ids", "sampling", "output_ids", "constraint", "state", "fed", "mask",
                 "accepting", "script")

    def __init__(self, request_id: str, prompt_ids: Sequence[int], sampling: SamplingParams, constraint=None):
        self.request_id = request_id
        self.prompt_ids = prompt_ids
        self.sampling = sampling
        self.output_ids: list[int] = []
        self.constraint = constraint               # a pool Constraint when sampling.guide is set
        self.state = constraint.initial_state if constraint is not None else 0
        self.fed = 0                               # output ids the constraint's state has seen
        self.mask: bytes | None = None             # this step's allowed tokens (constrained requests)
        self.accepting = False                     # the constraint may end here (eos allowed)
        self.script = None                         # free for a subclass (the replay engine's reply)


def allowed(mask: bytes, token_id: int) -> bool:
    """Whether `token_id`'s bit is set in an xgrammar-layout bitmask.

    >>> allowed(bytes([0b100, 0, 0, 0, 0, 0, 0, 0b1000_0000]), 2), allowed(bytes(8), 2), allowed(bytes([0] * 7 + [128]), 63)
    (True, False, True)
    """
    return bool(mask[token_id >> 3] >> (token_id & 7) & 1)


class InProcessEngine(Engine):
    """See the module's docstring. `step_interval`: the least time one step takes (a replay's pace)."""

    step_interval = 0.0

    def __init__(self):
        super().__init__()
        self.pool = None
        self.eos_ids: frozenset[int] = frozenset()
        self.running_table: dict[str, Running] = {}  # the engine thread's own table
        self.thread_id: int | None = None           # the engine thread's native id (the bench leaves its CPU out)
        self._inbox: list = []                      # ("add", Running) / ("abort", id), from the event loop
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closing = False

    async def start(self, pool) -> None:
        await super().start(pool)
        self.pool = pool
        self.eos_ids = frozenset(pool.info.eos_token_ids)
        self._thread = threading.Thread(target=self._run, name=f"{self.name}-engine", daemon=True)
        self._thread.start()

    async def add(self, request_id: str, prompt_ids: Sequence[int], sampling: SamplingParams) -> None:
        constraint = None
        guide = sampling.guide
        if guide is not None:
            constraint = await self.pool.compile(pattern=guide.pattern, json_schema=guide.json_schema,
                                                 tools=guide.tools, tool_name=guide.tool_name,
                                                 format=guide.tool_format or "hermes")
        running = Running(request_id, prompt_ids, sampling, constraint)
        await self.prepare(running)
        self._post(("add", running))

    async def prepare(self, running: Running) -> None:
        """A subclass's chance to do async work for a new request (on the event loop) before it runs."""

    def abort(self, request_ids: list[str]) -> None:
        for request_id in request_ids:
            self._post(("abort", request_id))

    async def close(self) -> None:
        with self._wake:
            self._closing = True
            self._wake.notify()
        if self._thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join)

    def step(self, batch: list[Running]) -> list[EngineOutput]:
        raise NotImplementedError

    def running(self) -> int:
        with self._wake:
            adds = sum(kind == "add" for kind, _ in self._inbox)
            return len(self.running_table) + adds

    # ------------------------------------------------------------ the engine thread
    def _post(self, item) -> None:
        with self._wake:
            self._inbox.append(item)
            self._wake.notify()

    def _run(self) -> None:
        self.thread_id = threading.get_native_id()
        running = self.running_table
        while True:
            with self._wake:
                while not (running or self._inbox or self._closing):
                    self._wake.wait()
                if self._closing:
                    return
                inbox, self._inbox = self._inbox, []
            for kind, item in inbox:
                if kind == "add":
                    running[item.request_id] = item
                else:
                    running.pop(item, None)
            if not running:
                continue
            began = time.monotonic()
            batch = list(running.values())
            failed = self._guide([r for r in batch if r.constraint is not None])
            batch = [r for r in batch if r.request_id not in failed]
            outputs = self.step(batch) if batch else []
            outputs += failed.values()
            self._finish(outputs)
            rest = self.step_interval - (time.monotonic() - began)
            self.emit_threadsafe(outputs)
            if rest > 0:            # at once: the loop thread woken for the outputs finds the GIL free
                time.sleep(rest)

    def _guide(self, batch: list[Running]) -> dict[str, EngineOutput]:
        """Each constrained request's mask for this step, from the pool (one guide message per worker)."""
        if not batch:
            return {}
        queries = {r.request_id: (r.constraint, r.state, r.output_ids[r.fed:]) for r in batch}
        answers = asyncio.run_coroutine_threadsafe(self.pool.guide(queries), self._loop).result()
        failed = {}
        for r in batch:
            answer = answers[r.request_id]
            if isinstance(answer, Exception):
                failed[r.request_id] = EngineOutput(r.request_id, [], finish="error", error=EngineError(
                    getattr(answer, "code", ErrorCode.INTERNAL), f"constraint: {answer}"))
                continue
            r.state, r.fed, r.mask, r.accepting = answer.state, len(r.output_ids), answer.mask, answer.accepting
        return failed

    def _finish(self, outputs: list[EngineOutput]) -> None:
        """Append each output's ids and end what is over: the engine's own finish, else eos (past
        min_tokens, unless ignore_eos), a stop token id, or max_tokens."""
        running, eos_ids = self.running_table, self.eos_ids
        for out in outputs:
            r = running.get(out.request_id)
            if r is None:
                continue
            r.output_ids += out.ids
            if out.finish is None and out.ids:
                sampling = r.sampling
                last = out.ids[-1]
                if len(r.output_ids) > sampling.min_tokens and (
                        (last in eos_ids and not sampling.ignore_eos) or last in sampling.stop_token_ids):
                    out.finish = "stop"
                elif len(r.output_ids) >= sampling.max_tokens:
                    out.finish = "length"
            if out.finish is not None:
                del running[out.request_id]
