"""vLLM's render tier (what `vllm launch render` serves), from the pool: a request in, the engine's
GenerateRequest out (vLLM 0.33's shape, `vllm/entrypoints/scale_out/token_in_token_out/protocol.py`).

    POST /v1/chat/completions/render   ChatCompletionRequest   -> GenerateRequest
    POST /v1/messages/render           Anthropic Messages      -> GenerateRequest
    POST /v1/completions/render        CompletionRequest       -> [GenerateRequest, one per prompt]
    POST /v1/responses/render          ResponsesRequest        -> GenerateRequest

Each body maps through plan.py as the generation routes' do, so the ids are what `/v1/chat/completions`
would give the engine. `sampling_params` holds what the request set under vLLM's SamplingParams names, and
`max_tokens` resolved against the context as vLLM resolves it; a knob the request left unset is left out,
so a generate server applies its own default (it tells a given key from a default one). Constraints become
vLLM's `structured_outputs`. `reasoning_ended` is left null: the engine's reasoning parser reads the prompt
itself, as vLLM's generate server does when it is null. Errors are vLLM's body (`errors.vllm_body`); the derender routes are
derender.py's.
"""

from __future__ import annotations

import secrets

import msgspec
from aiohttp import web

from tokworker.api.errors import ApiError, vllm_body
from tokworker.api.generation import JSON_HEADERS
from tokworker.api.plan import (Plan, plain, plan_chat, plan_completion, plan_messages, plan_responses)
from tokworker.api.requests import (Body, ChatCompletionRequest, CompletionRequest, Long, MessagesRequest,
                                    ResponsesRequest)
from tokworker.engines.base import Guide
from tokworker.frontend.errors import PoolError

DELTA, FINAL_ONLY = 1, 2                 # vLLM's RequestOutputKind for a streamed and a whole request
RENDER_KWARGS = ("messages", "tools", "chat_template")


class RenderExtras(Body, kw_only=True):
    """The fields a render request carries for the engine and nothing here reads: passed through."""

    request_id: str | None = None
    cache_salt: str | None = None
    kv_transfer_params: dict | None = None
    ec_transfer_params: dict | None = None
    include_reasoning: bool = True
    stream_options: dict | None = None
    priority: Long = 0


def vllm_errors(handler):
    """A route answering failures with vLLM's error body, logged as the front door logs its own (the
    middleware still counts them); a failure no code names is a bug: its traceback is logged, the client
    gets a 500."""
    async def guarded(self, request: web.Request) -> web.StreamResponse:
        try:
            return await handler(self, request)
        except (ApiError, PoolError, msgspec.ValidationError, msgspec.DecodeError) as failure:
            error = ApiError.of(failure)
            self.api.errors.refused(request, error.status, error.code, error.message, error.param)
        except Exception as failure:
            self.api.errors.failed(request, failure)
            error = ApiError.of(failure)
        return web.Response(status=error.status, body=vllm_body(error), headers=JSON_HEADERS)
    return guarded


def json_response(data) -> web.Response:
    return web.Response(body=msgspec.json.encode(data), headers=JSON_HEADERS)


def structured_outputs(guide: Guide | None) -> dict | None:
    """A constraint as vLLM's StructuredOutputsParams: a schema, a pattern, or for a forced call the schema
    vLLM's chat request builds (the named tool's parameters; for "required" an array of calls).

    >>> structured_outputs(Guide(pattern="[0-9]+"))
    {'regex': '[0-9]+'}
    """
    if guide is None:
        return None
    if guide.json_schema is not None:
        return {"json": guide.json_schema}
    if guide.grammar is not None:
        return {"grammar": guide.grammar}
    if guide.pattern is not None:
        return {"regex": guide.pattern}
    functions = [t["function"] for t in guide.tools or () if guide.tool_name in (None, t["function"]["name"])]
    if guide.tool_name is not None:
        return {"json": functions[0].get("parameters") or {"type": "object"}}
    calls = [{"type": "object", "properties": {"name": {"type": "string", "enum": [f["name"]]},
                                               "parameters": f.get("parameters") or {"type": "object"}},
              "required": ["name", "parameters"]} for f in functions]
    return {"json": {"type": "array", "minItems": 1, "items": {"anyOf": calls}}}


def vllm_sampling(plan: Plan, max_tokens: int) -> dict:
    """A plan's sampling as vLLM's SamplingParams JSON: what the request set, and vLLM's defaults left out."""
    sampling, params = plan.sampling, plan.params
    out = sampling.knobs()
    if sampling.logprobs is not None:
        out["logprobs"] = sampling.logprobs
    out["max_tokens"] = max_tokens
    out["output_kind"] = DELTA if plan.stream else FINAL_ONLY
    optional = {"n": (plan.n, 1), "stop": (params.stop, []), "skip_special_tokens": (params.skip_special_tokens, True),
                "spaces_between_special_tokens": (params.spaces_between_special_tokens, True),
                "include_stop_str_in_output": (params.include_stop_str_in_output, False),
                "structured_outputs": (structured_outputs(sampling.guide), None)}
    out.update((name, value) for name, (value, default) in optional.items() if value != default)
    return out


def template_kwargs(plan: Plan) -> dict:
    """The chat template's variables beyond the conversation (vLLM's effective chat_template_kwargs)."""
    return {name: value for name, value in plan.render.items() if name not in RENDER_KWARGS}


class RenderTier:
    """The render routes of one Api (see the module's docstring); `routes()` is what Api.app() adds."""

    def __init__(self, api):
        self.api = api

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1/chat/completions/render", self.chat), web.post("/v1/messages/render", self.messages),
                web.post("/v1/completions/render", self.completions),
                web.post("/v1/responses/render", self.responses)]

    async def _decode(self, request: web.Request, kind: type):
        raw = await self.api.read(request)
        return self.api.decode(raw, kind), msgspec.json.decode(raw, type=RenderExtras)

    async def _rendered(self, plan: Plan) -> list[tuple[list[int], int]]:
        generations = self.api.generations
        return [(ids, generations.max_tokens(plan, ids)) for ids in await generations.prompts(plan)]

    def _generate_request(self, request_id: str, ids: list[int], max_tokens: int, plan: Plan,
                          extras: RenderExtras, model: str | None, **chat) -> dict:
        return {"request_id": request_id, "token_ids": ids, "token_offsets": None, "features": None,
                "content_parts": None, "sampling_params": vllm_sampling(plan, max_tokens), "model": model,
                "reasoning_ended": None, "reasoning_parser_kwargs": chat.get("reasoning_parser_kwargs"),
                "return_token_ids": plan.return_token_ids or None, "output_mode": "tokens",
                "parse_context": chat.get("parse_context"), "stream": plan.stream,
                "stream_options": extras.stream_options if plan.stream else None, "cache_salt": extras.cache_salt,
                "priority": extras.priority, "kv_transfer_params": extras.kv_transfer_params,
                "ec_transfer_params": extras.ec_transfer_params}

    async def _chat_like(self, plan: Plan, extras: RenderExtras, model: str | None, tool_choice,
                         parallel_tool_calls: bool) -> web.Response:
        [(ids, max_tokens)] = await self._rendered(plan)
        kwargs = template_kwargs(plan)
        tools = plan.render.get("tools")
        history = sum(len(_field(m, "tool_calls") or ()) for m in plan.render["messages"]
                      if _field(m, "role") == "assistant")
        context = {"tools": tools, "tool_choice": tool_choice or ("auto" if tools else "none"),
                   "parallel_tool_calls": parallel_tool_calls, "include_reasoning": extras.include_reasoning,
                   "chat_template_kwargs": kwargs, "history_tool_call_cnt": history}
        reasoning = {"chat_template_kwargs": kwargs} if self.api.pool.info.reasoning_parser else None
        request_id = "chatcmpl-" + (extras.request_id or secrets.token_hex(8))
        return json_response(self._generate_request(request_id, ids, max_tokens, plan, extras, model,
                                                    parse_context=context, reasoning_parser_kwargs=reasoning))

    @vllm_errors
    async def chat(self, request: web.Request) -> web.Response:
        body, extras = await self._decode(request, ChatCompletionRequest)
        plan = plan_chat(body, self.api.served)
        choice = plain(body.tool_choice) if body.tool_choice is not None else None
        return await self._chat_like(plan, extras, body.model, choice, body.parallel_tool_calls)

    @vllm_errors
    async def messages(self, request: web.Request) -> web.Response:
        body, extras = await self._decode(request, MessagesRequest)
        plan = plan_messages(body, self.api.served)
        choice = {"auto": "auto", "any": "required", "none": "none"}.get(body.tool_choice.type) \
            if body.tool_choice is not None else None
        if body.tool_choice is not None and body.tool_choice.type == "tool":
            choice = {"type": "function", "function": {"name": body.tool_choice.name}}
        parallel = not (body.tool_choice is not None and body.tool_choice.disable_parallel_tool_use)
        return await self._chat_like(plan, extras, body.model, choice, parallel)

    @vllm_errors
    async def completions(self, request: web.Request) -> web.Response:
        body, extras = await self._decode(request, CompletionRequest)
        plan = plan_completion(body, self.api.served)
        rendered = await self._rendered(plan)
        base = "cmpl-" + (extras.request_id or secrets.token_hex(8))
        return json_response([self._generate_request(base if len(rendered) == 1 else f"{base}-{i}", ids, max_tokens,
                                                     plan, extras, body.model)
                              for i, (ids, max_tokens) in enumerate(rendered)])

    @vllm_errors
    async def responses(self, request: web.Request) -> web.Response:
        body, extras = await self._decode(request, ResponsesRequest)
        plan = plan_responses(body, self.api.served)
        [(ids, max_tokens)] = await self._rendered(plan)
        reasoning = {"chat_template_kwargs": template_kwargs(plan)} if self.api.pool.info.reasoning_parser else None
        request_id = extras.request_id or "resp_" + secrets.token_hex(16)
        return json_response(self._generate_request(request_id, ids, max_tokens, plan, extras, body.model,
                                                    reasoning_parser_kwargs=reasoning))


def _field(message, name: str):
    """A message's field, whether it came as a Struct (chat) or a dict (mapped from another API's input)."""
    return message.get(name) if type(message) is dict else getattr(message, name)
