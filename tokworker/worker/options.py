"""One worker's settings and limits: a msgspec Struct, so the launcher hands them to a worker process
as one JSON argument and the daemon's flags map onto them one to one."""

from __future__ import annotations

from pathlib import Path

import msgspec

# The small tokenizer bundled with the package (what `tokworker demo` runs on), a pool's default model.
DEFAULT_MODEL_DIR = Path(__file__).resolve().parent.parent / "data" / "default"


class WorkerOptions(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    model_dir: str
    bind: str                                  # this worker's own endpoint (ipc://... or tcp://...)
    index: int = 0                             # place in the daemon: endpoint = base + index
    pool_size: int = 1
    curve_keys: str | None = None              # directory made by `tokworker keys`; required for tcp://
    tool_parser: str | None = None             # defaults for streams whose params name none
    reasoning_parser: str | None = None
    allow_request_templates: bool = False      # chat templates sent in requests are untrusted code
    # Sizes. An oversize frame is dropped by ZeroMQ itself (MAXMSGSIZE); the rest get a TOO_LARGE reply.
    max_message_bytes: int = 64 << 20
    max_depth: int = 64                        # nesting of messages / tools / template kwargs
    max_batch: int = 4096                      # texts per encode/decode, streams per step
    max_text_chars: int = 8_000_000            # characters per encode request, all texts together
    max_streams: int = 16384                   # open streams per worker, all sessions together
    stream_idle_s: float = 3600.0              # a stream untouched this long is dropped
    max_constraints: int = 256                 # compiled constraints kept (least recently used go first)
    max_constraint_states: int = 1024          # their compiled states, all together (a state where most of a
                                               # 150k vocabulary is allowed holds ~0.75 MB)
    # Time. A stateless request gets `budget_s` of wall time (an exception between bytecodes); a request
    # that burns `cpu_limit_s` of CPU (stuck in C code, where no exception gets in) kills the process,
    # and the launcher starts a new one.
    budget_s: float = 10.0
    cpu_limit_s: int = 60
    max_queue: int = 1024                      # requests read ahead of the one being handled
    max_queue_wait_s: float = 10.0             # a stateless request that waited longer: OVERLOADED
    # Memory: RLIMIT_AS on the whole process (MemoryError -> OUT_OF_MEMORY reply); 0 leaves it unset.
    memory_limit_mb: int = 4096
    # SIGTERM: refuse new streams and renders (SHUTTING_DOWN), step the open streams until they end or this
    # many seconds pass, then exit.
    drain_timeout_s: float = 30.0
    log_level: str = "INFO"


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_AT_LEAST_ONE = ("max_message_bytes", "max_depth", "max_batch", "max_text_chars", "max_streams", "max_constraints",
                 "max_constraint_states", "cpu_limit_s", "max_queue")
_POSITIVE = ("stream_idle_s", "budget_s", "max_queue_wait_s")
_NOT_NEGATIVE = ("memory_limit_mb", "drain_timeout_s")


def validate_options(options: WorkerOptions) -> None:
    """Everything a worker would only find out after starting (or per request), checked at once: a
    ValueError that names the option, and for parser names the known ones."""
    from tokworker.parsers.reasoning import get_reasoning_parser
    from tokworker.parsers.tools import get_tool_parser

    for name in _AT_LEAST_ONE:
        if getattr(options, name) < 1:
            raise ValueError(f"{name} must be at least 1, got {getattr(options, name)}")
    for name in _POSITIVE:
        if not getattr(options, name) > 0:
            raise ValueError(f"{name} must be above 0, got {getattr(options, name)}")
    for name in _NOT_NEGATIVE:
        if getattr(options, name) < 0:
            raise ValueError(f"{name} must not be negative, got {getattr(options, name)}")
    if options.log_level not in LOG_LEVELS:
        raise ValueError(f"log_level must be one of {', '.join(LOG_LEVELS)}, got {options.log_level!r}")
    if not 0 <= options.index < options.pool_size:
        raise ValueError(f"worker index {options.index} is outside a pool of {options.pool_size}")
    if not Path(options.model_dir).exists():
        raise ValueError(f"model directory {options.model_dir} does not exist")
    # The parsers' own constructors are the registries: their errors list every known name.
    if options.tool_parser is not None:
        get_tool_parser(options.tool_parser)
    if options.reasoning_parser is not None:
        get_reasoning_parser(options.reasoning_parser)


def options_to_json(options: WorkerOptions) -> str:
    return msgspec.json.encode(options).decode()


def options_from_json(text: str) -> WorkerOptions:
    return msgspec.json.decode(text, type=WorkerOptions)
