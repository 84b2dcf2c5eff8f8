"""What a stream produces: OpenAI's chat-completion delta shape, as msgspec Structs.

The field names mirror OpenAI's ChoiceDelta exactly, so `msgspec.to_builtins(delta)` is the JSON an
OpenAI client expects inside `choices[i].delta`, and the same Struct crosses the wire unchanged.

The delta Structs are gc=False: they hold only strings, numbers and lists of each other, so they cannot
form reference cycles, and untracked they decode about 3x faster in the API process (one StreamUpdate per
stream per engine step adds up to a lot of cyclic-GC work otherwise).
"""

from __future__ import annotations

import msgspec


class FunctionDelta(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True, gc=False):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True, gc=False):
    """One fragment of a tool call. The first fragment of call `index` carries id, type="function" and
    function.name; later fragments carry only function.arguments, whose concatenation is the final
    arguments JSON string."""

    index: int
    id: str | None = None
    type: str | None = None
    function: FunctionDelta | None = None


class Delta(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True, gc=False):
    """One OpenAI delta; a parser emits one kind per Delta (content, reasoning_content or tool_calls)."""

    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class StreamParams(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    """Everything that decides how one request's token ids become text and deltas (vLLM's names)."""

    stop: list[str] = []
    stop_token_ids: list[int] = []
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = 0
    max_tokens: int | None = None
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True  # vLLM's default; fast decoding ignores it, as here
    reasoning_parser: str | None = None
    tool_parser: str | None = None
    tools: list[dict] | None = None


class ChunkFormat(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """The fields every OpenAI chat.completion.chunk of one response repeats (choices[0].index is `index`).
    A stream opened with one has its worker write the chunks as finished server-sent events."""

    id: str
    model: str
    created: int
    index: int = 0


class StreamUpdate(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True, gc=False):
    """What one push of token ids produced for one stream.

    finish_reason is "stop", "length" or "tool_calls" once the stream is over; stop_reason is the matched
    stop string or stop token id (None for eos). abort=True tells the caller to abort the request in the
    engine: the text side has decided the stream is over before the engine did.

    sse is set only for a stream opened with a ChunkFormat: this update's chunks as server-sent events,
    `data: {json}\n\n` each, ready for the HTTP response; `deltas` is then empty (the API process decodes
    one bytes field instead of nested Structs, and encodes nothing).
    """

    deltas: list[Delta] = []
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    abort: bool = False
    sse: bytes = b""
