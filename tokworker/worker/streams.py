"""The worker's table of open streams: one TextStream per (session, stream id), bounded in count and age.

A stream leaves the table when its update carries a finish_reason (stop string, eos, length), when the
engine finishes it, when the client closes it, when its session resets, or when it sits idle too long.
Ids that arrive for a stream that finished a moment ago (the engine had not yet seen the abort flag) get
an empty update rather than an error; a small bounded memory of finished ids tells the two apart.

A stream opened with a ChunkFormat keeps the writer of its format (tokworker.sse) beside its TextStream,
and its updates carry the finished server-sent event bytes (`sse`) instead of deltas: the API process then
decodes one bytes field per stream per step and writes it to the response untouched.
"""

from __future__ import annotations

import time
from collections import OrderedDict

import msgspec

from tokworker.protocol.deltas import StreamParams, StreamUpdate, joined_logprobs
from tokworker.protocol.messages import Error, ErrorCode, OpenStream, Step, StepReply
from tokworker.sse import params_for, writer_for

EMPTY = StreamUpdate()


class WorkerError(Exception):
    """A request failed in a way the client should hear about: carries an ErrorCode value."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class StreamTable:
    def __init__(self, tokenizer, max_streams: int, idle_s: float, tool_parser: str | None = None,
                 reasoning_parser: str | None = None):
        self.tokenizer = tokenizer
        self.max_streams = max_streams
        self.idle_s = idle_s
        self.tool_parser = tool_parser
        self.reasoning_parser = reasoning_parser
        # session -> stream id -> [TextStream, last used, ChunkWriter or None]
        self.sessions: dict[str, dict[str, list]] = {}
        self.count = 0
        self.opened = 0
        self._finished: OrderedDict[tuple[str, str], None] = OrderedDict()

    # ------------------------------------------------------------ lifecycle
    def open(self, session: str, msg: OpenStream) -> None:
        streams = self.sessions.setdefault(session, {})
        if msg.stream_id in streams:
            raise WorkerError(ErrorCode.STREAM_EXISTS, f"stream {msg.stream_id!r} is already open")
        if self.count >= self.max_streams:
            raise WorkerError(ErrorCode.OVERLOADED, f"this worker holds its limit of {self.max_streams} streams")
        try:
            from tokworker.stream.state import TextStream
        except ImportError as exc:
            raise WorkerError(ErrorCode.UNAVAILABLE, f"streams are not available: {exc}") from None
        try:
            params = self._with_defaults(msg.params)
            if msg.chunks is not None:
                params = params_for(msg.chunks, params)
            stream = TextStream(self.tokenizer, params, prompt_ids=msg.prompt_ids, prompt_text=msg.prompt_text)
            writer = (writer_for(msg.chunks, params, msg.prompt_ids, self.tokenizer)
                      if msg.chunks is not None else None)
        except (ValueError, KeyError, TypeError) as exc:
            raise WorkerError(ErrorCode.INVALID, f"cannot open stream: {exc}") from None
        finished = False
        for batch in msg.replay:                 # rebuild a stream from its ids; its client already has the text
            update = stream.push(batch)
            if writer is not None:
                writer.sse(update)               # discarded too, but the writer now knows the role was sent
            if update.finish_reason is not None:
                finished = True
                break
        self._finished.pop((session, msg.stream_id), None)
        if finished:
            self._remember_finished(session, msg.stream_id)
            return
        streams[msg.stream_id] = [stream, time.monotonic(), writer]
        self.count += 1
        self.opened += 1

    def close(self, session: str, stream_ids: list[str]) -> int:
        streams = self.sessions.get(session)
        closed = 0
        for stream_id in stream_ids:
            if streams is not None and streams.pop(stream_id, None) is not None:
                closed += 1
            self._finished.pop((session, stream_id), None)
        self.count -= closed
        if streams is not None and not streams:
            del self.sessions[session]
        return closed

    def drop_session(self, session: str) -> None:
        self.count -= len(self.sessions.pop(session, {}))

    def evict_idle(self) -> int:
        cutoff = time.monotonic() - self.idle_s
        evicted = 0
        for session in list(self.sessions):
            streams = self.sessions[session]
            for stream_id in [s for s, entry in streams.items() if entry[1] < cutoff]:
                del streams[stream_id]
                evicted += 1
            if not streams:
                del self.sessions[session]
        self.count -= evicted
        return evicted

    # ------------------------------------------------------------ the hot path
    def step(self, session: str, msg: Step) -> StepReply:
        streams = self.sessions.get(session, {})
        updates: dict[str, StreamUpdate] = {}
        errors: dict[str, Error] = {}
        chunked: dict = {}                        # stream id -> writer: updates that leave as server-sent events
        logprobs = msg.logprobs
        now = time.monotonic()
        for stream_id, ids in msg.ids.items():
            entry = streams.get(stream_id)
            if entry is None:
                self._missing(session, stream_id, updates, errors)
                continue
            if entry[2] is not None:
                chunked[stream_id] = entry[2]
            try:
                update = entry[0].push(ids, logprobs.get(stream_id)) if logprobs else entry[0].push(ids)
            except Exception as exc:  # a parser bug must cost one stream, not the worker
                errors[stream_id] = Error(ErrorCode.STREAM_FAILED, f"{type(exc).__name__}: {exc}")
                self._remove(session, streams, stream_id, remember=False)
                continue
            entry[1] = now
            updates[stream_id] = update
            if update.finish_reason is not None:
                self._remove(session, streams, stream_id)
        for stream_id in msg.finish:
            entry = streams.get(stream_id)
            if entry is None:
                if stream_id not in updates and stream_id not in errors:
                    self._missing(session, stream_id, updates, errors)
                continue
            if entry[2] is not None:
                chunked[stream_id] = entry[2]
            try:
                final = entry[0].finish()
            except Exception as exc:
                errors[stream_id] = Error(ErrorCode.STREAM_FAILED, f"{type(exc).__name__}: {exc}")
                updates.pop(stream_id, None)
                self._remove(session, streams, stream_id, remember=False)
                continue
            earlier = updates.get(stream_id)
            updates[stream_id] = final if earlier is None else _joined(earlier, final)
            self._remove(session, streams, stream_id)
        if not streams and session in self.sessions:
            del self.sessions[session]
        for stream_id, writer in chunked.items():     # after finish: its text joins the same step's chunks
            update = updates.get(stream_id)
            if update is not None:
                sse = writer.sse(update)
                # the final update keeps its usage: for n > 1 the API process writes the one usage chunk
                updates[stream_id] = StreamUpdate(finish_reason=update.finish_reason, stop_reason=update.stop_reason,
                                                  abort=update.abort, sse=sse,
                                                  usage=update.usage if update.finish_reason is not None else None
                                                  ) if sse or update.abort else EMPTY
        return StepReply(updates=updates, errors=errors)

    # ------------------------------------------------------------ helpers
    def _missing(self, session, stream_id, updates, errors):
        if (session, stream_id) in self._finished:
            updates[stream_id] = EMPTY
        else:
            errors[stream_id] = Error(ErrorCode.UNKNOWN_STREAM, f"no open stream {stream_id!r}")

    def _remove(self, session, streams, stream_id, remember=True):
        del streams[stream_id]
        self.count -= 1
        if remember:
            self._remember_finished(session, stream_id)

    def _remember_finished(self, session, stream_id):
        self._finished[(session, stream_id)] = None
        if len(self._finished) > self.max_streams:
            self._finished.popitem(last=False)

    def _with_defaults(self, params: StreamParams) -> StreamParams:
        """Fill the worker's default parsers into params that name none; the name "none" turns one off."""
        tool = params.tool_parser or (self.tool_parser if params.tools else None)
        reasoning = params.reasoning_parser or self.reasoning_parser
        tool = None if tool == "none" else tool
        reasoning = None if reasoning == "none" else reasoning
        if tool == params.tool_parser and reasoning == params.reasoning_parser:
            return params
        return msgspec.structs.replace(params, tool_parser=tool, reasoning_parser=reasoning)



def _joined(earlier: StreamUpdate, final: StreamUpdate) -> StreamUpdate:
    """A step's push and the engine's finish of the same stream as one update."""
    return msgspec.structs.replace(final, deltas=earlier.deltas + final.deltas,
                                   logprobs=joined_logprobs((earlier, final)))
