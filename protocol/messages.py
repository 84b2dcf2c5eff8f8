"""Every message between an API process and a tokworker worker: msgspec Structs, msgpack on the wire.

A message travels as one ZeroMQ frame, the request id then the body (`frame()`): the id is 8 bytes
(unsigned little-endian) ahead of the body so that a worker can answer even a body it cannot decode with a
typed error that names the request. Bodies are msgpack maps whose "type" field selects one Struct of a
tagged union: `Request` one way, `Reply` the other. Every Struct forbids unknown fields; nothing is ever unpickled.
PROTOCOL.md describes the same contract for implementers in other languages.
"""

from __future__ import annotations

import struct
from typing import Any, Union

import msgspec

from tokworker.protocol.deltas import ChunkFormat, StreamParams, StreamUpdate
from tokworker.protocol.packed_ids import ids_as_list

PROTOCOL_VERSION = 11                   # what each version changed: PROTOCOL.md
ID_FRAME = struct.Struct("<Q")          # a request id frame: 8 bytes, little-endian


class ErrorCode:
    """The `code` of an Error: what went wrong, stable across versions (the message is for humans)."""

    MALFORMED = "malformed"                # frames or msgpack that do not decode
    UNKNOWN_TYPE = "unknown_type"          # a "type" this worker does not know
    INVALID = "invalid"                    # wrong field types, unknown or missing fields
    TOO_LARGE = "too_large"                # over a size limit (message, batch, text, nesting)
    UNSUPPORTED_VERSION = "unsupported_version"
    FORBIDDEN = "forbidden"                # e.g. a request-supplied chat template when not enabled
    TEMPLATE = "template_error"            # the chat template raised or ran past its budget
    UNKNOWN_STREAM = "unknown_stream"
    UNKNOWN_CONSTRAINT = "unknown_constraint"  # not (or no longer) compiled on this worker: compile it again
    STREAM_EXISTS = "stream_exists"
    STREAM_FAILED = "stream_failed"        # a step that carried this stream failed as a whole
    OVERLOADED = "overloaded"              # bounded queue or table full: retry later, elsewhere
    TIMEOUT = "timeout"                    # over the request's time budget
    OUT_OF_MEMORY = "out_of_memory"
    UNAVAILABLE = "unavailable"            # a capability this worker does not have
    STALE = "stale"                        # sent on a connection that a newer handshake replaced
    SHUTTING_DOWN = "shutting_down"        # the worker drains: no new streams or stateless work, retry elsewhere
    INTERNAL = "internal"                  # a bug of ours, not the request's fault
    # Raised by the frontend itself, never sent by a worker:
    WORKER_LOST = "worker_lost"            # the worker died (or was unreachable) more times than retried
    WORKER_FAILED = "worker_failed"        # spawned workers exit as soon as they start
    AUTH_FAILED = "auth_failed"            # the worker refused the connection's security handshake
    MODEL_MISMATCH = "model_mismatch"      # workers of one pool serve different tokenizers
    CONSTRAINT_CHANGED = "constraint_changed"  # a recompiled constraint came back different
    CLOSED = "closed"                      # the pool was closed
    # Raised by the HTTP front door about its engine (never sent by a worker):
    ENGINE_ERROR = "engine_error"          # the engine answered wrongly (an error, an id outside the vocabulary)
    ENGINE_UNAVAILABLE = "engine_unavailable"  # the engine does not answer, or is still loading: retry later
    ENGINE_TIMEOUT = "engine_timeout"      # the engine took longer than allowed


class CodedError(Exception):
    """The one base of tokworker's typed failures, on both sides of the wire: `code` is an ErrorCode value
    (what a caller handles), `message` says why in words."""

    def __init__(self, code: str, message: str = ""):
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message


class _Request(msgspec.Struct, tag_field="type", forbid_unknown_fields=True, omit_defaults=True):
    pass


class _Reply(msgspec.Struct, tag_field="type", forbid_unknown_fields=True, omit_defaults=True):
    pass


class Error(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A typed failure: `code` is one of ErrorCode's values, `message` says why in words."""

    code: str
    message: str = ""


# ---------------------------------------------------------------- handshake and bookkeeping

class Hello(_Request, tag="hello"):
    """First message on a connection. `session` names the client across reconnects: streams belong to a
    session, and a Hello with a higher `epoch` moves the session to this connection, after which the
    worker drops (answers STALE to) requests still arriving on older connections. `reset=True` also drops
    the session's streams, so the client can rebuild them from its own log."""

    version: int
    session: str = ""
    epoch: int = 0
    reset: bool = False


class Limits(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    max_message_bytes: int
    max_depth: int
    max_batch: int
    max_text_chars: int
    max_streams: int


class HelloReply(_Reply, tag="hello"):
    version: int
    worker_id: str                         # unique per worker process start ("host:pid:random")
    index: int                             # this worker's place in its daemon (endpoint = base + index)
    pool_size: int                         # how many workers the daemon runs
    pid: int
    model_fingerprint: str                 # sha256 of the tokenizer files (+ an operator template): equal across a pool
    vocab_size: int
    eos_token_ids: list[int]
    capabilities: list[str]
    limits: Limits
    tool_parser: str | None = None         # the worker's defaults for streams that name none
    reasoning_parser: str | None = None
    draining: bool = False                 # it read SIGTERM: it takes no new work (the pool sends it elsewhere)


class Stats(_Request, tag="stats"):
    pass


class StatsReply(_Reply, tag="stats"):
    """A worker's health and counters: what the pool's stats(), `tokworker status` and its Prometheus dump
    read (answered by the lane, so while the worker renders or drains too)."""
    worker_id: str
    index: int
    pool_size: int
    pid: int
    model_fingerprint: str
    uptime_s: float
    draining: bool                         # SIGTERM received: open streams finish, new work is refused
    requests: int                          # every request but these polls
    errors: int
    streams_open: int
    streams_opened: int
    queue_depth: int
    max_rss_kb: int
    gc_frozen: int = 0                     # objects in the collector's permanent generation (see worker)
    errors_by_code: dict[str, int] = {}    # error replies since start, by ErrorCode value
    dropped: int = 0                       # messages lost unanswered: a flood from a client that stopped reading


# ---------------------------------------------------------------- stateless text work

class Render(_Request, tag="render"):
    """Chat messages (and tools) -> prompt ids through the model's chat template. `chat_template` is an
    untrusted template from the request: refused with FORBIDDEN unless the operator enabled it.
    `open`: streams the worker opens on the rendered prompt in the same trip (their `prompt_ids` and
    `prompt_text` are the render's; a `params.max_tokens` of None becomes what `max_model_len` leaves), when
    the prompt fits the context; the reply then says `opened`. All open, or none.
    `packed`: the reply's `ids` may come as bytes, each id 4 bytes little-endian (`unpacked_ids` reads them as
    an array('I')): no list of ints is built to read them (a worker on a big-endian host, or streams that
    write the prompt's ids into a JSON body, ChunkFormat.token_ids, get the list).
    `parts` > 1: a long prompt may be cut into that many runs (tokenizer/parts.py); the reply's `ids` are
    then the first run's, its `runs` the others' (msgpack), for the client to have encoded elsewhere
    (EncodeRun) and join; then nothing is opened."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    documents: list[dict[str, Any]] | None = None      # the template's `documents` (retrieval context)
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template: str | None = None
    template_kwargs: dict[str, Any] = {}
    return_text: bool = False
    open: list["OpenStream"] = []
    max_model_len: int = 0
    parts: int = 1
    packed: bool = False


class RenderReply(_Reply, tag="render"):
    ids: list[int] | bytes                            # bytes: packed (see Render.packed)
    text: str | None = None
    opened: bool = False                              # the Render's `open` streams are open
    runs: list[msgspec.Raw] = []                      # the prompt's other runs, when it was cut (Render.parts)


class EncodeRun(_Request, tag="encode_run"):
    """One run of a prompt cut into parts (RenderReply.runs, as it came): its ids, in an EncodeReply."""

    run: msgspec.Raw


class Encode(_Request, tag="encode"):
    texts: list[str]
    add_special_tokens: bool = False
    split_special_tokens: bool = False


class EncodeReply(_Reply, tag="encode"):
    ids: list[list[int]]


class Decode(_Request, tag="decode"):
    ids: list[list[int]]
    skip_special_tokens: bool = False


class DecodeReply(_Reply, tag="decode"):
    texts: list[str]


class Compile(_Request, tag="compile"):
    """A constraint for the engine's sampler: exactly one of `pattern` (a regex), `json_schema`, or
    `tools` (forced tool call: `tool_name` picks one, None means any, `format` the tool-call syntax).
    EOS ids (allowed where the text is complete) default to the tokenizer's."""

    pattern: str | None = None
    json_schema: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_name: str | None = None
    format: str = "hermes"
    eos_token_ids: list[int] | None = None


class CompileReply(_Reply, tag="compile"):
    """The constraint stays on the worker under `constraint_id` (a digest of its content: compiling the
    same request again, on any worker of the pool, gives the same id and the same state numbers)."""

    constraint_id: str
    pattern: str
    initial_state: int
    vocab_size: int                        # masks have (vocab_size + 31) // 32 32-bit words
    eos_token_ids: list[int]


class GuideQuery(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """One constrained sequence at one step: the state it was in and the ids sampled since (none at first)."""

    constraint_id: str
    state: int
    ids: list[int] = []


class Guide(_Request, tag="guide"):
    """One engine step for every constrained sequence on this worker, keyed by the engine's own names."""

    queries: dict[str, GuideQuery]


class GuideResult(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    """The state after the query's ids and its token mask, as an index into the reply's `masks`."""

    state: int
    mask: int
    accepting: bool = False


class GuideReply(_Reply, tag="guide"):
    """Each distinct mask once in `masks` (in a batch many sequences share a state: every forced tool call
    starts in the same one), so a reply is at most queries x mask bytes. A mask has bit (t % 32) of
    little-endian 32-bit word (t // 32) set when token t may come next (EOS ids included when the result
    is `accepting`). No bit set: the constraint is done."""

    results: dict[str, GuideResult]
    masks: list[bytes] = []
    errors: dict[str, Error] = {}


# ---------------------------------------------------------------- streams

class OpenStream(_Request, tag="open"):
    """Create one request's streaming state. `replay` is a list of id batches pushed at once, whose
    output is discarded: how a client rebuilds a stream on a worker that replaced a dead one. With
    `chunks`, every update of the stream carries its OpenAI chunks as server-sent events (`sse`) instead
    of deltas. With `sink` (and `chunks`; a worker whose capabilities list "sinks"), the worker writes those
    events itself to the client socket the caller hands over next (direct streaming): updates then carry
    no `sse`, only the finish (or finish_reason "abort" once the client can no longer be written to); a finish
    that comes before the socket carries the events waiting for it, for a client that then sends a Forward.
    `sink_of` (with `sink`; a worker whose capabilities list "sink_groups"): this stream is another choice of
    the response whose first stream is `sink_of`, open on this worker in this session: the choices write to
    that one socket, each step's events as they come, and the response's end (its format's tail: the n > 1
    usage chunk, [DONE]) follows the last of its `chunks.n` choices. `prompt_tokens` (on the first): the
    response's prompt tokens for that usage chunk (several prompts, each counted once; none: the first
    choice's prompt)."""

    stream_id: str
    params: StreamParams = msgspec.field(default_factory=StreamParams)
    prompt_ids: list[int] | None = None
    prompt_text: str | None = None
    replay: list[list[int]] = []
    chunks: ChunkFormat | None = None
    sink: bool = False
    sink_of: str | None = None
    prompt_tokens: int | None = None


class OpenReply(_Reply, tag="open"):
    stream_id: str


class Step(_Request, tag="step"):
    """One engine step for every stream this client has on this worker: the new ids of each, and the
    streams the engine ended (finish flushes held-back text and closes the stream)."""

    ids: dict[str, list[int]]
    finish: list[str] = []
    # streams opened with StreamParams.logprobs: per id, (its logprob, [(top id, top logprob), ...])
    logprobs: dict[str, list[tuple[float, list[tuple[int, float]]]]] = {}
    # streams of `finish` that were aborted (the engine's abort, the server's drain): they end with
    # finish_reason "abort" instead of "length"
    aborted: list[str] = []
    # answer only with news: a reply of none but empty updates and no errors is not sent (a step of streams
    # whose worker writes their clients' sockets, which its client does not wait for)
    news_only: bool = False


class StepReply(_Reply, tag="step"):
    """One update per stream the step named, in the step's order (the streams of `ids`, then those only in
    `finish`): the client pairs them with the names it sent instead of decoding every name again. An empty
    update is None (nil on the wire: most updates of most steps are empty, and nil costs a client nothing to
    decode). A stream that could not be stepped has None at its place and its Error in `errors`.
    `finished`: the places whose update carries a finish_reason (those streams are closed on the worker;
    later ids for them are ignored), so that a client need not look at every update to learn which streams
    ended."""

    updates: list[StreamUpdate | None]
    errors: dict[str, Error] = {}
    finished: list[int] = []


class Forward(_Request, tag="forward"):
    """A stream opened with `sink` whose client socket could not be handed over (its worker could not take it
    at once): from now on its updates carry their events in `sse`, as if it had been opened without `sink`.
    The reply gives back the events it made before, which no socket took."""

    stream_id: str


class ForwardReply(_Reply, tag="forward"):
    sse: bytes = b""


class StreamError(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Why a response failed, as its client is told: the HTTP status its API maps the failure to, the
    ErrorCode value, the message, and the request field at fault."""

    status: int
    code: str
    message: str = ""
    param: str | None = None


class CloseStreams(_Request, tag="close"):
    """Drop streams without output (the request was aborted or its client went away). With `error`, a
    stream whose worker writes its client's socket (direct streaming) first ends its response with that
    error, in its wire format (the API process cannot: the worker owns the body's bytes)."""

    stream_ids: list[str]
    error: StreamError | None = None


class CloseReply(_Reply, tag="close"):
    closed: int


class Draining(_Reply, tag="draining"):
    """Unsolicited, with request id 0: the worker has read SIGTERM. Sent once to every connection that said
    Hello, so a client stops sending it new work at once instead of learning it from a refusal or from the
    worker's exit. Its open streams still step until they end or the drain timeout cuts them. A client that
    does not know this type drops it unread (no request of its has id 0)."""


class ErrorReply(_Reply, tag="error"):
    code: str
    message: str = ""
    request_id: int = 0


Request = Union[Hello, Stats, Render, Encode, EncodeRun, Decode, Compile, Guide, OpenStream, Step, Forward,
                CloseStreams]
Reply = Union[HelloReply, StatsReply, RenderReply, EncodeReply, DecodeReply, CompileReply, GuideReply,
              OpenReply, StepReply, ForwardReply, CloseReply, Draining, ErrorReply]


encode_message = msgspec.msgpack.Encoder(enc_hook=ids_as_list).encode
decode_request = msgspec.msgpack.Decoder(Request).decode
decode_reply = msgspec.msgpack.Decoder(Reply).decode


def pack_id(request_id: int) -> bytes:
    return ID_FRAME.pack(request_id)


def frame(request_id: int, body: bytes) -> bytes:
    """A message as it crosses the wire: one ZeroMQ frame, the request id (8 bytes) then the body."""
    return ID_FRAME.pack(request_id) + body


def unpack_id(frame: bytes) -> int:
    """The request id of a header frame; raises ValueError for a frame that is not 8 bytes."""
    if len(frame) != 8:
        raise ValueError(f"request id frame must be 8 bytes, got {len(frame)}")
    return ID_FRAME.unpack(frame)[0]


def nesting_depth(value: Any, limit: int) -> int:
    """Depth of nested lists/dicts in a decoded value, stopping early once past `limit` (iterative, so a
    hostile payload cannot exhaust the stack while it is being measured)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        todo.extend((child, depth + 1) for child in children)
    return deepest
