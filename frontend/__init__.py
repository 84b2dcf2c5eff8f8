"""tokworker.frontend (installed from frontend/): what the API process imports, TokenizerPool (asyncio,
uvloop-friendly) and the errors it raises.

ChunkFormat (open_stream's `chunks`) has the workers write each stream's OpenAI chunks as server-sent
event bytes, so the API process neither decodes deltas nor encodes JSON per token.

Advice for the API process: once the server has started (models' configs read, routes built, the pool
spawned), call `gc.collect(); gc.freeze()`. Everything alive then lives as long as the process, and frozen
objects are no longer walked by full collections, which otherwise pause the event loop in proportion to
all that long-lived state. Each worker does the same after loading its tokenizer (a full collection there
took 176 ms with Qwen3's tables and trie, 30 ms frozen).
"""

from tokworker.protocol.deltas import ChunkFormat
from tokworker.frontend.client import TokenizerPool
from tokworker.frontend.constraints import Constraint, GuideStep
from tokworker.frontend.errors import (InvalidRequest, NoSuchSocket, Overloaded, PoolError, RequestTimeout, ShuttingDown,
                                       StreamFailed, UnknownStream, WorkerLost)
from tokworker.frontend.stream import StreamHandle

__all__ = ["TokenizerPool", "StreamHandle", "ChunkFormat", "Constraint", "GuideStep",
           "PoolError", "InvalidRequest", "NoSuchSocket", "Overloaded", "RequestTimeout", "ShuttingDown",
           "StreamFailed", "UnknownStream", "WorkerLost"]
