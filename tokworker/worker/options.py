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
    max_sessions: int = 65536                  # sessions and connections remembered beyond those with open
                                               # streams (which are never forgotten while their streams live)
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
    log_level: str = "INFO"


def options_to_json(options: WorkerOptions) -> str:
    return msgspec.json.encode(options).decode()


def options_from_json(text: str) -> WorkerOptions:
    return msgspec.json.decode(text, type=WorkerOptions)
