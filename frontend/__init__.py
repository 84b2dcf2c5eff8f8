"""What the API process imports: TokenizerPool (asyncio, uvloop-friendly) and the errors it raises."""

from frontend.client import TokenizerPool
from frontend.errors import (InvalidRequest, Overloaded, PoolError, RequestTimeout, StreamFailed, UnknownStream,
                             WorkerLost)
from frontend.stream import Stream

__all__ = ["TokenizerPool", "Stream", "PoolError", "InvalidRequest", "Overloaded", "RequestTimeout", "StreamFailed",
           "UnknownStream", "WorkerLost"]
