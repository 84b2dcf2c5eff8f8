"""Each request body mapped, in one place, to what the server does with it: what the pool renders (or the
prompts a completion gives), the StreamParams of its streams, the chunk format, and the engine's sampling.

    plan = plan_chat(ChatCompletionRequest(...), served)   # ApiError names the field it refuses
    plan.render       # pool.render's keyword arguments (Completions: plan.prompts); the request's
                      # chat_template_kwargs among them, never one of pool.render's own (RESERVED_KWARGS)
    plan.params       # StreamParams for every choice (max_tokens resolved against the prompt later)
    plan.sampling     # the engine's SamplingParams (likewise)
"""

from __future__ import annotations

import msgspec

from tokworker.api.errors import ApiError, check_vocabulary, from_validation
from tokworker.api.requests import (RESPONSES_ITEMS, AnthropicText, AnthropicThinking, AnthropicToolResult,
                                    AnthropicToolUse, ChatCompletionRequest, CompletionRequest, JsonObjectFormat,
                                    JsonSchemaResponseFormat, Message, MessagesRequest, NamedFunction,
                                    NamedToolChoice, ResponsesFunctionCallItem, ResponsesFunctionOutputItem,
                                    ResponsesMessageItem, ResponsesRequest, TextPart)
from tokworker.constrain.tool_choice import FORMATS as FORCED_CALL_FORMATS
from tokworker.engines.base import KNOBS, SET_ONLY, Guide, SamplingParams
from tokworker.protocol.deltas import StreamParams


class Served(msgspec.Struct, frozen=True):
    """What the server knows of its model when it maps a request: the name it answers to, the tool-call
    parser the workers apply (for forced calls: its call syntax), the context length and the vocabulary's size
    (the ids a request may name); for pricing a request's fan-out (price): the choices (streams) one request
    may ever have, and `room()`, how many it may open now (None: no such check)."""

    name: str
    tool_parser: str | None
    max_model_len: int
    vocab_size: int
    max_choices: int = 4096
    room: object = None


# Names chat_template_kwargs may not set: the render's own arguments (a request field sets those named with
# one) and what the worker decides for itself (the template's trust, its limits, the clock, the call's timeout).
RESERVED_KWARGS = {name: f"the request's `{name}` sets it" for name in (
    "messages", "tools", "documents", "add_generation_prompt", "continue_final_message", "chat_template")}
RESERVED_KWARGS.update((name, "the server sets it") for name in (
    "tokenizer", "tokenize", "timeout", "return_text", "template_kwargs", "allow_untrusted_template",
    "sanitize_control_tokens", "openai_messages", "limits", "now"))


class Plan(msgspec.Struct, kw_only=True):
    api: str                                    # "chat", "completions", "responses" or "anthropic"
    model: str
    stream: bool
    params: StreamParams
    sampling: SamplingParams
    max_tokens: int | None                      # as asked; None: what the context leaves
    n: int = 1
    render: dict | None = None                  # pool.render(**render)
    prompts: list | None = None                 # completions: texts or id lists, one per prompt
    add_special_tokens: bool = True             # completions' text prompts
    include_usage: bool = False                 # a streamed response's final usage
    echo: bool = False
    return_token_ids: bool = False
    guide_param: str | None = None              # the field whose constraint the engine enforces


def plain(value) -> dict:
    """A request Struct as the dict a template reads (the Structs that reach templates omit unset fields)."""
    return msgspec.to_builtins(value)


def request_template_kwargs(kwargs: dict | None, field: str = "chat_template_kwargs") -> dict:
    """A request's chat_template_kwargs as the render's extra variables; a reserved name is refused by name.

    >>> request_template_kwargs({"enable_thinking": False})
    {'enable_thinking': False}
    >>> request_template_kwargs({"timeout": "1"})
    Traceback (most recent call last):
    ...
    tokworker.api.errors.ApiError: invalid: chat_template_kwargs may not set `timeout`: the server sets it
    """
    for name in kwargs or ():
        if name in RESERVED_KWARGS:
            raise ApiError.invalid(f"{field} may not set `{name}`: {RESERVED_KWARGS[name]}", f"{field}.{name}")
    return dict(kwargs or {})


def _check_bias(request, served: Served) -> None:
    if request.logit_bias:
        check_vocabulary(request.logit_bias, served.vocab_size, "logit_bias")


def _tag(value: msgspec.Struct) -> str:
    """A tagged Struct's tag (the JSON "type" it was decoded from)."""
    return value.__struct_config__.tag


def chat_messages(messages: list[Message]) -> list[Message]:
    """The messages as they were decoded, once their content parts are known to be text: the render request
    carries the Structs themselves (msgpack writes each as the map the client sent, its unset fields left out),
    so no message is turned into a dict on the way."""
    for i, message in enumerate(messages):
        if isinstance(message.content, list):
            for j, part in enumerate(message.content):
                if not isinstance(part, TextPart) and not (message.role == "assistant" and _tag(part) == "refusal"):
                    raise ApiError.invalid(f"content parts of type {_tag(part)!r} are not supported: this server "
                                           f"serves text", f"messages[{i}].content[{j}].type")
    return messages


def _stop(stop) -> list[str]:
    return [] if stop is None else [stop] if isinstance(stop, str) else list(stop)


def _forced_format(served: Served, param: str) -> str:
    if served.tool_parser not in FORCED_CALL_FORMATS:
        raise ApiError.invalid(f"a forced tool call needs a tool-call syntax this server can constrain (one of "
                               f"{', '.join(FORCED_CALL_FORMATS)}); the model's tool parser is "
                               f"{served.tool_parser!r}", param)
    return served.tool_parser


def _tool_guide(tools: list[dict] | None, choice, served: Served, param: str) -> Guide | None:
    """tool_choice "required" or a named tool -> the Guide of a call; "auto"/"none"/unset -> None."""
    if choice in (None, "auto", "none"):
        return None
    if not tools:
        raise ApiError.invalid(f"tool_choice {choice if isinstance(choice, str) else 'naming a tool'} needs tools",
                               param)
    name = None
    if not isinstance(choice, str):
        name = choice.function.name if isinstance(choice, NamedToolChoice) else choice.name
        known = [t["function"]["name"] for t in tools]
        if name not in known:
            raise ApiError.invalid(f"tool_choice names {name!r}, which is not among the tools {known}", param)
    return Guide(tools=tools, tool_name=name, tool_format=_forced_format(served, param))


def _schema_guide(request) -> tuple[Guide | None, str]:
    """The output's constraint from response_format or llama-server's own fields (`json_schema`, `grammar`),
    and the field that asked for it; at most one of them."""
    response_format = request.response_format
    asked = []
    if isinstance(response_format, JsonSchemaResponseFormat):
        asked.append((Guide(json_schema=response_format.json_schema.schema or {}), "response_format"))
    elif isinstance(response_format, JsonObjectFormat):
        asked.append((Guide(json_schema=response_format.schema or {"type": "object"}), "response_format"))
    if request.json_schema is not None:
        asked.append((Guide(json_schema=request.json_schema), "json_schema"))
    if request.grammar is not None:
        asked.append((Guide(grammar=request.grammar), "grammar"))
    if len(asked) > 1:
        raise ApiError.invalid(f"{' and '.join(p for _, p in asked)} cannot both constrain one output", asked[1][1])
    return asked[0] if asked else (None, "response_format")


def _one_guide(tool_guide: Guide | None, schema_guide: Guide | None, tool_param: str, schema_param: str):
    if tool_guide is not None and schema_guide is not None:
        raise ApiError.invalid(f"{tool_param} and {schema_param} cannot both constrain one output", schema_param)
    if tool_guide is not None:
        return tool_guide, tool_param
    return schema_guide, (schema_param if schema_guide is not None else None)


def _forced(guide: Guide | None) -> str | None:
    """The reasoning parser of a request: none where a constraint forces the whole output (a call, a JSON
    value: nothing of it is reasoning, even where the prompt opened a think block), else the worker's."""
    return "none" if guide is not None else None


def _sampling(request, *, max_tokens: int | None, logprobs: int | None, guide: Guide | None) -> SamplingParams:
    """The engine's sampling: what the request set; what it left unset stays None (the engine's default), or
    SamplingParams' own default for the fields sent only when set."""
    given = {name: value for name in KNOBS + SET_ONLY if (value := getattr(request, name, None)) is not None}
    return SamplingParams(max_tokens=max_tokens or 0, logprobs=logprobs, guide=guide, **given)


def _stream_options(request) -> tuple[bool, bool]:
    options = request.stream_options
    if options is None:
        return False, False
    if not request.stream:
        raise ApiError.invalid("stream_options is only for streamed responses (stream: true)", "stream_options")
    return options.include_usage, options.continuous_usage_stats


def _text_params(request, *, logprobs, include_usage: bool, continuous: bool, tools=None,
                 tool_parser: str | None = None, reasoning_parser: str | None = None) -> StreamParams:
    return StreamParams(
        stop=_stop(request.stop), stop_token_ids=list(request.stop_token_ids or ()),
        include_stop_str_in_output=request.include_stop_str_in_output, ignore_eos=request.ignore_eos,
        min_tokens=request.min_tokens, skip_special_tokens=request.skip_special_tokens,
        spaces_between_special_tokens=request.spaces_between_special_tokens, tools=tools,
        tool_parser=tool_parser, reasoning_parser=reasoning_parser, logprobs=logprobs,
        include_usage=include_usage, continuous_usage_stats=continuous)


# ---------------------------------------------------------------- OpenAI Chat Completions

def plan_chat(request: ChatCompletionRequest, served: Served) -> Plan:
    if request.top_logprobs is not None and request.top_logprobs > 0 and not request.logprobs:
        raise ApiError.invalid("top_logprobs needs logprobs: true", "top_logprobs")
    if request.echo:
        raise ApiError.invalid("echo is not supported on chat completions", "echo")
    if request.return_token_ids and request.stream:
        raise ApiError.invalid("return_token_ids is supported on whole (not streamed) responses", "return_token_ids")
    if request.continue_final_message and request.add_generation_prompt:
        raise ApiError.invalid("continue_final_message and add_generation_prompt cannot both be true",
                               "continue_final_message")
    include_usage, continuous = _stream_options(request)
    tools = [plain(t) for t in request.tools] if request.tools else None
    schema_guide, schema_param = _schema_guide(request)
    guide, guide_param = _one_guide(_tool_guide(tools, request.tool_choice, served, "tool_choice"),
                                    schema_guide, "tool_choice", schema_param)
    parse_tools = tools if tools and request.tool_choice != "none" else None
    logprobs = (request.top_logprobs or 0) if request.logprobs else None
    _check_bias(request, served)
    kwargs = request_template_kwargs(request.chat_template_kwargs)
    if request.reasoning_effort is not None:
        kwargs.setdefault("reasoning_effort", request.reasoning_effort)
    if request.documents is not None:                   # vLLM's: the template's `documents`
        kwargs["documents"] = request.documents
    render = dict(messages=chat_messages(request.messages), tools=tools,
                  add_generation_prompt=request.add_generation_prompt,
                  continue_final_message=request.continue_final_message, chat_template=request.chat_template,
                  **kwargs)
    max_tokens = request.max_completion_tokens or request.max_tokens
    return Plan(api="chat", model=served.name, stream=request.stream, n=request.n, render=render,
                params=_text_params(request, logprobs=logprobs, include_usage=include_usage or not request.stream,
                                    continuous=continuous, tools=parse_tools,
                                    tool_parser=None if parse_tools else "none", reasoning_parser=_forced(guide)),
                sampling=_sampling(request, max_tokens=max_tokens, logprobs=logprobs, guide=guide),
                max_tokens=max_tokens, include_usage=include_usage, return_token_ids=request.return_token_ids,
                guide_param=guide_param)


# ---------------------------------------------------------------- OpenAI Completions

def plan_completion(request: CompletionRequest, served: Served) -> Plan:
    if request.suffix:
        raise ApiError.invalid("suffix is not supported", "suffix")
    if request.best_of is not None and request.best_of != request.n:
        raise ApiError.invalid("best_of other than n is not supported", "best_of")
    if request.return_token_ids and request.stream:
        raise ApiError.invalid("return_token_ids is supported on whole (not streamed) responses", "return_token_ids")
    include_usage, continuous = _stream_options(request)
    _check_bias(request, served)
    prompt = request.prompt
    if isinstance(prompt, str):
        prompts = [prompt]
    elif prompt and all(isinstance(p, int) for p in prompt):
        prompts = [list(prompt)]
    elif prompt and all(isinstance(p, str) for p in prompt) or prompt and all(isinstance(p, list) for p in prompt):
        prompts = list(prompt)
    else:
        raise ApiError.invalid("prompt is a string, a list of strings, a list of token ids or a list of such lists",
                               "prompt")
    if any(isinstance(p, list) and not p for p in prompts) or any(p == "" for p in prompts):
        raise ApiError.invalid("a prompt is empty", "prompt")
    schema_guide, schema_param = _schema_guide(request)
    guide, guide_param = _one_guide(None, schema_guide, "tool_choice", schema_param)
    return Plan(api="completions", model=served.name, stream=request.stream, n=request.n, prompts=prompts,
                add_special_tokens=request.add_special_tokens, echo=request.echo,
                params=_text_params(request, logprobs=request.logprobs,
                                    include_usage=include_usage or not request.stream, continuous=continuous,
                                    tool_parser="none", reasoning_parser="none"),
                sampling=_sampling(request, max_tokens=request.max_tokens, logprobs=request.logprobs, guide=guide),
                max_tokens=request.max_tokens, include_usage=include_usage,
                return_token_ids=request.return_token_ids, guide_param=guide_param)


# ---------------------------------------------------------------- OpenAI Responses

def _responses_input(request: ResponsesRequest) -> list[dict]:
    """Responses input items -> chat messages: function calls join the assistant turn they follow,
    their outputs become tool messages, reasoning items the next assistant turn's reasoning."""
    messages = [{"role": "system", "content": request.instructions}] if request.instructions else []
    if isinstance(request.input, str):
        return messages + [{"role": "user", "content": request.input}]
    reasoning = None
    for i, given in enumerate(request.input):
        item = _input_item(given, i)
        if isinstance(item, ResponsesMessageItem):
            content = item.content
            if not isinstance(content, str):
                content = "".join(_input_text(part, i, j) for j, part in enumerate(content))
            message = {"role": item.role, "content": content}
            if item.role == "assistant" and reasoning is not None:
                message["reasoning_content"], reasoning = reasoning, None
            messages.append(message)
        elif isinstance(item, ResponsesFunctionCallItem):
            call = {"id": item.call_id, "type": "function",
                    "function": {"name": item.name, "arguments": item.arguments}}
            last = messages[-1] if messages else None
            if last is None or last["role"] != "assistant" or "content" in last and last["content"]:
                last = {"role": "assistant", "content": None}
                if reasoning is not None:
                    last["reasoning_content"], reasoning = reasoning, None
                messages.append(last)
            last.setdefault("tool_calls", []).append(call)
        elif isinstance(item, ResponsesFunctionOutputItem):
            output = item.output
            messages.append({"role": "tool", "tool_call_id": item.call_id,
                             "content": output if isinstance(output, str) else msgspec.json.encode(output).decode()})
        else:
            reasoning = "".join(part.text for part in item.content or item.summary)
    return messages


def _input_item(item: dict, i: int):
    """One input item converted to its Struct (requests.RESPONSES_ITEMS), its errors named from `input[i]`."""
    kind = item.get("type", "message")
    struct = RESPONSES_ITEMS.get(kind) if isinstance(kind, str) else None
    if struct is None:
        raise ApiError.invalid(f"input items of type {kind!r} are not supported", f"input[{i}].type")
    try:
        return msgspec.convert(item, struct)
    except msgspec.ValidationError as error:
        text, at = str(error), f"$.input[{i}]"
        text = text.replace("`$", f"`{at}", 1) if " - at `" in text else f"{text} - at `{at}`"
        raise from_validation(msgspec.ValidationError(text)) from None


def _input_text(part, i: int, j: int) -> str:
    if part.type not in ("input_text", "output_text", "text"):
        raise ApiError.invalid(f"content parts of type {part.type!r} are not supported: this server serves text",
                               f"input[{i}].content[{j}].type")
    if part.text is None:
        raise ApiError.invalid(f"a content part of type {part.type!r} needs its text", f"input[{i}].content[{j}].text")
    return part.text


def plan_responses(request: ResponsesRequest, served: Served) -> Plan:
    if request.previous_response_id is not None:
        raise ApiError.invalid("previous_response_id is not supported: this server stores no responses; send the "
                               "whole conversation as input", "previous_response_id")
    tools = [{"type": "function", "function": plain(t)} for t in request.tools] if request.tools else None
    for tool in tools or ():
        tool["function"].pop("type", None)
    text_format = request.text.format if request.text is not None else None
    schema_guide = None
    if text_format is not None and text_format.type == "json_schema":
        schema_guide = Guide(json_schema=text_format.schema or {})
    elif text_format is not None and text_format.type == "json_object":
        schema_guide = Guide(json_schema={"type": "object"})
    guide, guide_param = _one_guide(_tool_guide(tools, request.tool_choice, served, "tool_choice"), schema_guide,
                                    "tool_choice", "text.format")
    include = request.include or []
    logprobs = (request.top_logprobs or 0) if "message.output_text.logprobs" in include else None
    kwargs = {}
    if request.reasoning is not None and request.reasoning.effort is not None:
        kwargs["reasoning_effort"] = request.reasoning.effort
    parse_tools = tools if tools and request.tool_choice != "none" else None
    params = StreamParams(tools=parse_tools, tool_parser=None if parse_tools else "none", logprobs=logprobs,
                          include_usage=True, reasoning_parser=_forced(guide))
    return Plan(api="responses", model=served.name, stream=request.stream,
                render=dict(messages=_responses_input(request), tools=tools, **kwargs), params=params,
                sampling=_sampling(request, max_tokens=request.max_output_tokens, logprobs=logprobs, guide=guide),
                max_tokens=request.max_output_tokens, include_usage=True, guide_param=guide_param)


# ---------------------------------------------------------------- Anthropic Messages

def _anthropic_messages(request: MessagesRequest) -> list[dict]:
    system = request.system
    if isinstance(system, list):
        system = "".join(block.text for block in system)
    messages = [{"role": "system", "content": system}] if system else []
    for i, message in enumerate(request.messages):
        if isinstance(message.content, str):
            messages.append({"role": message.role, "content": message.content})
            continue
        text, calls, thinking = [], [], None
        for j, block in enumerate(message.content):
            if isinstance(block, AnthropicText):
                text.append(block.text)
            elif isinstance(block, AnthropicToolUse) and message.role == "assistant":
                calls.append({"id": block.id, "type": "function",
                              "function": {"name": block.name, "arguments": block.input}})
            elif isinstance(block, AnthropicToolResult) and message.role == "user":
                content = block.content if isinstance(block.content, str) else "".join(b.text for b in block.content)
                messages.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": content})
            elif isinstance(block, AnthropicThinking) and message.role == "assistant":
                thinking = block.thinking
            elif _tag(block) != "redacted_thinking":
                raise ApiError.invalid(f"{_tag(block)} blocks are not supported in {message.role} messages",
                                       f"messages[{i}].content[{j}].type")
        if text or calls or thinking is not None:
            turn = {"role": message.role, "content": "".join(text) if text or not calls else None}
            if calls:
                turn["tool_calls"] = calls
            if thinking is not None:
                turn["reasoning_content"] = thinking
            messages.append(turn)
    return messages


def plan_messages(request: MessagesRequest, served: Served) -> Plan:
    tools = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                               "parameters": t.input_schema}} for t in request.tools or ()] or None
    for tool in tools or ():
        if tool["function"]["description"] is None:
            del tool["function"]["description"]
    choice = request.tool_choice
    kind = choice.type if choice is not None else "auto"
    if kind == "tool":
        if not choice.name:
            raise ApiError.invalid("tool_choice of type tool names the tool", "tool_choice.name")
        openai_choice = NamedToolChoice(function=NamedFunction(name=choice.name))
    else:
        openai_choice = {"auto": "auto", "any": "required", "none": "none"}[kind]
    guide, guide_param = _one_guide(_tool_guide(tools, openai_choice, served, "tool_choice"), None,
                                    "tool_choice", "")
    kwargs = {}
    if request.thinking is not None:
        kwargs["enable_thinking"] = request.thinking.type == "enabled"
    parse_tools = tools if tools and kind != "none" else None
    params = StreamParams(stop=list(request.stop_sequences or ()), tools=parse_tools,
                          tool_parser=None if parse_tools else "none", include_usage=True,
                          reasoning_parser=_forced(guide))
    return Plan(api="anthropic", model=served.name, stream=request.stream,
                render=dict(messages=_anthropic_messages(request), tools=tools, **kwargs), params=params,
                sampling=_sampling(request, max_tokens=request.max_tokens, logprobs=None, guide=guide),
                max_tokens=request.max_tokens, include_usage=True, guide_param=guide_param)
