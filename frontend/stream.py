"""StreamHandle: the API process's side of one stream: where it lives, every id sent for it, and its updates.

The pool's table of StreamHandles is its only record of streams (a finished one stays a while, small, so that
late ids for it are not errors). `log` holds every id sent for the stream, in order. It is what makes a
worker's death invisible: the link replays the log onto the replacement worker, less the ids of steps
still unanswered (those it re-sends), so the client sees each delta exactly once. A stream's state after
some ids does not depend on how they were grouped into steps (TextStream's tested invariant), so the log
keeps ids, not steps: one flat array, 8 bytes an id and nothing for the cyclic collector to walk. A
finished stream lets go of its log, prompt and params.

An engine already holds every stream's ids (vLLM's request.output_token_ids): a stream opened with
`engine_ids`, a callable that returns every id step() has been given for it, keeps no log, and a replay
asks the engine instead. The callable must never return an id before step() has been given it (append and
step in one stretch of code without an await), or a replay would send it and the step again. Such a stream's
ids are checked by the worker, not here: a batch that is not ids fails the step's streams on that worker,
since the engine's record now holds ids the worker never took.

Iterating a StreamHandle (`async for update in stream`) yields its StreamUpdates as steps deliver them; updates
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
from tokworker.protocol.messages import ErrorCode, OpenStream, Step, encode_message
from tokworker.frontend.errors import InvalidRequest, PoolError, StreamFailed

MAX_BUFFERED = 64
REPLAY_BATCH = 4096  # ids per batch when a log is replayed


class StreamFailure(StreamUpdate, kw_only=True):
    """The update that ends a failed stream: finish_reason "error", abort, and the error's code and message
    (whoever writes the stream's response writes the error in its format: tokworker.wire's error_event).
    Made here, never sent by a worker."""

    code: str
    message: str = ""


def failure_update(error: PoolError) -> StreamFailure:
    return StreamFailure(finish_reason="error", abort=True, code=error.code, message=error.message)


def merge_updates(updates) -> StreamUpdate:
    """Several consecutive updates of one stream as one: deltas (and sse bytes, logprob entries) in order,
    the last finish and the last usage win, and any `behind` stays."""
    deltas, sse, finish, reason, abort, usage, body, behind = [], [], None, None, False, None, b"", False
    for update in updates:
        deltas.extend(update.deltas)
        sse.append(update.sse)
        if update.finish_reason is not None:
            finish, reason = update.finish_reason, update.stop_reason
        abort = abort or update.abort
        usage = update.usage or usage
        body = update.body or body
        behind = behind or update.behind
    return StreamUpdate(deltas=deltas, finish_reason=finish, stop_reason=reason, abort=abort, sse=b"".join(sse),
                        logprobs=joined_logprobs(updates), usage=usage, body=body, behind=behind)


class StreamHandle:
    """What the pool's open_stream returns and keeps in its table (see the module's docstring); its link
    counts it from `place` to `remove`."""

    def __init__(self, stream_id: str, link, params: StreamParams, prompt_ids, prompt_text, buffer: bool,
                 chunks: ChunkFormat | None = None, on_end=None, engine_ids=None, sink: bool = False):
        self.id = stream_id
        self.sink = sink                        # its worker writes its events to the client (direct streaming)
        self.direct = sink                      # it was opened so (a Forward may have ended `sink` since)
        self.handed = False                     # its client's socket went to its worker
        self.unsent = sink                      # direct, and none of its events has reached its client yet
        self.link = link
        self.params = params
        self.prompt_ids = prompt_ids
        self.prompt_text = prompt_text
        self.chunks = chunks
        self.engine_ids = engine_ids
        # the ids sent, for a replay on another worker: none where the engine keeps them; a direct stream's
        # only until its socket is handed over (then it ends with its worker; until then it may be forwarded)
        self.logged = engine_ids is None
        self.log = array("q") if self.logged else None
        self.opened = False                     # the worker acknowledged the open: a recovery replays it
        self.finished = False
        self.finish_reason: str | None = None
        self.error: PoolError | None = None
        self.buffered = buffer
        self._buffer: deque | None = deque() if buffer else None
        self._waiter: asyncio.Future | None = None
        self._unreported: StreamFailure | None = None
        self.late: StreamUpdate | None = None   # output of a step its worker answered after the step had returned
        self._on_end = on_end
        self.scored = params.logprobs is not None   # steps carry (ids, logprobs) for it

    def replay_request(self, in_flight: int = 0) -> bytes:
        """The OpenStream that rebuilds this stream on a new worker: its log (or the engine's record), less
        its last `in_flight` ids (sent again with their steps), in batches. An engine record that fails
        (raises, is too short, holds what no id is) raises InvalidRequest naming the stream."""
        log = self._sent(in_flight)
        batches = [list(log[i:i + REPLAY_BATCH]) for i in range(0, len(log), REPLAY_BATCH)]
        return self._encoded(OpenStream(stream_id=self.id, params=self.params, prompt_ids=self.prompt_ids,
                                        prompt_text=self.prompt_text, chunks=self.chunks, replay=batches))

    def _sent(self, in_flight: int):
        """Every id sent for this stream (its log, or the engine's record) but the last `in_flight`."""
        log = self.log
        if log is None:
            try:
                log = self.engine_ids()
                len(log)
            except Exception as exc:                 # the caller's callable: its failure is this stream's
                raise InvalidRequest(ErrorCode.INVALID, f"engine_ids of stream {self.id!r} raised {exc!r}") from None
            if len(log) < in_flight:
                raise InvalidRequest(ErrorCode.INVALID, f"engine_ids of stream {self.id!r} returned {len(log)} ids, "
                                                        f"fewer than the {in_flight} of its unanswered steps")
        return log[:max(len(log) - in_flight, 0)]

    def _encoded(self, msg) -> bytes:
        try:
            return encode_message(msg)
        except (TypeError, ValueError, OverflowError) as exc:     # the engine's record holds what no id is
            raise InvalidRequest(ErrorCode.INVALID, f"the replay of stream {self.id!r} cannot be encoded: {exc}") from None

    def handed_over(self) -> None:
        """Its client's socket went to its worker, which writes its events: it is never replayed (its worker's
        death ends it), so it keeps no log from now on. A whole one's worker writes nothing before the
        response's end: its death leaves the client nothing, so it is rebuilt as a forwarded stream, as one
        whose socket never came (`unsent`), and keeps its log."""
        if self.chunks is not None and self.chunks.whole:
            return
        if not (self.finished or self.handed):
            self.link.handed += 1
        self.handed = True
        self.unsent = False
        if self.logged and not self.finished:
            self.logged = False
            self.link.logged -= 1
            self.log = None

    def forwarded(self, update: StreamUpdate | None) -> None:
        """Its socket did not reach its worker: its events come in its updates' `sse` from now on, and `update`
        (what the worker made before) goes to the engine with the next step that names it."""
        self.sink = self.unsent = False
        if update is not None and not self.finished:
            self.acknowledged(update)
            self.hold_late(update)

    def forward_requests(self, in_flight: int = 0) -> tuple[bytes, bytes]:
        """A direct stream whose socket never reached its worker, rebuilt on a new one as a forwarded stream:
        an OpenStream without `sink` and a Step of every id but those of its unanswered steps (re-sent), whose
        output is its client's (none of it was written)."""
        ids = self._sent(in_flight)
        self.sink = False
        opened = OpenStream(stream_id=self.id, params=self.params, prompt_ids=self.prompt_ids,
                            prompt_text=self.prompt_text, chunks=self.chunks)
        return encode_message(opened), self._encoded(Step(ids={self.id: list(ids)}))

    # ------------------------------------------------------------ fed by the pool
    def acknowledged(self, update: StreamUpdate) -> None:
        """The worker produced `update` for this stream."""
        if self.finished:
            return                              # closed while the step was in flight
        if update.finish_reason is not None:
            self._end(update.finish_reason)
        self._deliver(update)

    def fail(self, error: PoolError) -> StreamFailure | None:
        """End with `error`; the failure update goes to the next step that names this stream (how the engine
        learns), or is returned here to go into the current step's result."""
        if self.finished:
            return None
        self.error = error
        self._unreported = failure_update(error)
        self._end("error")
        return self._unreported

    def close(self) -> None:
        """Closed by the caller: no more updates; an iterator ends after what is buffered."""
        if not self.finished:
            self._end("abort")

    def hold_late(self, update: StreamUpdate) -> None:
        """Keep `update` for the next step that names this stream (steps.py). The link counts the open streams
        holding late output (its step replies must look at them); a finished one's goes out when a step names
        it again, uncounted, and link.remove uncounts one that ends holding some, so the count goes back to 0."""
        if self.late is None:
            if not self.finished:
                self.link.late += 1
            self.late = update
        else:
            self.late = merge_updates((self.late, update))

    def take_late(self) -> StreamUpdate | None:
        late, self.late = self.late, None
        if late is not None and not self.finished:
            self.link.late -= 1
        return late

    def take_failure(self) -> StreamFailure | None:
        """The failure the engine has not been told of, once."""
        failure, self._unreported = self._unreported, None
        return failure

    def _end(self, reason: str) -> None:
        self.finished = True
        self.finish_reason = reason
        self.link.remove(self)
        self.log = self.engine_ids = self.prompt_ids = self.prompt_text = self.params = None   # kept: little
        if self._on_end is not None:
            self._on_end(self)
        self._wake()

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
