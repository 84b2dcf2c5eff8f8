"""The request bodies the front door takes, as msgspec Structs decoded strictly from the raw bytes: OpenAI's
Chat Completions, Completions and Responses, Anthropic's Messages, and vLLM's /tokenize and /detokenize.

Field names and defaults are OpenAI's (Anthropic's for Messages) plus vLLM's extra sampling and template
fields. Types are checked as decoded (a string is never read as a number) and every range is declared on
the field, so a bad value's error names its path (`Expected `int` >= 1 - at `$.max_tokens``). Fields this
server does not know are ignored, as vLLM ignores them; how a body's bytes become one of these is
tokworker/api/bodies.py.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta, Struct

LONG = 2**63 - 1                             # integers an engine or the wire takes (vLLM bounds seed so)
Count = Annotated[int, Meta(ge=1)]
NonNegative = Annotated[int, Meta(ge=0, le=LONG)]
Long = Annotated[int, Meta(ge=-LONG - 1, le=LONG)]
TopLogprobs = Annotated[int, Meta(ge=0, le=20)]
Temperature = Annotated[float, Meta(ge=0, le=2)]
TopP = Annotated[float, Meta(gt=0, le=1)]
Penalty = Annotated[float, Meta(ge=-2, le=2)]
Choices = Annotated[int, Meta(ge=1, le=128)]
Name = Annotated[str, Meta(min_length=1)]
Bias = dict[int, Annotated[float, Meta(ge=-100, le=100)]]


class Body(Struct, kw_only=True):
    """Every body: unknown fields are ignored (OpenAI's SDKs and vLLM's clients send extras). What reaches a
    chat template (messages, tool definitions) omits the optional fields the client did not send, so the
    template renders exactly what was sent (a `"strict": null` the client never wrote changes the prompt)."""


# ---------------------------------------------------------------- chat messages and tools

class TextPart(Body, tag="text", tag_field="type", kw_only=True):
    text: str


class ImageUrlPart(Body, tag="image_url", tag_field="type", kw_only=True):
    image_url: dict


class InputAudioPart(Body, tag="input_audio", tag_field="type", kw_only=True):
    input_audio: dict


class RefusalPart(Body, tag="refusal", tag_field="type", kw_only=True):
    refusal: str


ContentPart = TextPart | ImageUrlPart | InputAudioPart | RefusalPart


class FunctionCall(Body, kw_only=True):
    name: Name
    arguments: str | dict = "{}"


class ToolCall(Body, kw_only=True):
    id: str = ""
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(Body, kw_only=True, omit_defaults=True):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class FunctionDefinition(Body, kw_only=True, omit_defaults=True):
    name: Name
    description: str | None = None
    parameters: dict | None = None
    strict: bool | None = None


class Tool(Body, kw_only=True):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(Body, kw_only=True):
    name: Name


class NamedToolChoice(Body, kw_only=True):
    type: Literal["function"] = "function"
    function: NamedFunction


class JsonSchemaFormat(Body, kw_only=True):
    name: str = "response"
    schema: dict | None = None
    description: str | None = None
    strict: bool | None = None


class TextFormat(Body, tag="text", tag_field="type", kw_only=True):
    pass


class JsonObjectFormat(Body, tag="json_object", tag_field="type", kw_only=True):
    schema: dict | None = None            # llama-server's extension: the object's schema


class JsonSchemaResponseFormat(Body, tag="json_schema", tag_field="type", kw_only=True):
    json_schema: JsonSchemaFormat


ResponseFormat = TextFormat | JsonObjectFormat | JsonSchemaResponseFormat


class StreamOptions(Body, kw_only=True):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class Sampling(Body, kw_only=True):
    """What Chat Completions and Completions share: OpenAI's sampling fields and vLLM's extras."""

    model: str | None = None
    n: Choices = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    logit_bias: Bias | None = None
    seed: Long | None = None
    user: str | None = None
    # vLLM's extra fields
    top_k: Annotated[int, Meta(ge=-1, le=LONG)] | None = None
    min_p: Annotated[float, Meta(ge=0, le=1)] | None = None
    repetition_penalty: Annotated[float, Meta(gt=0)] | None = None
    stop_token_ids: list[NonNegative] | None = None
    ignore_eos: bool = False
    min_tokens: NonNegative = 0
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    return_token_ids: bool = False
    request_id: str | None = None
    priority: Long = 0
    # llama-server's own constraint fields: honoured by an engine that takes them (llama.cpp), refused by
    # name by the others, never ignored
    grammar: str | None = None
    json_schema: dict | None = None


class ChatCompletionRequest(Sampling, kw_only=True):
    messages: Annotated[list[Message], Meta(min_length=1)]
    max_tokens: Count | None = None
    max_completion_tokens: Count | None = None
    logprobs: bool = False
    top_logprobs: TopLogprobs | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    response_format: ResponseFormat | None = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    # vLLM's template fields
    echo: bool = False
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    documents: list[dict] | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict | None = None


class CompletionRequest(Sampling, kw_only=True):
    prompt: str | list[str | int | list[int]]
    max_tokens: Count = 16
    echo: bool = False
    logprobs: TopLogprobs | None = None
    suffix: str | None = None
    best_of: Choices | None = None
    add_special_tokens: bool = True
    response_format: ResponseFormat | None = None


# ---------------------------------------------------------------- OpenAI Responses

class ResponsesTextFormat(Body, kw_only=True):
    type: Literal["text", "json_object", "json_schema"] = "text"
    name: str = "response"
    schema: dict | None = None
    strict: bool | None = None


class ResponsesText(Body, kw_only=True):
    format: ResponsesTextFormat | None = None


class ResponsesTool(Body, kw_only=True, omit_defaults=True):
    type: Literal["function"]
    name: Name
    description: str | None = None
    parameters: dict | None = None
    strict: bool | None = None


class ResponsesNamedTool(Body, kw_only=True):
    type: Literal["function"]
    name: Name


class Reasoning(Body, kw_only=True):
    effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    summary: str | None = None


class ResponsesContentPart(Body, kw_only=True):
    """A message's content part: text (input_text, output_text) is served; plan.py names any other type."""

    type: str
    text: str | None = None


class ResponsesMessageItem(Body, kw_only=True):
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[ResponsesContentPart]


class ResponsesFunctionCallItem(Body, kw_only=True):
    type: Literal["function_call"]
    call_id: str
    name: Name
    arguments: str | dict = "{}"


class ResponsesFunctionOutputItem(Body, kw_only=True):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list | dict


class ReasoningText(Body, kw_only=True):
    type: Literal["summary_text", "reasoning_text"] = "summary_text"
    text: str


class ResponsesReasoningItem(Body, kw_only=True):
    type: Literal["reasoning"]
    summary: list[ReasoningText] = []
    content: list[ReasoningText] | None = None


# Responses input items by their "type" (a message may leave it out): each item is converted to its Struct
RESPONSES_ITEMS = {"message": ResponsesMessageItem, "function_call": ResponsesFunctionCallItem,
                   "function_call_output": ResponsesFunctionOutputItem, "reasoning": ResponsesReasoningItem}


class ResponsesRequest(Body, kw_only=True):
    model: str | None = None
    input: str | Annotated[list[dict], Meta(min_length=1)]      # items: RESPONSES_ITEMS
    instructions: str | None = None
    max_output_tokens: Count | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_logprobs: TopLogprobs | None = None
    include: list[str] | None = None
    tools: list[ResponsesTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | ResponsesNamedTool | None = None
    parallel_tool_calls: bool = True
    text: ResponsesText | None = None
    reasoning: Reasoning | None = None
    stream: bool = False
    store: bool = False
    previous_response_id: str | None = None
    user: str | None = None
    seed: Long | None = None


# ---------------------------------------------------------------- Anthropic Messages

class AnthropicText(Body, tag="text", tag_field="type", kw_only=True):
    text: str


class AnthropicImage(Body, tag="image", tag_field="type", kw_only=True):
    source: dict


class AnthropicToolUse(Body, tag="tool_use", tag_field="type", kw_only=True):
    id: str
    name: Name
    input: dict


class AnthropicToolResult(Body, tag="tool_result", tag_field="type", kw_only=True):
    tool_use_id: str
    content: str | list[AnthropicText] = ""
    is_error: bool = False


class AnthropicThinking(Body, tag="thinking", tag_field="type", kw_only=True):
    thinking: str
    signature: str = ""


class AnthropicRedactedThinking(Body, tag="redacted_thinking", tag_field="type", kw_only=True):
    data: str


AnthropicBlock = (AnthropicText | AnthropicImage | AnthropicToolUse | AnthropicToolResult | AnthropicThinking
                  | AnthropicRedactedThinking)


class AnthropicMessage(Body, kw_only=True):
    role: Literal["user", "assistant"]
    content: str | list[AnthropicBlock]


class AnthropicTool(Body, kw_only=True):
    name: Name
    description: str | None = None
    input_schema: dict


class AnthropicToolChoice(Body, kw_only=True):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool = False


class AnthropicThinkingConfig(Body, kw_only=True):
    type: Literal["enabled", "disabled"]
    budget_tokens: NonNegative | None = None


class MessagesRequest(Body, kw_only=True):
    model: str | None = None
    messages: Annotated[list[AnthropicMessage], Meta(min_length=1)]
    max_tokens: Count
    system: str | list[AnthropicText] | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: Annotated[float, Meta(ge=0, le=1)] | None = None
    top_p: TopP | None = None
    top_k: Annotated[int, Meta(ge=0, le=LONG)] | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: AnthropicToolChoice | None = None
    thinking: AnthropicThinkingConfig | None = None
    metadata: dict | None = None


class CountTokensRequest(Body, kw_only=True):
    """POST /v1/messages/count_tokens: a Messages request's prompt fields (no max_tokens, no sampling)."""
    model: str | None = None
    messages: Annotated[list[AnthropicMessage], Meta(min_length=1)]
    system: str | list[AnthropicText] | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: AnthropicToolChoice | None = None
    thinking: AnthropicThinkingConfig | None = None


# ---------------------------------------------------------------- vLLM's /tokenize and /detokenize

class TokenizeRequest(Body, kw_only=True):
    model: str | None = None
    prompt: str | None = None
    messages: list[Message] | None = None
    tools: list[Tool] | None = None
    add_special_tokens: bool | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    return_token_strs: bool = False
    chat_template: str | None = None
    chat_template_kwargs: dict | None = None


class DetokenizeRequest(Body, kw_only=True):
    model: str | None = None
    tokens: list[NonNegative]
