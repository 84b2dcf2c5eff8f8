"""The one seam between the front door and an engine: token ids and sampling parameters in; per engine step,
each moved request's new ids, their logprobs and a finish out; an abort.

    engine.add("req-1", prompt_ids, SamplingParams(max_tokens=64))       # raises EngineError when refused
    while True:
        for out in await engine.outputs():     # every request that moved since the last call, one step's worth
            ...  out.request_id, out.ids, out.logprobs, out.finish
    engine.abort(["req-1"])

`prompt_ids` is a sequence of ints: a list, or (a chat's prompt, as the worker packed it) an array('I'), which
an engine that needs a list makes one of (`id_list`) and one that indexes or slices takes as it is.

An engine calls `self.emit(...)` whenever ids arrive (from a thread: `emit_threadsafe`); `outputs()` hands
out everything emitted since it was last called, merged per request, so ids that arrive between two ticks of
the server's loop become one `pool.step`. The server listens instead (`listen(on_outputs)`): its step loop is
called when outputs wait and takes them (`take_outputs()`), so an engine step costs no task's wake-up. The
pool never imports an engine: the server drives both.
"""

from __future__ import annotations

import asyncio
from typing import Sequence

import msgspec

from tokworker.protocol.messages import CodedError


def id_list(ids: Sequence[int]) -> list[int]:
    """Prompt ids as a list (what a JSON body carries): a list as it is, an array('I') through its tolist.

    >>> from array import array
    >>> id_list(array("I", [3, 70000])), id_list([5])
    ([3, 70000], [5])
    """
    return ids if type(ids) is list else ids.tolist()


class EngineError(CodedError):
    """An engine refused or failed a request; `code` is an ErrorCode value, so the HTTP status follows from it
    as from any pool error: what the request asked wrongly (invalid, too_large, unavailable: a capability the
    engine lacks), overloaded (429), or the engine's own failure: engine_error (a bad answer, 502),
    engine_unavailable (unreachable or loading, 503), engine_timeout (504)."""


class Guide(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """What the output must match, in the form the request gave it: one JSON value of `json_schema`
    (response_format), a call of `tools` in the model's `tool_format` (tool_choice "required", or the tool
    `tool_name`), a regex `pattern`, or a GBNF `grammar` (llama.cpp's own field: only an engine whose
    `grammars` is True takes it). An engine that takes a schema gets it as such; an in-process engine
    gets token masks the pool compiles from it (pool.compile takes the same fields but the grammar)."""

    json_schema: dict | None = None
    tools: list[dict] | None = None
    tool_name: str | None = None
    tool_format: str | None = None
    pattern: str | None = None
    grammar: str | None = None


# The sampling knobs, listed once (vLLM's names): a request's, a SamplingParams', each engine's (renamed there)
KNOBS = ("temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty", "frequency_penalty",
         "repetition_penalty")
SET_ONLY = ("stop_token_ids", "ignore_eos", "min_tokens", "logit_bias")     # sent where not [] / False / 0 / None


class SamplingParams(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    """One request's sampling, by vLLM's SamplingParams names (the server fans n out into n requests).
    `max_tokens` is always set: the request's, or what the context leaves after the prompt. A knob left None
    was not in the request: the engine's own default applies (vLLM takes it from the model's
    generation_config, llama-server from its flags). `logprobs`: how many alternatives per token (0: the
    sampled token's own), None: none. Stop strings are not here: the text side finds them and aborts."""

    max_tokens: int
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    stop_token_ids: list[int] = []
    ignore_eos: bool = False
    min_tokens: int = 0
    logprobs: int | None = None
    logit_bias: dict[int, float] | None = None
    guide: Guide | None = None

    def knobs(self, renamed: dict[str, str] | None = None, set_only: tuple = SET_ONLY) -> dict:
        """What the request set, under the engine's names (`renamed`: {our name: theirs}; the rest keep
        vLLM's): every knob of KNOBS that is not None, and each field of `set_only` that is not its
        default.

        >>> SamplingParams(max_tokens=8, temperature=0.0, min_tokens=2).knobs({"temperature": "temp"})
        {'temp': 0.0, 'min_tokens': 2}
        """
        renamed = renamed or {}
        out = {renamed.get(name, name): value for name in KNOBS if (value := getattr(self, name)) is not None}
        out.update((renamed.get(name, name), value) for name in set_only if (value := getattr(self, name)))
        return out

    def for_choice(self, index: int) -> "SamplingParams":
        """Choice `index`'s sampling among a request's n: its own seed, `seed + index` as vLLM gives each child
        of a seeded request, so seeded choices differ and each is reproducible.

        >>> [SamplingParams(max_tokens=8, seed=7).for_choice(i).seed for i in range(3)]
        [7, 8, 9]
        >>> SamplingParams(max_tokens=8).for_choice(2).seed is None
        True
        """
        if self.seed is None or index == 0:
            return self
        return msgspec.structs.replace(self, seed=self.seed + index)


class EngineOutput(msgspec.Struct, gc=False):
    """What one request produced since the engine's last step handed out: new ids, one
    `(logprob, [(id, logprob), ...])` per id when the request asked for logprobs, and `finish` once the
    engine ended it ("stop": eos or a stop token, "length": max_tokens or the context, "abort", "error";
    `error` then says why, as an EngineError)."""

    request_id: str
    ids: list[int]
    logprobs: list | None = None
    finish: str | None = None
    error: EngineError | None = None


class Engine:
    """Subclass and implement add() and abort(); start() and close() as the engine needs. `name` shows in
    logs; `max_model_len` is the context the engine gives one request (None: the server's flag decides).
    add() raises EngineError for what the engine cannot do (code unavailable: a Guide it cannot enforce)."""

    name = "engine"
    max_model_len: int | None = None
    grammars = False            # takes a Guide's GBNF grammar (the server refuses one, naming it, otherwise)

    def __init__(self):
        self._pending: dict[str, EngineOutput] = {}
        self._waiter: asyncio.Future | None = None    # outputs() waiting for the next emit
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listener = None                         # the server's step loop (listen)
        self._telling = False                         # a call to it is due on the loop's next turn

    async def start(self, pool) -> None:
        """Called once with the server's TokenizerPool before any request (an engine may guide or encode
        through it)."""
        self._loop = asyncio.get_running_loop()

    async def add(self, request_id: str, prompt_ids: Sequence[int], sampling: SamplingParams) -> None:
        raise NotImplementedError

    def abort(self, request_ids: list[str]) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        pass

    def running(self) -> int:
        """Requests the engine is working on (for /metrics and the tests' abort checks)."""
        return 0

    async def healthy(self) -> bool:
        """Whether the engine can take requests now (the server polls it in the background for /health; an
        engine reached over the network asks the engine's own health route). In-process: always."""
        return True

    # ------------------------------------------------------------ what every engine shares
    def emit(self, request_id: str, ids: list[int], logprobs: list | None = None, finish: str | None = None,
             error: EngineError | None = None) -> None:
        """Hand new ids of one request to the server's next step (on the event loop's thread)."""
        pending = self._pending.get(request_id)
        if pending is None:
            self._pending[request_id] = EngineOutput(request_id, ids, logprobs, finish, error)
        else:                                      # more ids before the server's loop came round: one step
            pending.ids = pending.ids + ids
            if logprobs is not None:
                pending.logprobs = (pending.logprobs or []) + logprobs
            pending.finish, pending.error = finish, error
        if self._listener is not None:
            if not self._telling:                  # what else arrives on this turn of the loop joins the step
                self._telling = True
                self._loop.call_soon(self._tell)
        elif self._waiter is not None:
            self._wake_outputs()

    def emit_threadsafe(self, outputs: list[EngineOutput]) -> None:
        """emit() for an engine that steps in a thread of its own: one hand-over per step."""
        self._loop.call_soon_threadsafe(self._emit_all, outputs)

    def _emit_all(self, outputs: list[EngineOutput]) -> None:
        if self._pending:
            for out in outputs:
                self.emit(out.request_id, out.ids, out.logprobs, out.finish, out.error)
            return
        self._pending = {out.request_id: out for out in outputs}     # the usual step: nothing waiting
        if outputs:
            if self._listener is not None:
                self._listener()
            elif self._waiter is not None:
                self._wake_outputs()

    def listen(self, on_outputs) -> None:
        """Have `on_outputs()` called on the loop's thread whenever outputs wait, for it to take them with
        take_outputs() (at once for a step handed over by emit_threadsafe; on the loop's next turn for ids
        emitted on it, so they gather into one step). None: outputs() again."""
        self._listener = on_outputs
        if on_outputs is not None and self._pending and not self._telling:
            self._telling = True
            self._loop.call_soon(self._tell)

    def _tell(self) -> None:
        self._telling = False
        if self._pending and self._listener is not None:
            self._listener()

    def take_outputs(self) -> list[EngineOutput]:
        """Everything emitted since the last call, at once (possibly nothing)."""
        pending, self._pending = self._pending, {}
        return list(pending.values())

    def _wake_outputs(self) -> None:
        waiter, self._waiter = self._waiter, None
        if not waiter.done():                      # else outputs() was cancelled
            waiter.set_result(None)

    async def outputs(self) -> list[EngineOutput]:
        """Everything emitted since the last call (waits for something: one future, which the next emit
        resolves)."""
        while not self._pending:
            self._waiter = waiter = self._loop.create_future()
            await waiter
        return self.take_outputs()
