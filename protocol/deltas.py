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
    logprobs: int | None = None          # top alternatives per token; 0 = the sampled token only; None = off
    include_usage: bool = False          # the final update carries `usage` (a chunked stream adds its chunk)
    continuous_usage_stats: bool = False  # vLLM's option: every update carries the usage so far


def room(prompt_tokens: int, max_tokens: int | None, max_model_len: int) -> int | None:
    """The tokens a stream may generate after a prompt of `prompt_tokens` in a context of `max_model_len`
    tokens (0: unbounded): `max_tokens`, or all the context leaves when that is None; 0 when the prompt leaves
    no room (no stream may open on it). The one rule of the worker that opens a render's streams and of the
    API process that refuses the request.

    >>> room(10, None, 16), room(10, 6, 16), room(10, 7, 16), room(16, None, 16), room(10, None, 0)
    (6, 6, 0, 0, None)
    """
    if not max_model_len:
        return max_tokens
    if prompt_tokens >= max_model_len or max_tokens is not None and prompt_tokens + max_tokens > max_model_len:
        return 0
    return max_model_len - prompt_tokens if max_tokens is None else max_tokens


class ChunkFormat(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """What the worker writes for one choice of one response, in the wire format `api` names
    (tokworker.wire: "chat", "completions", "responses", "anthropic", vLLM's "derender_chat" and
    "derender_completions"), and the fields every part of it
    repeats (choices[0].index is `index`). Streamed, every update of the stream carries its events as
    finished server-sent events (`sse`); `whole`, the stream's updates carry nothing until the last,
    whose `body` is the choice's finished JSON (the API process joins the choices' bodies as bytes).
    `n`: the response's choices, one stream each. `echo`: a completions choice starts with the prompt's
    text. `token_ids`: a whole choice lists its generated ids (vLLM's return_token_ids)."""

    id: str
    model: str
    created: int
    index: int = 0
    api: str = "chat"
    n: int = 1
    echo: bool = False
    whole: bool = False
    token_ids: bool = False


class TopLogprob(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """One alternative of a sampled token: OpenAI's TopLogprob."""

    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """One generated token's entry, OpenAI's ChatCompletionTokenLogprob: `token` is the token decoded
    alone (as vLLM writes it: a piece that is not whole UTF-8 shows U+FFFD), `bytes` its true bytes, so
    the entries' bytes join to the text's bytes."""

    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TopLogprob] = []


class Usage(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    """Token counts of one stream: prompt ids, generated tokens accepted, and of those the reasoning
    tokens (counted where a reasoning parser ran)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int | None = None


class StreamUpdate(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True, gc=False):
    """What one push of token ids produced for one stream.

    finish_reason is "stop", "length" or "tool_calls" once the stream is over; stop_reason is the matched
    stop string or stop token id (None for eos). abort=True tells the caller to abort the request in the
    engine: the text side has decided the stream is over before the engine did.

    sse is set only for a stream opened with a ChunkFormat: this update's chunks as server-sent events,
    `data: {json}\n\n` each, ready for the HTTP response; `deltas` is then empty (the API process decodes
    one bytes field instead of nested Structs, and encodes nothing). body: the last update of a stream
    opened with a `whole` ChunkFormat carries the choice's finished JSON. behind: a direct stream's worker
    holds bytes its client's socket has not taken (said once per response, with one of its streams): a
    death of that worker now leaves the body mid-chunk, so no one else may end it with an error event.

    logprobs (streams with StreamParams.logprobs set): the entries of the tokens this update's text came
    from, `logprobs[i]` with `deltas[i]`; a token whose text is held back (partial UTF-8, a possible stop
    string, a parser's marker) or makes no text rides with the next delta, or with the update that ends
    the stream (an update with entries and no delta has one list). usage: see StreamParams.include_usage.
    """

    deltas: list[Delta] = []
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    abort: bool = False
    sse: bytes = b""
    logprobs: list[list[TokenLogprob]] = []
    body: bytes = b""
    usage: Usage | None = None
    behind: bool = False


EMPTY = StreamUpdate()   # the one update of a step that changed nothing (updates are read-only: share it)


def joined_logprobs(updates) -> list[list[TokenLogprob]]:
    """The entry lists of consecutive updates of one stream merged into one update, still one list per
    delta (a list without a delta, at the end of a stream, joins the last delta's)."""
    lists: list[list[TokenLogprob]] = []
    for update in updates:
        own = update.logprobs
        if not own:
            lists += [[] for _ in update.deltas]
        elif update.deltas:
            lists += own
            lists += [[] for _ in range(len(update.deltas) - len(own))]
        elif lists:
            lists[-1] = lists[-1] + own[0]
        else:
            lists.append(own[0])
    return lists if any(lists) else []
