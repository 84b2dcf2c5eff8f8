"""One worker's settings and limits: a msgspec Struct, so the launcher hands them to a worker process
as one JSON argument, and `tokworker serve` makes a flag of every operator setting from the fields'
descriptions and bounds here (so the two cannot drift)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec

# The small tokenizer bundled with the package (what `tokworker demo` runs on), a pool's default model.
DEFAULT_MODEL_DIR = Path(__file__).resolve().parent.parent / "data" / "default"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
DEFAULT_LOAD_CPU_S, DEFAULT_LOAD_MEMORY_MB = 30.0, 1024      # the load budget (WorkerOptions.load_*)
# Allocations between two young-generation collections, in a worker and in the API process: both make young
# containers per step or render that die with it, and at the default (700) the collector ran every few.
GC_YOUNG = 50_000


def _setting(description: str, **bounds) -> msgspec.Meta:
    return msgspec.Meta(description=description, **bounds)


class WorkerOptions(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    # Where and who: set by the daemon or the pool, not flags of their own.
    model_dir: str
    bind: str                                  # this worker's own endpoint (ipc://... or tcp://...)
    index: Annotated[int, msgspec.Meta(ge=0)] = 0    # place in the daemon: endpoint = base + index
    pool_size: Annotated[int, msgspec.Meta(ge=1)] = 1
    curve_keys: str | None = None              # directory made by `tokworker keys`; required for tcp://
    log_level: str = "INFO"
    # Behaviour.
    tool_parser: Annotated[str | None, _setting(
        "default tool-call parser for streams that name none (vLLM's names; default: what the model's chat "
        "template implies, \"none\" for none)")] = None
    reasoning_parser: Annotated[str | None, _setting(
        "default reasoning parser for streams that name none (vLLM's names; default: what the model's chat "
        "template implies, \"none\" for none)")] = None
    allow_request_templates: Annotated[bool, _setting(
        "run chat templates sent in requests (untrusted code, in a bounded sandbox)")] = False
    chat_template: Annotated[str | None, _setting(
        'the chat template to render with instead of the model\'s own: a file, or "chatml"')] = None
    # Sizes. An oversize frame is dropped by ZeroMQ itself (MAXMSGSIZE); the rest get a TOO_LARGE reply.
    max_message_bytes: Annotated[int, _setting("bytes per request or reply message", ge=1024)] = 64 << 20
    max_depth: Annotated[int, _setting("nesting of messages, tools and template kwargs", ge=1)] = 64
    max_batch: Annotated[int, _setting("texts per encode/decode, streams per step", ge=1)] = 4096
    max_text_chars: Annotated[int, _setting("characters per encode request, all texts together", ge=1)] = 8_000_000
    max_streams: Annotated[int, _setting("open streams per worker, all clients together", ge=1)] = 16384
    max_session_streams: Annotated[int, _setting(
        "open streams per session (one API process's connection): one tenant cannot hold them all", ge=1)] = 4096
    max_ids: Annotated[int, _setting(
        "token ids per stream open (prompt and replay) or per step, all streams together (more is refused "
        "before any is read)", ge=1)] = 1 << 20
    max_sessions: Annotated[int, _setting(
        "sessions and connections remembered beyond those with open streams (never forgotten while their "
        "streams live)", ge=1)] = 65536
    stream_idle_s: Annotated[float, _setting("seconds a stream may go untouched before it is dropped", gt=0)] = 3600.0
    peer_timeout_s: Annotated[float, _setting(
        "seconds a connection may leave the worker's heartbeats unanswered (its host gone, its network cut) "
        "before it is dropped with its session's streams", gt=0)] = 30.0
    max_constraints: Annotated[int, _setting(
        "compiled constraints kept per worker (least recently used go first)", ge=1)] = 256
    max_constraint_states: Annotated[int, _setting(
        "their compiled states per worker, all together (a state where most of a 150k vocabulary is allowed "
        "holds ~0.75 MB)", ge=1)] = 1024
    max_constraint_mb: Annotated[int, _setting(
        "memory for the compiled constraints per worker, all together (held while a request runs)", ge=1)] = 512
    # Time. A stateless request gets `budget_s` of its own CPU time (an exception between bytecodes); a request
    # that burns `cpu_limit_s` of CPU (stuck in C code, where no exception gets in) kills the process,
    # and the launcher starts a new one.
    budget_s: Annotated[float, _setting(
        "seconds of CPU time per render/encode/decode/compile request (TIMEOUT past it; a busy host only "
        "delays it)", gt=0)] = 10.0
    cpu_limit_s: Annotated[int, _setting(
        "seconds of CPU one request may burn before the worker is killed and restarted", ge=1)] = 60
    max_queue: Annotated[int, _setting("requests a worker reads ahead of the one it handles", ge=1)] = 1024
    max_queue_wait_s: Annotated[float, _setting(
        "seconds a stateless request may wait in a worker's queue (OVERLOADED past it)", gt=0)] = 10.0
    # Loading: the model's files are untrusted input too. Real vocabularies load cold (no disk cache) in at most
    # ~2 s of CPU and ~120 MB (o200k); past either budget the model is refused at start, naming the file.
    load_cpu_s: Annotated[float, _setting(
        "seconds of CPU time the tokenizer's load may take (a model that needs more is refused at start)",
        gt=0)] = DEFAULT_LOAD_CPU_S
    load_memory_mb: Annotated[int, _setting(
        "MB of resident memory the tokenizer's load may add (a model that needs more is refused at start)",
        ge=1)] = DEFAULT_LOAD_MEMORY_MB
    # Memory: RLIMIT_AS on the whole process (MemoryError -> OUT_OF_MEMORY reply); 0 leaves it unset.
    memory_limit_mb: Annotated[int, _setting("address-space limit per worker in MB (0: none)", ge=0)] = 4096
    sink_bytes: Annotated[int, _setting(
        "bytes a directly streamed response may fall behind its client before it is cut", ge=4096)] = 4 << 20
    drain_timeout_s: Annotated[float, _setting(
        "on SIGTERM, seconds to keep stepping open streams (new work is refused) before exiting", ge=0)] = 30.0


def settings() -> list[tuple[str, type, object, str]]:
    """The operator's settings, (field, type, default, description), for the daemon's flags."""
    out = []
    for field in msgspec.inspect.type_info(WorkerOptions).fields:
        if isinstance(field.type, msgspec.inspect.Metadata) and (field.type.extra_json_schema or {}).get("description"):
            kind = field.type.type
            python = next(t for t, info in ((bool, msgspec.inspect.BoolType), (int, msgspec.inspect.IntType),
                                            (float, msgspec.inspect.FloatType)) if isinstance(kind, info)) \
                if not isinstance(kind, msgspec.inspect.UnionType) else str
            out.append((field.name, python, field.default, field.type.extra_json_schema["description"]))
    return out


def validate_options(options: WorkerOptions) -> None:
    """Everything a worker would only find out after starting (or per request), checked at once: a
    ValueError that names the option (the fields' bounds), and for parser names the known ones."""
    from tokworker.parsers.reasoning import get_reasoning_parser
    from tokworker.parsers.tools import get_tool_parser

    try:                                       # msgspec checks the bounds when converting, not in __init__
        msgspec.convert(msgspec.to_builtins(options), WorkerOptions)
    except msgspec.ValidationError as exc:
        expected, _, where = str(exc).partition(" - at `$.")
        where = where.rstrip("`")
        raise ValueError(f"{where}: {expected.replace('`', '')}, got {getattr(options, where, '?')!r}") from None
    if options.log_level not in LOG_LEVELS:
        raise ValueError(f"log_level must be one of {', '.join(LOG_LEVELS)}, got {options.log_level!r}")
    if options.index >= options.pool_size:
        raise ValueError(f"worker index {options.index} is outside a pool of {options.pool_size}")
    if not Path(options.model_dir).exists():
        raise ValueError(f"model directory {options.model_dir} does not exist")
    # The parsers' own constructors are the registries: their errors list every known name. "none" turns a
    # default off, the one the model's template implies included.
    if options.tool_parser not in (None, "none"):
        get_tool_parser(options.tool_parser)
    if options.reasoning_parser not in (None, "none"):
        get_reasoning_parser(options.reasoning_parser)


def options_to_json(options: WorkerOptions) -> str:
    return msgspec.json.encode(options).decode()


def options_from_json(text: str) -> WorkerOptions:
    return msgspec.json.decode(text, type=WorkerOptions)
