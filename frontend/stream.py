"""The API process's side of one stream: where it lives, what it has been fed, and its updates.

`log` holds every id the worker has acknowledged, in order. It is what makes a worker's death invisible:
the pool replays the log onto the replacement worker (output discarded) and re-sends the batches that
were in flight, so the client sees each delta exactly once. A stream's state after some ids does not
depend on how they were grouped into steps (TextStream's tested invariant), so the log keeps ids, not
steps: one flat array, 8 bytes an id and nothing for the cyclic collector to walk (a list per step per
stream was most of the pool's garbage-collection time with hundreds of streams).

Iterating a Stream (`async for update in stream`) yields its StreamUpdates as steps deliver them; updates
that pile up while nobody reads are merged into one, so the buffer stays one entry per unread step at most
`MAX_BUFFERED` long. The iteration ends after the update that carries the finish reason, or raises
StreamFailed if the stream failed.

A stream opened with a ChunkFormat gets its output as server-sent event bytes (`update.sse`, deltas empty);
`chunks` is kept so that a replay on a new worker asks for the same chunks.
"""

from __future__ import annotations

import asyncio
from array import array
from collections import deque

from tokworker.protocol.deltas import ChunkFormat, StreamParams, StreamUpdate, joined_logprobs
from tokworker.frontend.errors import PoolError, StreamFailed

MAX_BUFFERED = 64
REPLAY_BATCH = 4096  # ids per batch when a log is replayed
FAILED = StreamUpdate(finish_reason="error", abort=True)


def merge_updates(updates) -> StreamUpdate:
    """Several consecutive updates of one stream as one: deltas (and sse bytes, logprob entries) in order,
    the last finish and the last usage win."""
    deltas, sse, finish, reason, abort, usage = [], [], None, None, False, None
    for update in updates:
        deltas.extend(update.deltas)
        sse.append(update.sse)
        if update.finish_reason is not None:
            finish, reason = update.finish_reason, update.stop_reason
        abort = abort or update.abort
        usage = update.usage or usage
    return StreamUpdate(deltas=deltas, finish_reason=finish, stop_reason=reason, abort=abort, sse=b"".join(sse),
                        logprobs=joined_logprobs(updates), usage=usage)


class Stream:
    def __init__(self, stream_id: str, link, params: StreamParams, prompt_ids, prompt_text, buffer: bool,
                 chunks: ChunkFormat | None = None):
        self.id = stream_id
        self.link = link
        self.params = params
        self.prompt_ids = prompt_ids
        self.prompt_text = prompt_text
        self.chunks = chunks
        self.log = array("q")
        self.finished = False
        self.finish_reason: str | None = None
        self.error: PoolError | None = None
        self.buffered = buffer
        self._buffer: deque | None = deque() if buffer else None
        self._waiter: asyncio.Future | None = None
        self._unreported_failure = False

    def replay_batches(self) -> list[list[int]]:
        """The log as OpenStream.replay batches."""
        log = self.log
        return [log[i:i + REPLAY_BATCH].tolist() for i in range(0, len(log), REPLAY_BATCH)]

    # ------------------------------------------------------------ fed by the pool
    def acknowledged(self, update: StreamUpdate) -> None:
        """The worker produced `update` (the pool has already logged the ids that made it)."""
        if update.finish_reason is not None:
            self.finished = True
            self.finish_reason = update.finish_reason
        self._deliver(update)

    def fail(self, error: PoolError) -> None:
        if self.finished:
            return
        self.finished = True
        self.finish_reason = "error"
        self.error = error
        self._unreported_failure = True
        self._wake()

    def close(self) -> None:
        """Closed by the caller: no more updates; an iterator ends after what is buffered."""
        if not self.finished:
            self.finished = True
            self.finish_reason = "abort"
        self._wake()

    def take_failure(self) -> StreamUpdate | None:
        """The error update once, for the next step that names this stream (how the engine learns)."""
        if self._unreported_failure:
            self._unreported_failure = False
            return FAILED
        return None

    def _deliver(self, update: StreamUpdate) -> None:
        buffer = self._buffer
        if buffer is None:
            return
        buffer.append(update)
        if len(buffer) > MAX_BUFFERED:
            merged = merge_updates(buffer)
            buffer.clear()
            buffer.append(merged)
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ------------------------------------------------------------ read by the API handler
    def __aiter__(self):
        if self._buffer is None:
            raise TypeError("this stream was opened with buffer=False: read updates from step()'s return value")
        return self

    async def __anext__(self) -> StreamUpdate:
        buffer = self._buffer
        while not buffer:
            if self.finished:
                if self.error is not None:
                    raise StreamFailed(self.error.code, self.error.message)
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if len(buffer) == 1:
            return buffer.popleft()
        update = merge_updates(buffer)
        buffer.clear()
        return update
