"""ReplayEngine: scripted replies at a fixed step rate, one token per request per step, for the demo, the
tests and the bench. It generates nothing: every reply is a script, and it says so.

The reply of a request is `script(prompt_text, sampling)` when a script is given and returns text, else:
- a constrained request (tool_choice required or named, response_format): the shortest text the
  constraint's regex accepts (its DFA's nearest accepting path), so it is a valid call or JSON value;
- otherwise REPLY.
The reply is encoded with the model's tokenizer and ends with its eos. Each step, a constrained request's
token is checked against the mask the pool gave for that step (the masks reach the engine, as they would a
real sampler), and each token gets a logprob and alternatives when the request asked for them.

The shortest text is found in a thread of the engine's own, never on the event loop: a constraint's DFA can
take a second or two of CPU to build (regex_dfa prices and bounds that work, and caches it by pattern), and
requests waiting for one take turns there while the loop serves everyone else. The ids of REPLY and of the
last SCRIPTS_KEPT constraints' texts are encoded once and shared by every request that plays them.
"""

from __future__ import annotations

import asyncio
import random
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from tokworker.constrain.regex_dfa import compile_dfa
from tokworker.engines.base import EngineError, EngineOutput, SamplingParams
from tokworker.engines.inprocess import InProcessEngine, Running, allowed
from tokworker.protocol.messages import ErrorCode

SCRIPTS_KEPT = 256      # replies kept encoded (REPLY and the shortest text of each recent constraint)
REPLY = "This reply is scripted: tokworker's replay engine plays it back one token per step, it is not a model."


class ReplayEngine(InProcessEngine):
    """`script(prompt_text, sampling) -> reply text or None` (None: see the module's docstring); `step_interval`
    seconds a step (the engine's fixed step rate)."""

    name = "replay"

    def __init__(self, script: Callable[[str, SamplingParams], str | None] | None = None, step_interval: float = 0.01,
                 max_model_len: int = 32768):
        super().__init__()
        self.script = script
        self.step_interval = step_interval
        self.max_model_len = max_model_len
        # one thread: compile_dfa's cache is never shared between threads, and compiles take turns
        self._compiler = ThreadPoolExecutor(1, thread_name_prefix="replay-compile")
        # the ids of a reply every such request shares (None: REPLY; else a constraint's pattern), as one
        # future each, so a thousand choices of one request encode (and compile) once, not a thousand times
        self._scripts: OrderedDict[str | None, asyncio.Future] = OrderedDict()

    async def close(self) -> None:
        await super().close()
        self._compiler.shutdown(wait=False, cancel_futures=True)

    async def prepare(self, running: Running) -> None:
        if self.script is not None:
            text = self.script(await self.pool.decode(running.prompt_ids), running.sampling)
            if text is not None:
                running.script = await self.pool.encode(text) + list(self.pool.info.eos_token_ids[:1])
                return
        key = running.constraint.pattern if running.constraint is not None else None
        kept = self._scripts.get(key)
        if kept is None:
            kept = self._scripts[key] = asyncio.ensure_future(self._encoded(key))
            kept.add_done_callback(lambda done: done.cancelled() or done.exception() is None
                                   or self._scripts.pop(key, None))
            while len(self._scripts) > SCRIPTS_KEPT:
                self._scripts.popitem(last=False)
        else:
            self._scripts.move_to_end(key)
        running.script = await asyncio.shield(kept)        # shared: step() only reads it

    async def _encoded(self, pattern: str | None) -> list[int]:
        """The ids of REPLY (pattern None) or of the shortest text `pattern` accepts, eos last."""
        text = REPLY
        if pattern is not None:
            text = await asyncio.get_running_loop().run_in_executor(self._compiler, shortest_match, pattern)
        return await self.pool.encode(text) + list(self.pool.info.eos_token_ids[:1])

    def step(self, batch: list[Running]) -> list[EngineOutput]:
        outputs, vocab_size = [], self.pool.info.vocab_size
        for r in batch:
            script = r.script
            at = len(r.output_ids)
            token = script[at] if at < len(script) else script[-1]
            if r.mask is not None and not allowed(r.mask, token) and not (r.accepting and token in self.eos_ids):
                outputs.append(EngineOutput(r.request_id, [], finish="error", error=EngineError(
                    ErrorCode.INVALID, f"the replay script's token {token} at {at} is outside the constraint")))
                continue
            top = r.sampling.logprobs
            logprobs = None if top is None else [_logprob(token, at, top, vocab_size)]
            outputs.append(EngineOutput(r.request_id, [token], logprobs))
        return outputs


def _logprob(token: int, at: int, top: int, vocab_size: int) -> tuple[float, list[tuple[int, float]]]:
    """A made-up but well-formed entry: the sampled token first among its alternatives."""
    own = -0.125 * (1 + at % 4)
    return own, [(token, own)] + [((token + k) % vocab_size, own - k) for k in range(1, top)]


def shortest_match(pattern: str) -> str:
    """The text the regex's DFA reaches an accepting state by soonest (ties broken the same way each time).

    >>> shortest_match('\\\\{"city": "[a-z]*"\\\\}')
    '{"city": ""}'
    """
    try:
        return compile_dfa(pattern).sample(random.Random(0), max_bytes=0).decode("utf-8")
    except (ValueError, UnicodeDecodeError) as exc:
        raise EngineError(ErrorCode.INVALID, f"the replay engine cannot write text for this constraint: {exc}")
