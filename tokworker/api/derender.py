"""vLLM's derender routes (what `vllm launch render` serves beside render.py's): an engine's generated ids
back into OpenAI's responses, in vLLM 0.33's request and response shapes.

    POST /v1/chat/completions/derender   {generate_response, chat_request, prompt_token_ids, ...}
                                         -> chat.completion
                                         {stream: true, generate_chunk, stream_state, ...}
                                         -> {chunk: chat.completion.chunk, stream_state}
    POST /v1/completions/derender        the same with generate_responses / completion_request
                                         -> text_completion, or {chunk: text_completion, stream_state}

How a stream's state is kept. vLLM makes the client carry it (`stream_state`: a detokenizer window, and
with a parser every id so far, replayed through a fresh parser on every call). Here each streamed sequence
is a pool stream, opened in a worker on its first call and stepped by each later one, so a call costs its
own ids, and stop strings work (vLLM refuses them in streamed derender). Its worker writes each call's
choice in the format's shape (tokworker.wire.derender, the home that writes the whole routes' bodies too).
The stream is found by what the client sends, `generate_chunk.request_id` and the choice's `index`, among
the streams of that client alone: its owner is the client's address with the Authorization header it sent,
so another client naming the same request_id finds nothing (`unknown`). `stream_state: null` opens it
(again, if it was open), any other value continues it, and the `stream_state` returned is a valid
DerenderStreamState the client hands back unread.

The kept streams have budgets of their own, all clients together: a count (ApiOptions.derender_max_streams,
and never more than half the pool's stream capacity, so the generation routes keep the rest; a whole call's
streams count while it runs) and bytes (each is charged its ids, ~8 bytes each, plus a fixed cost:
ApiOptions.derender_state_bytes). Before a stream opens, those idle for `derender_idle_s` seconds are
closed, then while one more would be over a budget the least recently used stream of the client holding the
most bytes, so one client's unfinished sequences displace its own first. A call for a closed stream gets a 400
that says so; the client starts over with `stream_state: null`.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from typing import Annotated, Literal

import msgspec
from aiohttp import web
from msgspec import Meta

from tokworker.api.errors import ApiError, check_vocabulary
from tokworker.api.generation import JSON_HEADERS
from tokworker.api.plan import plan_chat, plan_completion
from tokworker.api.render import vllm_errors
from tokworker.api.requests import Body, ChatCompletionRequest, CompletionRequest, NonNegative
from tokworker.frontend.errors import UnknownStream
from tokworker.protocol.deltas import ChunkFormat, StreamParams, Usage
from tokworker.protocol.messages import ErrorCode
from tokworker.wire import home

PLAIN = StreamParams(tool_parser="none")        # no request to read tools from: text (and reasoning) only
TEXT_ONLY = StreamParams(tool_parser="none", reasoning_parser="none")
MAX_CHOICES = 128                               # choices of one generate response (the front door's n)
STREAM_COST = 4096                              # bytes a kept stream is charged besides its ids
ID_COST = 8                                     # bytes per id (the pool's copy and the worker's text)
PROMPT_IDS, PROMPT_IDS_EACH = list[NonNegative] | None, list[list[NonNegative] | None] | None


# ---------------------------------------------------------------- vLLM's shapes (token_in_token_out/protocol.py)

class GenerateLogProb(Body, kw_only=True):
    token_id: NonNegative
    logprob: float
    rank: int | None = None


class GenerateLogProbsContent(GenerateLogProb, kw_only=True):
    top_logprobs: list[GenerateLogProb] = []


class GenerateLogProbs(Body, kw_only=True):
    content: list[GenerateLogProbsContent] | None = None


class GenerateChoice(Body, kw_only=True):
    index: NonNegative = 0
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[NonNegative] | None = None
    logprobs: GenerateLogProbs | None = None


class GenerateUsage(Body, kw_only=True):
    prompt_tokens: NonNegative = 0
    completion_tokens: NonNegative | None = 0


class GenerateResponse(Body, kw_only=True):
    request_id: str
    choices: Annotated[list[GenerateChoice], Meta(max_length=MAX_CHOICES)]
    output_mode: Literal["tokens"] = "tokens"
    usage: GenerateUsage | None = None
    prompt_token_ids: list[NonNegative] | None = None


class DerenderRequest(Body, kw_only=True):
    """What both routes' bodies share, streamed and whole (vLLM tells them apart by `stream`)."""

    stream: bool = False
    model: str | None = None
    generate_chunk: GenerateResponse | None = None               # streamed: one chunk of one sequence
    stream_state: dict | None = None


class DerenderChatRequest(DerenderRequest, kw_only=True):
    generate_response: GenerateResponse | None = None
    prompt_tokens: int | None = None
    prompt_token_ids: list[NonNegative] | None = None
    chat_request: ChatCompletionRequest | None = None


class DerenderCompletionRequest(DerenderRequest, kw_only=True):
    generate_responses: list[GenerateResponse] | None = None     # whole: one per prompt
    prompt_tokens: int | list[int] | None = None                 # streamed: a count; whole: one per response
    prompt_token_ids: list | None = None          # streamed: ids; whole: one list (or null) per response
    completion_request: CompletionRequest | None = None


class Kept:
    """One streamed sequence kept in the workers, and whose it is."""

    __slots__ = ("name", "owner", "charge", "used", "created")

    def __init__(self, name: str, owner: bytes, prompt_ids: list[int]):
        self.name, self.owner = name, owner
        self.charge = STREAM_COST + ID_COST * len(prompt_ids)
        self.used = time.monotonic()
        self.created = int(time.time())


class DerenderTier:
    """The derender routes of one Api (see the module's docstring)."""

    def __init__(self, api):
        self.api = api
        self.max_state_bytes = api.options.derender_state_bytes
        self.max_streams = api.options.derender_max_streams
        self.idle_s = api.options.derender_idle_s
        # (owner, api, request_id, index) -> Kept, least recently used first; and the same per owner
        self.kept: OrderedDict[tuple[bytes, str, str, int], Kept] = OrderedDict()
        self.by_owner: dict[bytes, OrderedDict] = {}
        self.owner_bytes: dict[bytes, int] = {}
        self.state_bytes = 0
        self.passing = 0                          # streams of whole calls, open while their call runs
        self.serial = 0

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1/chat/completions/derender", self.chat),
                web.post("/v1/completions/derender", self.completions)]

    @vllm_errors
    async def chat(self, request: web.Request) -> web.Response:
        body = self.api.decode(await self.api.read(request), DerenderChatRequest)
        params = _params(plan_chat, body.chat_request, self.api.served, PLAIN, body.stream)
        if body.stream:
            return await self._chunk(body, "derender_chat", params, body.prompt_token_ids, owner_of(request))
        generated = _given(body.generate_response, "generate_response")
        chunks = ChunkFormat(id=generated.request_id, model=self._model(body), created=int(time.time()),
                             api="derender_chat", whole=True)
        bodies = await self._whole(generated, params, body.prompt_token_ids or generated.prompt_token_ids, chunks)
        return self._joined(chunks, bodies, body.prompt_tokens or 0)

    @vllm_errors
    async def completions(self, request: web.Request) -> web.Response:
        body = self.api.decode(await self.api.read(request), DerenderCompletionRequest)
        try:
            prompts = msgspec.convert(body.prompt_token_ids, PROMPT_IDS if body.stream else PROMPT_IDS_EACH)
        except msgspec.ValidationError as error:
            shape = "a list of token ids" if body.stream else "one list of token ids (or null) per generate response"
            raise ApiError.invalid(f"prompt_token_ids is {shape}: {error}", "prompt_token_ids") from None
        params = _params(plan_completion, body.completion_request, self.api.served, TEXT_ONLY, body.stream)
        if body.stream:
            return await self._chunk(body, "derender_completions", params, prompts, owner_of(request))
        responses = _given(body.generate_responses, "generate_responses")
        if not responses:
            raise ApiError.invalid("generate_responses must not be empty", "generate_responses")
        prompts = prompts or [None] * len(responses)
        counts = body.prompt_tokens or [0] * len(responses)
        if not isinstance(counts, list) or len(counts) != len(responses) or len(prompts) != len(responses):
            raise ApiError.invalid("prompt_tokens and prompt_token_ids have one entry per generate response",
                                   "prompt_tokens")
        chunks = ChunkFormat(id=responses[0].request_id, model=self._model(body), created=int(time.time()),
                             api="derender_completions", whole=True)
        bodies = []
        for generated, prompt in zip(responses, prompts):
            bodies += await self._whole(generated, params, prompt or generated.prompt_token_ids, chunks, len(bodies))
        return self._joined(chunks, bodies, sum(counts))

    @staticmethod
    def _joined(chunks: ChunkFormat, bodies: list, prompt_tokens: int) -> web.Response:
        """The choices' bodies as the format's whole response; the prompt counted as the client says."""
        usages = [msgspec.structs.replace(usage or Usage(), prompt_tokens=prompt_tokens) for _, usage in bodies]
        return web.Response(body=home(chunks.api).body(chunks, [b for b, _ in bodies], usages), headers=JSON_HEADERS)

    def _model(self, body: DerenderRequest) -> str:
        return body.model or self.api.served.name

    # ------------------------------------------------------------ whole responses
    async def _whole(self, generated: GenerateResponse, params: StreamParams, prompt_ids, chunks: ChunkFormat,
                     first: int = 0) -> list[tuple[bytes, Usage | None]]:
        """Every choice of one generate response through a whole stream of its own, in one step: each
        choice's finished JSON (numbered from `first`) and usage."""
        self._check(prompt_ids or (), "prompt_token_ids")
        self.serial += 1
        names = [f"derender-{self.serial}-{i}" for i in range(len(generated.choices))]
        pool = self.api.pool
        step = {name: self._ids(choice, params) for name, choice in zip(names, generated.choices)}
        await self._room(len(names), 0)
        self.passing += len(names)
        try:
            for i, name in enumerate(names):
                await pool.open_stream(name, params, prompt_ids=prompt_ids, buffer=False,
                                       chunks=msgspec.structs.replace(chunks, index=first + i))
            updates = await pool.step(step, finish=names)
        finally:
            self.passing -= len(names)
            await asyncio.shield(pool.close_stream(*names))
        return [(_failed(updates[name]).body, updates[name].usage) for name in names]

    # ------------------------------------------------------------ streamed, one call per chunk
    async def _chunk(self, body: DerenderRequest, api: str, params: StreamParams, prompt_ids,
                     owner: bytes) -> web.Response:
        """One chunk of a streamed sequence: its ids stepped through the sequence's stream, whose worker writes
        the choice in the format's shape (tokworker.wire.derender)."""
        chunk = _given(body.generate_chunk, "generate_chunk")
        if len(chunk.choices) > 1:
            raise ApiError.invalid(f"a streamed chunk has at most one choice (got {len(chunk.choices)})",
                                   "generate_chunk.choices")
        fmt, usage = home(api), _usage(chunk.usage, body.prompt_tokens)
        chunks = ChunkFormat(id=chunk.request_id, model=self._model(body), created=int(time.time()), api=api,
                             index=chunk.choices[0].index if chunk.choices else 0)
        if not chunk.choices:                     # the usage-only chunk that ends a stream
            return web.Response(body=fmt.call(chunks, None, usage), headers=JSON_HEADERS)
        choice = chunk.choices[0]
        key = (owner, api, chunk.request_id, choice.index)
        ids = self._ids(choice, params)
        kept = await self._kept(key, body.stream_state is None, params,
                                prompt_ids or chunk.prompt_token_ids or [], chunks)
        await self._grow(key, kept, ID_COST * len(choice.token_ids or ()))
        finish = [kept.name] if choice.finish_reason is not None else []
        try:
            update = (await self.api.pool.step({kept.name: ids}, finish))[kept.name]
        except UnknownStream:                     # closed by another call while this one waited
            if self.kept.get(key) is kept:
                self._forget(key)
            raise self._unknown(key) from None
        if finish:                                # (a stream the text side ended answers empty updates until then)
            self._forget(key)
        chunks = msgspec.structs.replace(chunks, created=kept.created)
        return web.Response(body=fmt.call(chunks, _failed(update).sse, usage), headers=JSON_HEADERS)

    async def _kept(self, key, first: bool, params: StreamParams, prompt_ids: list[int], chunks: ChunkFormat) -> Kept:
        kept = self.kept.get(key)
        if kept is not None and first:           # stream_state null: the sequence starts (again)
            await self._close(key)
            kept = None
        if kept is not None:
            self._touch(key, kept)
            return kept
        if not first:
            raise self._unknown(key)
        self._check(prompt_ids, "prompt_token_ids")
        self.serial += 1
        kept = Kept(f"derender-{self.serial}", key[0], prompt_ids)
        pool = self.api.pool
        await self._room(1, kept.charge)
        self._remember(key, kept)                 # counted before the open's await: concurrent opens see it
        try:
            await pool.open_stream(kept.name, params, prompt_ids=prompt_ids, buffer=False, chunks=chunks)
        except BaseException:
            if self.kept.get(key) is kept:
                self._forget(key)
            await asyncio.shield(pool.close_stream(kept.name))
            raise
        return kept

    async def _grow(self, key, kept: Kept, size: int) -> None:
        """Charge a sequence its new ids; others give way if that puts the streams over their bytes. One that
        gave way itself while its open was under way is unknown."""
        if self.kept.get(key) is not kept:
            await asyncio.shield(self.api.pool.close_stream(kept.name))
            raise self._unknown(key)
        self._forget(key)
        kept.charge += size
        closing = self._make_room(1, kept.charge)
        self._remember(key, kept)
        if closing:
            await asyncio.shield(self.api.pool.close_stream(*closing))

    def _capacity(self) -> int:
        """The streams derender may hold: its own budget, and never more than half the pool's."""
        return max(1, min(self.max_streams, self.api.pool.max_streams // 2))

    def _make_room(self, count: int, size: int) -> list[str]:
        """Forget the streams idle too long, then, while `count` more streams of `size` bytes would be over a
        budget, the least recently used stream of the owner holding the most bytes: the names to close."""
        closing, deadline = [], time.monotonic() - self.idle_s
        kept = self.kept
        while kept:
            key, oldest = next(iter(kept.items()))
            if oldest.used >= deadline:
                break
            closing.append(self._forget(key).name)
        capacity = self._capacity()
        while kept and (len(kept) + self.passing + count > capacity
                        or self.state_bytes + size > self.max_state_bytes):
            owner = max(self.owner_bytes, key=self.owner_bytes.__getitem__)
            closing.append(self._forget(next(iter(self.by_owner[owner]))).name)
        return closing

    async def _room(self, count: int, size: int) -> None:
        """Close what gives way until `count` more streams of `size` bytes fit (the caller counts them before
        its next await); OVERLOADED when whole calls hold the room."""
        while closing := self._make_room(count, size):
            await asyncio.shield(self.api.pool.close_stream(*closing))
        if len(self.kept) + self.passing + count > self._capacity():
            raise ApiError(ErrorCode.OVERLOADED, f"{count} more derender streams do not fit beside the "
                                                 f"{self.passing} of whole calls under way: the limit is "
                                                 f"{self._capacity()} (--derender-max-streams, at most half the "
                                                 f"pool's streams)")

    def _unknown(self, key) -> ApiError:
        return ApiError.invalid(
            f"unknown derender stream: none of yours is open for request {key[2]!r} choice {key[3]}: it was never "
            f"opened by you, ended, was idle over {self.idle_s:g} s, or was closed to keep derender under "
            f"{self._capacity()} streams and {self.max_state_bytes} bytes; send its chunks again from the first, "
            f"with stream_state null", "stream_state")

    def _remember(self, key, kept: Kept) -> None:
        self.kept[key] = kept
        self.by_owner.setdefault(kept.owner, OrderedDict())[key] = None
        self.owner_bytes[kept.owner] = self.owner_bytes.get(kept.owner, 0) + kept.charge
        self.state_bytes += kept.charge

    def _touch(self, key, kept: Kept) -> None:
        kept.used = time.monotonic()
        self.kept.move_to_end(key)
        self.by_owner[kept.owner].move_to_end(key)

    def _forget(self, key) -> Kept | None:
        kept = self.kept.pop(key, None)
        if kept is not None:
            self.state_bytes -= kept.charge
            owned = self.by_owner[kept.owner]
            del owned[key]
            if owned:
                self.owner_bytes[kept.owner] -= kept.charge
            else:
                del self.by_owner[kept.owner], self.owner_bytes[kept.owner]
        return kept

    async def _close(self, key) -> None:
        kept = self._forget(key)
        if kept is not None:
            await asyncio.shield(self.api.pool.close_stream(kept.name))

    # ------------------------------------------------------------ input checks
    def _check(self, ids, field: str) -> None:
        served, vocab = self.api.served, self.api.pool.info.vocab_size
        if len(ids) > served.max_model_len:
            raise ApiError.invalid(f"{field} has {len(ids)} ids, over max_model_len ({served.max_model_len})", field)
        check_vocabulary(ids, vocab, field)

    def _ids(self, choice: GenerateChoice, params: StreamParams):
        """A choice's ids as pool.step takes them: with (logprob, [(id, logprob), ...]) each when asked."""
        ids = choice.token_ids or []
        self._check(ids, "token_ids")
        content = choice.logprobs.content if choice.logprobs is not None else None
        if params.logprobs is None:
            return ids
        if content is None or len(content) != len(ids):
            raise ApiError.invalid("the request asks for logprobs: every token id needs its logprobs entry",
                                   "logprobs")
        tops = [[(top.token_id, top.logprob) for top in entry.top_logprobs] for entry in content]
        check_vocabulary([top for entry in tops for top, _ in entry], self.api.pool.info.vocab_size, "logprobs")
        return ids, [(entry.logprob, top) for entry, top in zip(content, tops)]


def owner_of(request: web.Request) -> bytes:
    """Whose a streamed sequence is: the client's address and the Authorization header it sent (hashed, so
    no credential is kept)."""
    who = f"{request.remote}\0{request.headers.get('Authorization', '')}"
    return hashlib.blake2b(who.encode("utf-8", "surrogateescape"), digest_size=16).digest()


def _failed(update):
    """The update, unless its stream failed in its worker: then the call fails with the worker's error."""
    if update.finish_reason == "error":
        raise ApiError(getattr(update, "code", ErrorCode.INTERNAL), getattr(update, "message", "") or "derender failed")
    return update


def _usage(given: GenerateUsage | None, prompt_tokens) -> Usage | None:
    """A streamed chunk's usage, as vLLM's derender reports it: the generate chunk's counts, the prompt's as the
    client names it (a count; the whole routes take one per response)."""
    if given is None:
        return None
    return Usage(prompt_tokens if isinstance(prompt_tokens, int) else given.prompt_tokens,
                 given.completion_tokens or 0)


def _given(value, field: str):
    if value is None:
        raise ApiError.invalid(f"{field} is required", field)
    return value


def _params(planner, request, served, default: StreamParams, stream: bool) -> StreamParams:
    """The text side of the request the ids were rendered for (its stops, tools, logprobs), as the generation
    routes map it; a whole response counts its usage."""
    if request is None:
        return msgspec.structs.replace(default, include_usage=not stream)
    plan = planner(request, served)
    return msgspec.structs.replace(plan.params, max_tokens=plan.max_tokens, include_usage=not stream,
                                   continuous_usage_stats=False)
