"""The worker's table of open streams: one ServedStream per (session, stream id), bounded in count and age.

A stream leaves the table when its update carries a finish_reason (stop string, eos, length), when the
engine finishes it, when the client closes it, when its session resets, or when it sits idle too long.
Ids that arrive for a stream that finished a moment ago (the engine had not yet seen the abort flag) get
an empty update rather than an error; a small bounded memory of finished ids tells the two apart.

A stream opened with a ChunkFormat keeps its format's writer (tokworker.wire) beside its TextStream, and
its updates carry the finished server-sent event bytes (`sse`) instead of deltas: the API process then
decodes one bytes field per stream per step and writes it to the response untouched. A `whole` format
keeps the format's gatherer instead: its updates carry nothing until the last, whose `body` is the
choice's finished JSON. Opened with `sink` too, the worker writes the events itself to the client's socket
(sinks.py) and its updates carry only the finish: finish_reason "abort" once the client can no longer be
written to. The choices of one response share its sink (OpenStream.sink_of), which writes the response's
tail after the last of them ends; a whole response's sink writes the whole HTTP response then (its updates
carry no body).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from functools import partial

import msgspec

from tokworker.protocol.deltas import EMPTY, Delta, StreamParams, StreamUpdate, joined_logprobs
from tokworker.protocol.messages import CodedError, Error, ErrorCode, OpenStream, Step, StepReply
from tokworker.wire import home, params_for, writer_for
from tokworker.wire.common import error_headers, header_lines
from tokworker.stream.state import TextStream
from tokworker.worker.errors import error_of

log = logging.getLogger("tokworker.worker")

CLIENT_GONE = StreamUpdate(finish_reason="abort", abort=True)
REPLAY_PIECE = 4096                         # ids pushed at once in a replay (the budget is checked between)


class ServedStream:
    """One request's text state on the worker: its TextStream, its chunk writer or whole gatherer (or
    None), the client socket it writes its events to itself (a Sink, or None; `unsent`: its events made
    before the socket came, which the API process writes if it never comes) and the time it was last
    stepped (for idle eviction)."""

    __slots__ = ("text", "writer", "whole", "sink", "unsent", "last_used", "chunks", "push_text", "text_event")

    def __init__(self, text, writer, now: float, sink=None, whole=None, chunks=None):
        self.text = text
        self.writer = writer
        self.whole = whole
        self.sink = sink
        self.unsent: list[bytes] = []
        self.last_used = now
        self.chunks = chunks                    # its ChunkFormat (a direct stream's errors are written here)
        # the usual step's short path (`one`): plain content straight to its event, for a writer that has one
        self.text_event = getattr(writer, "text_event", None)
        self.push_text = text.push_text

    def fail(self, error) -> bool:
        """A direct stream's response ends with `error` (a StreamError), in its format; False when its
        client can no longer be written to."""
        sink = self.sink
        if sink.failed is not None or sink.ending or sink.response is not None:
            return False
        fmt = self.chunks
        if fmt.whole:                           # nothing is written yet: the API's error status and body
            sink.respond(error.status, home(fmt.api).error_body(error.status, error.code, error.message, error.param),
                         header_lines(error_headers(error.status)))
            return True
        sink.write(home(fmt.api).error_event(fmt, error.status, error.code, error.message, error.param,
                                             getattr(self.writer, "sequence", 0)))
        sink.end()
        return True

    def step(self, ids, finish: bool, now: float, logprobs=None, reason: str = "length") -> StreamUpdate:
        """This step's ids (and, with `finish`, the engine's end of the stream, for `reason`) -> the one
        update to send. logprobs: the engine's per-id logprobs, for a stream opened with
        StreamParams.logprobs."""
        self.last_used = now
        text = self.text
        if not finish:
            update = text.push(ids) if logprobs is None else text.push(ids, logprobs)
        elif not ids:
            update = text.finish(reason)
        else:                                   # ids and the engine's end in one step: rare
            update = text.push(ids) if logprobs is None else text.push(ids, logprobs)
            if update.finish_reason is None:
                final = text.finish(reason)
                if update.deltas or update.logprobs:
                    final = msgspec.structs.replace(final, deltas=update.deltas + final.deltas,
                                                    logprobs=joined_logprobs((update, final)))
                update = final
        return self._written(update, ids)

    def one(self, token_id: int, now: float) -> StreamUpdate:
        """`step([token_id], False, now)` for a stream whose writer has a short path (`text_event`): plain
        content goes from the detokenizer to its event and the client's socket (or the update's `sse`)
        with no Delta or update in between."""
        self.last_used = now
        text = self.push_text(token_id)
        if text.__class__ is not str:                   # anything but plain content: the update as it is
            return self._written(text, (token_id,))
        if not text:
            return self._written(EMPTY, (token_id,))    # a first step still writes the role chunk
        event = self.text_event(text)
        if event is None:
            return self._written(StreamUpdate([Delta(text)]), (token_id,))
        sink = self.sink
        if sink is None:
            return StreamUpdate(sse=event)
        return self._sink(sink, event, EMPTY)          # its events kept while no socket came

    def _written(self, update: StreamUpdate, ids) -> StreamUpdate:
        """`update` through the stream's writer or gatherer: what goes back to the API process."""
        writer = self.writer
        if writer is None:
            whole = self.whole
            if whole is None:
                return update
            return self._whole(whole, ids, update, self.sink)
        sse = writer.sse(update)
        sink = self.sink
        if sink is not None:
            return self._sink(sink, sse, update)
        if not sse and not update.abort:
            return EMPTY
        # the final update keeps its usage: for n > 1 the API process writes the one usage chunk
        return StreamUpdate(finish_reason=update.finish_reason, stop_reason=update.stop_reason, abort=update.abort,
                            sse=sse, usage=update.usage if update.finish_reason is not None else None)

    def _whole(self, whole, ids, update: StreamUpdate, sink) -> StreamUpdate:
        """A whole choice: gathered here; only its end (with the body, unless its sink writes the response:
        then only while no socket came, for the API process to write if none comes) or an abort goes out."""
        whole.add(update, ids)
        if update.finish_reason is not None:
            body = whole.fragment()
            if sink is not None:
                sink.finished_whole(update.usage, body, self.chunks.index)
                if sink.fd >= 0 or sink.closed:
                    body = b""
            return StreamUpdate(finish_reason=update.finish_reason, stop_reason=update.stop_reason,
                                abort=update.abort, usage=update.usage, body=body)
        return EMPTY if not update.abort else StreamUpdate(abort=True)

    def _sink(self, sink, sse: bytes, update: StreamUpdate) -> StreamUpdate:
        """Direct streaming: the events go to the client's socket; the update says only how it ends."""
        if sse:
            sink.write(sse)
            if sink.fd < 0:
                if not sink.closed:                         # no socket yet: if none comes, the API process
                    self.unsent.append(sse)                 # writes these (its Forward comes after)
            elif self.unsent:
                self.unsent = []
        if update.finish_reason is not None:
            held = b"".join(self.unsent) if sink.fd < 0 and not sink.closed else b""
            sink.finished(update.usage)                     # the last choice's end writes the response's tail
            return StreamUpdate(finish_reason=update.finish_reason, stop_reason=update.stop_reason,
                                abort=update.abort, sse=held, usage=update.usage)
        if sink.failed is not None:
            return CLIENT_GONE
        return EMPTY if not update.abort else StreamUpdate(abort=True)

    def replay(self, batches: list[list[int]], deadline: float) -> bool:
        """Rebuild from ids whose output the client already has (through the writer too, so the role chunk
        is not sent again); True if they finish the stream. Pushed in pieces, with the clock read between
        them: a replay runs on the lane, where no signal can interrupt it, so it keeps its own budget."""
        text, writer, whole = self.text, self.writer, self.whole
        for batch in batches:
            for start in range(0, len(batch), REPLAY_PIECE):
                piece = batch[start:start + REPLAY_PIECE] if len(batch) > REPLAY_PIECE else batch
                update = text.push(piece)
                if writer is not None:
                    writer.sse(update)
                elif whole is not None:
                    whole.add(update, piece)
                if update.finish_reason is not None:
                    return True
                if time.monotonic() > deadline:
                    raise CodedError(ErrorCode.TIMEOUT, "the replay ran past this worker's budget; open the "
                                                        "stream on a worker with a larger --budget")
        return False


def _whole_body(fmt, chunks, prompt_tokens, prompt_ids, usages, bodies) -> bytes:
    """A whole response's body from its choices' (Sink.tail of a whole response)."""
    return fmt.body(chunks, bodies, usages, prompt_tokens, prompt_ids)


class StreamTable:
    def __init__(self, tokenizer, max_streams: int, idle_s: float, tool_parser: str | None = None,
                 reasoning_parser: str | None = None, budget_s: float = 10.0, implied_reasoning: str | None = None,
                 sinks=None, max_session_streams: int | None = None):
        self.tokenizer = tokenizer
        self.sinks = sinks                      # a SinkTable where this worker takes client sockets (ipc)
        self.max_streams = max_streams
        self.max_session_streams = max_session_streams or max_streams
        self.idle_s = idle_s
        self.tool_parser = tool_parser
        self.reasoning_parser = reasoning_parser
        self.implied_reasoning = implied_reasoning   # the model's template's, for streams opened with a prompt
        self.budget_s = budget_s                # wall time for an open's replay
        self.sessions: dict[str, dict[str, ServedStream]] = {}
        self.count = 0
        self.opened = 0
        self._finished: OrderedDict[tuple[str, str], None] = OrderedDict()
        self.cut: set[tuple[str, str]] = set()       # streams cut at the drain timeout, not yet told so

    # ------------------------------------------------------------ lifecycle
    def open(self, session: str, msg: OpenStream) -> None:
        streams = self.sessions.setdefault(session, {})
        if msg.stream_id in streams:
            raise CodedError(ErrorCode.STREAM_EXISTS, f"stream {msg.stream_id!r} is already open")
        if self.count >= self.max_streams:
            raise CodedError(ErrorCode.OVERLOADED, f"this worker holds its limit of {self.max_streams} streams")
        if len(streams) >= self.max_session_streams:
            raise CodedError(ErrorCode.OVERLOADED, f"this session holds its limit of {self.max_session_streams} "
                                                   "streams")
        params = self._with_defaults(msg.params, msg.prompt_ids is not None or msg.prompt_text is not None)
        if msg.chunks is not None:
            params = params_for(msg.chunks, params)
        text = TextStream(self.tokenizer, params, prompt_ids=msg.prompt_ids, prompt_text=msg.prompt_text)
        chunks = msg.chunks
        made = writer_for(chunks, params, msg.prompt_ids, self.tokenizer) if chunks is not None else None
        whole = chunks is not None and chunks.whole
        if msg.sink and (made is None or self.sinks is None):
            raise CodedError(ErrorCode.UNAVAILABLE, "direct streaming needs a chunk format and a worker on ipc://")
        now = time.monotonic()
        sink = None
        if msg.sink and msg.sink_of is not None:
            sink = self.sinks.join(session, msg.stream_id, msg.sink_of)
        elif msg.sink and whole:
            prompt_ids = msg.prompt_ids if chunks.token_ids else None
            sink = self.sinks.open(session, msg.stream_id, chunks.n, partial(
                _whole_body, home(chunks.api), chunks, msg.prompt_tokens, prompt_ids), whole=True)
        elif msg.sink:
            sink = self.sinks.open(session, msg.stream_id, chunks.n, partial(
                home(chunks.api).tail, chunks, include_usage=params.include_usage, prompt_tokens=msg.prompt_tokens))
        stream = ServedStream(text, None if whole else made, now, sink, made if whole else None, chunks)
        self._finished.pop((session, msg.stream_id), None)
        if stream.replay(msg.replay, now + self.budget_s):
            self._remember_finished(session, msg.stream_id)
            return
        streams[msg.stream_id] = stream
        self.count += 1
        self.opened += 1

    def close(self, session: str, stream_ids: list[str], error=None) -> int:
        """Drop streams; a direct one with `error` (a StreamError) first ends its response with it."""
        streams = self.sessions.get(session)
        closed = 0
        for stream_id in stream_ids:
            stream = streams.pop(stream_id, None) if streams is not None else None
            if stream is not None:
                closed += 1
                if stream.sink is not None:
                    # its response's last bytes may still wait (the error, written by it or another choice;
                    # a whole response's, until its socket comes)
                    sink = stream.sink
                    if error is not None and (stream.fail(error) or sink.ending or sink.response is not None):
                        self.sinks.release(session, stream_id)
                    else:
                        self.sinks.close(session, stream_id)
            self._finished.pop((session, stream_id), None)
        self.count -= closed
        if streams is not None and not streams:
            del self.sessions[session]
        return closed

    def drop_session(self, session: str) -> None:
        streams = self.sessions.pop(session, {})
        self.count -= len(streams)
        for stream_id, stream in streams.items():
            if stream.sink is not None:
                self.sinks.close(session, stream_id)

    def forward(self, session: str, stream_id: str) -> bytes:
        """A direct stream whose socket did not come goes on without one: its updates carry their events from
        now on, and the events it made before are returned (none for a stream no longer open: its finish
        carried them). Its sink goes once no choice of its response writes to it."""
        stream = (self.sessions.get(session) or {}).get(stream_id)
        if self.sinks is not None and (stream is None or stream.sink is not None):
            self.sinks.forward(session, stream_id)
        if stream is None or stream.sink is None:
            return b""
        stream.sink = None
        unsent, stream.unsent = stream.unsent, []
        return b"".join(unsent)

    def cut_all(self) -> None:
        """The drain timeout: every open stream ends here, and the next step that names one fails it with
        SHUTTING_DOWN (the engine learns at once, instead of from a lost worker)."""
        for session, streams in self.sessions.items():
            for stream_id, stream in streams.items():
                if stream.sink is not None:
                    self.sinks.close(session, stream_id)
                self.cut.add((session, stream_id))
        self.sessions.clear()
        self.count = 0

    def evict_idle(self) -> int:
        cutoff = time.monotonic() - self.idle_s
        evicted = 0
        for session in list(self.sessions):
            streams = self.sessions[session]
            for stream_id in [s for s, stream in streams.items() if stream.last_used < cutoff]:
                if streams.pop(stream_id).sink is not None:
                    self.sinks.close(session, stream_id)
                evicted += 1
            if not streams:
                del self.sessions[session]
        self.count -= evicted
        if self.sinks is not None:
            self.sinks.evict(time.monotonic())
        return evicted

    # ------------------------------------------------------------ the hot path
    def step(self, session: str, msg: Step) -> StepReply:
        """Step the streams of `msg` in its order: the streams of `ids`, then those only in `finish`; an empty
        update goes out as None."""
        streams = self.sessions.get(session) or {}
        updates: list[StreamUpdate | None] = []
        errors: dict[str, Error] = {}
        finished: list[int] = []
        finish = msg.finish
        ending = set(finish) if finish else ()
        logprobs = msg.logprobs
        aborted = msg.aborted
        now = time.monotonic()
        get, append = streams.get, updates.append
        for stream_id, ids in msg.ids.items():
            stream = get(stream_id)
            if stream is None:
                append(self._missing(session, stream_id, errors))
                continue
            try:
                if ending and stream_id in ending:
                    update = stream.step(ids, True, now, logprobs.get(stream_id) if logprobs else None,
                                         "abort" if stream_id in aborted else "length")
                elif len(ids) == 1 and stream.text_event is not None and not (logprobs and stream_id in logprobs):
                    update = stream.one(ids[0], now)        # the usual step: one id, one event
                else:
                    update = stream.step(ids, False, now, logprobs.get(stream_id) if logprobs else None)
            except Exception as exc:  # a parser bug must cost one stream, not the worker
                self._failed(session, streams, stream_id, exc, errors)
                append(None)
                continue
            if update is EMPTY:
                if ending and stream_id in ending:
                    self._remove(session, streams, stream_id)
                append(None)
                continue
            if update.finish_reason is not None or stream_id in ending:
                self._remove(session, streams, stream_id)
                if update.finish_reason is not None:
                    finished.append(len(updates))
            append(update)
        stepped = msg.ids
        for stream_id in finish:
            if stream_id in stepped:
                continue
            stream = streams.get(stream_id)
            if stream is None:
                updates.append(self._missing(session, stream_id, errors))
                continue
            try:
                update = stream.step((), True, now, reason="abort" if stream_id in aborted else "length")
            except Exception as exc:
                self._failed(session, streams, stream_id, exc, errors)
                updates.append(None)
                continue
            self._remove(session, streams, stream_id)
            if update is EMPTY:
                update = None
            elif update.finish_reason is not None:
                finished.append(len(updates))
            updates.append(update)
        if not streams and session in self.sessions:
            del self.sessions[session]
        sinks = self.sinks
        if sinks is not None:
            if sinks.gathering:                          # several choices' events of one response: one write
                sinks.flush_step()
            if sinks.waiting:                            # some client's socket did not take all its bytes
                sinks.tell_behind(stepped, updates)
        return StepReply(updates=updates, errors=errors, finished=finished)

    # ------------------------------------------------------------ helpers
    def _missing(self, session, stream_id, errors) -> None:
        if self.cut and (session, stream_id) in self.cut:
            self.cut.discard((session, stream_id))
            errors[stream_id] = Error(ErrorCode.SHUTTING_DOWN, "this worker shut down: the stream was cut at its "
                                                               "drain timeout")
        elif (session, stream_id) not in self._finished:
            errors[stream_id] = Error(ErrorCode.UNKNOWN_STREAM, f"no open stream {stream_id!r}")

    def _failed(self, session, streams, stream_id, exc: Exception, errors) -> None:
        code, message = error_of(exc)
        if code == ErrorCode.INTERNAL:
            log.exception("stream %r failed", stream_id)
        errors[stream_id] = Error(code, message)
        if streams[stream_id].sink is not None:
            self.sinks.close(session, stream_id)
        self._remove(session, streams, stream_id, remember=False)

    def _remove(self, session, streams, stream_id, remember=True):
        if streams.pop(stream_id).sink is not None:
            self.sinks.release(session, stream_id)     # its last bytes may still wait for the client
        self.count -= 1
        if remember:
            self._remember_finished(session, stream_id)

    def _remember_finished(self, session, stream_id):
        self._finished[(session, stream_id)] = None
        if len(self._finished) > self.max_streams:
            self._finished.popitem(last=False)

    def _with_defaults(self, params: StreamParams, prompted: bool) -> StreamParams:
        """Fill the worker's default parsers into params that name none; the name "none" turns one off. The
        reasoning parser a template implies applies only to a stream opened with its prompt: where generation
        starts (inside a think block or not) is read from it, and without it plain text could be taken for
        reasoning."""
        tool = params.tool_parser or (self.tool_parser if params.tools else None)
        reasoning = params.reasoning_parser or self.reasoning_parser or (self.implied_reasoning if prompted else None)
        tool = None if tool == "none" else tool
        reasoning = None if reasoning == "none" else reasoning
        if tool == params.tool_parser and reasoning == params.reasoning_parser:
            return params
        return msgspec.structs.replace(params, tool_parser=tool, reasoning_parser=reasoning)
