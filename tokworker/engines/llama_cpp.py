"""llama.cpp's `llama-server` as an engine: token ids in, token ids out, over its own /completion route.

Each request is one streamed POST /completion with the prompt as a list of ids, `return_tokens` (each event
carries the ids it generated), `n_probs` for logprobs and `cache_prompt` (the slot keeps the prompt's KV for a
follow-up turn). A forced tool call reaches it as a GBNF grammar (the regex the pool's masks come from,
translated by tokworker.constrain.gbnf), response_format as `json_schema`. Abort closes the request's
connection, which llama-server answers by freeing the slot. llama-server's text, stop strings and chat
templates are never used: tokworker renders and reads every token itself.

    engine = LlamaCppEngine("http://127.0.0.1:8080")
"""

from __future__ import annotations

import asyncio
import logging

import msgspec

from tokworker.constrain.gbnf import regex_to_gbnf
from tokworker.constrain.regex_syntax import RegexError
from tokworker.constrain.tool_choice import tool_call_pattern
from tokworker.engines.base import Engine, EngineError, SamplingParams
from tokworker.protocol.messages import ErrorCode

log = logging.getLogger("tokworker.engines")
STATUS_CODES = {400: ErrorCode.INVALID, 404: ErrorCode.UNAVAILABLE, 413: ErrorCode.TOO_LARGE,
                429: ErrorCode.OVERLOADED, 501: ErrorCode.UNAVAILABLE, 503: ErrorCode.OVERLOADED}
STOP_TYPES = {"eos": "stop", "word": "stop", "limit": "length"}
KNOBS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p", "seed": "seed",
         "repetition_penalty": "repeat_penalty", "presence_penalty": "presence_penalty",
         "frequency_penalty": "frequency_penalty"}


class _Top(msgspec.Struct):
    id: int
    logprob: float


class _Probability(msgspec.Struct):
    id: int
    logprob: float
    top_logprobs: list[_Top] = []


class _Event(msgspec.Struct):
    tokens: list[int] = []
    stop: bool = False
    stop_type: str = "none"
    completion_probabilities: list[_Probability] = []


_decode_event = msgspec.json.Decoder(_Event).decode


class LlamaCppEngine(Engine):
    name = "llama.cpp"

    def __init__(self, url: str, *, cache_prompt: bool = True, max_connections: int = 256,
                 connect_timeout: float = 10.0):
        super().__init__()
        self.url = url.rstrip("/")
        self.cache_prompt = cache_prompt
        self.max_connections = max_connections
        self.connect_timeout = connect_timeout
        self.session = None
        self.tasks: dict[str, asyncio.Task] = {}

    async def start(self, pool) -> None:
        import aiohttp

        await super().start(pool)
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=self.max_connections),
                                             timeout=aiohttp.ClientTimeout(sock_connect=self.connect_timeout))
        try:
            async with self.session.get(self.url + "/props") as response:
                props = await response.json(content_type=None)
        except (aiohttp.ClientError, OSError, ValueError) as error:
            await self.session.close()
            raise EngineError(ErrorCode.UNAVAILABLE, f"llama-server at {self.url} does not answer /props: {error}")
        settings = props.get("default_generation_settings") or {}
        self.max_model_len = settings.get("n_ctx") or props.get("n_ctx")
        vocab = (props.get("model") or {}).get("n_vocab") if isinstance(props.get("model"), dict) else None
        if vocab is not None and vocab != pool.info.vocab_size:
            log.warning("llama-server's vocabulary has %d tokens, the pool's %d: is it the same model?",
                        vocab, pool.info.vocab_size)

    async def close(self) -> None:
        for task in list(self.tasks.values()):
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        if self.session is not None:
            await self.session.close()

    def running(self) -> int:
        return len(self.tasks)

    def body(self, prompt_ids: list[int], sampling: SamplingParams) -> dict:
        """The /completion request for these ids and this sampling (llama-server's own names)."""
        body = {"prompt": prompt_ids, "stream": True, "return_tokens": True, "cache_prompt": self.cache_prompt,
                "n_predict": sampling.max_tokens, "ignore_eos": sampling.ignore_eos, **sampling.knobs(KNOBS)}
        if sampling.logprobs is not None:
            body["n_probs"] = max(sampling.logprobs, 1)       # the sampled token's own needs one
        if sampling.logit_bias:
            body["logit_bias"] = [[token, bias] for token, bias in sampling.logit_bias.items()]
        guide = sampling.guide
        if guide is not None:
            if guide.json_schema is not None:
                body["json_schema"] = guide.json_schema
            else:
                try:
                    pattern = guide.pattern or tool_call_pattern(guide.tools, guide.tool_name,
                                                                 guide.tool_format or "hermes")
                    body["grammar"] = regex_to_gbnf(pattern)
                except (ValueError, RegexError) as error:
                    raise EngineError(ErrorCode.INVALID, f"cannot constrain llama.cpp's output: {error}")
        return body

    async def add(self, request_id: str, prompt_ids: list[int], sampling: SamplingParams) -> None:
        body = self.body(prompt_ids, sampling)
        accepted = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(self._stream(request_id, body, sampling.logprobs, accepted))
        self.tasks[request_id] = task
        task.add_done_callback(lambda _: self.tasks.pop(request_id, None))
        await accepted                     # llama-server's refusal (a bad grammar, a long prompt) is add()'s

    def abort(self, request_ids: list[str]) -> None:
        for request_id in request_ids:
            task = self.tasks.pop(request_id, None)
            if task is not None:
                task.cancel()              # closes the connection: llama-server frees the slot

    async def _stream(self, request_id: str, body: dict, logprobs: int | None, accepted: asyncio.Future) -> None:
        import aiohttp

        emit = self.emit
        try:
            async with self.session.post(self.url + "/completion", json=body) as response:
                if response.status != 200:
                    raise EngineError(STATUS_CODES.get(response.status, ErrorCode.INTERNAL),
                                      f"llama-server answered {response.status}: {_message(await response.read())}")
                accepted.set_result(None)
                async for line in response.content:
                    if not line.startswith(b"data: "):
                        continue
                    event = _decode_event(line[6:])
                    finish = STOP_TYPES.get(event.stop_type, "stop") if event.stop else None
                    if event.tokens or finish is not None:
                        emit(request_id, event.tokens, _logprobs(event, logprobs), finish)
                    if finish is not None:
                        return
            raise EngineError(ErrorCode.INTERNAL, "llama-server ended the stream without a stop event")
        except asyncio.CancelledError:
            raise
        except (EngineError, aiohttp.ClientError, OSError, msgspec.DecodeError) as failure:
            error = failure if isinstance(failure, EngineError) else \
                EngineError(ErrorCode.UNAVAILABLE, f"llama-server at {self.url}: {failure}")
            if not accepted.done():
                accepted.set_exception(error)
            else:
                emit(request_id, [], finish="error", error=error)


def _logprobs(event: _Event, top: int | None) -> list | None:
    if top is None:
        return None
    return [(p.logprob, [(t.id, t.logprob) for t in p.top_logprobs[:top]] or [(p.id, p.logprob)])
            for p in event.completion_probabilities]


def _message(raw: bytes) -> str:
    try:
        error = msgspec.json.decode(raw)
        return str(error.get("error", {}).get("message") or error)[:500]
    except (msgspec.DecodeError, AttributeError):
        return raw[:500].decode("utf-8", "replace")
