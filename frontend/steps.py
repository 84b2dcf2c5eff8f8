"""One engine step's whole round trip in the API process, as vLLM's OutputProcessor owns its loop: the step
is split into one Step message per worker, its ids are logged in their streams (all or none), each share is
sent, and each share's reply is handed to its streams and to the step's one future.

The usual step (no stream ending, none with logprobs, every stream open) is split with set operations on
each link's `live` table and sent whole, so nothing visits its streams one by one but the id log; any
other step (finishes, logprobs, streams that ended already) is grouped stream by stream. A reply lists
updates in the step's order, so they are paired with the names that were sent (none is decoded again), and
the streams are visited one by one only when some are buffered or have late output, or the reply names
failures.

Late output: a share whose worker hangs is detached (the step returns without it); what that worker
answers later is held on its streams (`StreamHandle.late`, counted in the link's `late`) and goes to the
engine with the next step that names them.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from array import array
from typing import NamedTuple

from tokworker.protocol.deltas import EMPTY, StreamUpdate
from tokworker.protocol.messages import ErrorCode, ErrorReply, Step
from tokworker.frontend.errors import InvalidRequest, PoolError, StreamFailed, UnknownStream, error_for
from tokworker.frontend.link import encode_request
from tokworker.frontend.pending import Pending
from tokworker.frontend.stream import merge_updates

log = logging.getLogger("tokworker.frontend")
_LEFT_OUT = object()                  # the place of a stream a reply has no update for


def send_step(links: list, table: dict, ids: dict, finish=(), aborted=()) -> asyncio.Future:
    """Send the step `ids` (stream id -> new ids, or (ids, logprobs)) ending `finish` over `links`, whose
    streams are in `table`; the future gets {stream id: StreamUpdate}."""
    if not finish and ids and not aborted:
        shares = _shares(links, ids)
        if shares is not None:
            return _send_shares(table, shares)
    return _send_grouped(table, ids, finish, aborted)


# ---------------------------------------------------------------- splitting and sending

class _Group(NamedTuple):
    """One link's share of a step that is grouped stream by stream."""

    ids: dict                   # stream id -> the ids sent
    streams: list               # their StreamHandles, in that order (then those of finish_only)
    finish_only: list           # streams the step only ends
    finishing: list             # every stream the step ends


def _shares(links: list, ids: dict) -> list | None:
    """The usual step split by link, or None for any other step."""
    keys = ids.keys()
    shares, covered = [], 0
    for link in links:
        live = link.live
        if not live:
            continue
        if link.scored:
            return None
        if keys <= live.keys():
            return [(link, dict(ids))]              # the caller may reuse its dict for the next step
        mine = keys & live.keys()
        if mine:
            shares.append((link, {stream_id: ids[stream_id] for stream_id in mine}))
            covered += len(mine)
    return shares if covered == len(ids) else None


def _send_shares(table: dict, shares: list) -> asyncio.Future:
    """Each link's share as one Step (several, past the worker's streams per step); a step on one link (the
    usual case) needs no StepCall. A share whose link tells news only (every stream there written to its
    client by its worker) goes out news_only: the step does not wait for it, and what it has to say goes
    to the link's on_news."""
    pieces = []
    for link, share in shares:
        limit = link.info.limits.max_batch
        if len(share) <= limit:
            pieces.append((link, share))
        else:
            items = list(share.items())
            pieces += [(link, dict(items[at:at + limit])) for at in range(0, len(items), limit)]
    future = asyncio.get_running_loop().create_future()
    news_only = [link.tells_news_only() for link, _ in pieces]
    awaited = news_only.count(False)
    call = StepCall(future, None, awaited) if awaited > 1 else None
    parts = []
    for (link, share), told in zip(pieces, news_only):
        body = encode_request(Step(ids=share, news_only=told))
        link.check(size=len(body))                  # every link takes its share, or none does
        parts.append((link, StepPart(body, None, None, link, share) if told else
                             StepPart(body, future, call, link, share)))
    _dispatch(table, parts)
    if not awaited:
        future.set_result({})
    return future


def _send_grouped(table: dict, ids: dict, finish, aborted=()) -> asyncio.Future:
    """Any step: streams on several links, streams that ended already, finishes, logprobs."""
    late: dict[str, StreamUpdate] | None = None
    groups: dict = {}                                # link -> _Group
    scored: dict = {}                                # link -> streams stepped as (ids, logprobs)
    for stream_id, batch in ids.items():
        stream = table.get(stream_id)
        if stream is None or stream.finished:
            late = _ended(table, stream_id, late)
            continue
        group = _group(groups, stream.link)
        if type(batch) is tuple:
            batch, logprobs = batch
            scored.setdefault(stream.link, {})[stream_id] = logprobs
        group.ids[stream_id] = batch
        group.streams.append(stream)
    for stream_id in dict.fromkeys(finish):
        stream = table.get(stream_id)
        if stream is None or stream.finished:
            late = _ended(table, stream_id, late)
            continue
        group = _group(groups, stream.link)
        group.finishing.append(stream_id)
        if stream_id not in group.ids:
            group.finish_only.append(stream_id)
    future = asyncio.get_running_loop().create_future()
    if not groups:
        future.set_result(late or {})
        return future
    pieces = [(link, piece) for link, group in groups.items()
              for piece in _split(group, link.info.limits.max_batch)]
    call = StepCall(future, late, len(pieces))
    parts = []
    for link, group in pieces:
        logprobs = scored.get(link, {})
        if logprobs and len(pieces) > len(groups):
            logprobs = {stream_id: logprobs[stream_id] for stream_id in group.ids if stream_id in logprobs}
        body = encode_request(Step(ids=group.ids, finish=group.finishing, logprobs=logprobs,
                                   aborted=[s for s in group.finishing if s in aborted] if aborted else []))
        link.check(size=len(body))                   # every link takes its share, or none does
        group.streams.extend(table[stream_id] for stream_id in group.finish_only)
        parts.append((link, StepPart(body, future, call, link, group.ids, group.finish_only, group.streams,
                                     bool(group.finishing))))
    _dispatch(table, parts)
    return future


def _split(group: _Group, limit: int) -> list[_Group]:
    """A link's share cut into Steps the worker takes (`limit` streams named per step, a stream in both `ids`
    and `finish` named twice); a stream's ids and its finish stay in one."""
    finishing = set(group.finishing)
    if len(group.ids) + len(finishing) <= limit:
        return [group]
    pieces, piece, named = [], _Group({}, [], [], []), 0
    for (stream_id, batch), stream in zip(group.ids.items(), group.streams):
        ends = stream_id in finishing
        if named + 1 + ends > limit:
            pieces.append(piece)
            piece, named = _Group({}, [], [], []), 0
        piece.ids[stream_id] = batch
        piece.streams.append(stream)
        if ends:
            piece.finishing.append(stream_id)
        named += 1 + ends
    for stream_id in group.finish_only:
        if named + 1 > limit:
            pieces.append(piece)
            piece, named = _Group({}, [], [], []), 0
        piece.finish_only.append(stream_id)
        piece.finishing.append(stream_id)
        named += 1
    pieces.append(piece)
    return pieces


def _group(groups: dict, link) -> _Group:
    group = groups.get(link)
    if group is None:
        group = groups[link] = _Group({}, [], [], [])
    return group


def _dispatch(table: dict, parts: list) -> None:
    """Log every part's ids in the streams that keep a log, all or none (see extend_logs), then send the
    parts."""
    logged = []
    try:
        for link, part in parts:
            if link.logged:
                extend_logs(part.ids, table)
                logged.append(part.ids)
    except InvalidRequest:
        for batch_ids in logged:
            drop_logged(batch_ids, table)
        raise
    for link, part in parts:
        if part.future is None:
            link.send_news_only(part)
            continue
        link.send(part)
        if link.lagging:                             # replaced as hung: the others' share does not wait for it
            part.detach()


def _ended(table: dict, stream_id: str, late: dict | None) -> dict:
    """Ids for a stream that has ended (the engine had not seen the abort yet), or that never was."""
    stream = table.get(stream_id)
    if stream is None:
        raise UnknownStream(ErrorCode.UNKNOWN_STREAM, f"no stream {stream_id!r}")
    late = {} if late is None else late
    late[stream_id] = _untold(stream) or EMPTY
    return late


# ---------------------------------------------------------------- what the engine has not been told yet

def _untold(stream) -> StreamUpdate | None:
    """What the engine has not been told, once: late output, then the failure."""
    late, failure = stream.take_late(), stream.take_failure()
    if late is None:
        return failure
    return late if failure is None else merge_updates((late, failure))


# ---------------------------------------------------------------- id logs

def extend_logs(ids: dict, streams) -> None:
    """Log each batch of `ids` (stream id -> ids) in its stream (found in `streams`), all or none: a batch
    that is not a list of ids raises InvalidRequest naming its stream, with every log as it was."""
    try:
        for stream_id, batch in ids.items():
            log = streams[stream_id].log
            if log is not None:                          # else the engine keeps the stream's ids
                log.extend(batch)
    except (TypeError, OverflowError):
        for stream_id, batch in ids.items():
            log = streams[stream_id].log
            if log is None:
                continue
            try:
                array("q", batch)
            except (TypeError, OverflowError) as exc:   # the batch that failed: undo the part it added
                del log[len(log) - _valid_prefix(batch):]
                drop_logged({k: ids[k] for k in itertools.takewhile(lambda k: k != stream_id, ids)}, streams)
                raise InvalidRequest(ErrorCode.INVALID, f"the ids of stream {stream_id!r} are not a list of "
                                                        f"token ids: {exc}") from None
        raise


def drop_logged(ids: dict, streams) -> None:
    """Undo extend_logs(ids, streams)."""
    for stream_id, batch in ids.items():
        log = streams[stream_id].log
        if log is not None:
            del log[len(log) - len(batch):]


def _valid_prefix(batch) -> int:
    """How many leading items of `batch` an id log accepts (array.extend appends those before it fails)."""
    count = 0
    for item in batch:
        try:
            array("q", [item])
        except (TypeError, OverflowError):
            break
        count += 1
    return count


# ---------------------------------------------------------------- replies

class StepCall:
    """An engine step whose streams live on several links (or that answers some streams itself): one
    future, resolved with every stream's update once each link's share is answered."""

    __slots__ = ("future", "results", "remaining")

    def __init__(self, future: asyncio.Future, results: dict | None, parts: int):
        self.future, self.results, self.remaining = future, results, parts

    def done(self, updates: dict) -> None:
        results = self.results
        if results is None:
            self.results = updates
        else:
            results.update(updates)
        self.remaining -= 1
        if not self.remaining and not self.future.done():
            self.future.set_result(self.results)

    def failed(self, error: PoolError) -> None:
        if not self.future.done():
            self.future.set_exception(error)


class StepPart(Pending):
    """One link's share of an engine step: `ids` (stream id -> the ids sent) and `finish_only` (streams
    the step only ends), whose names, in that order, are the order of the reply's updates. `streams` are
    their StreamHandles when the step looked them up; a step sent whole to its one link (the usual case) did
    not, and a reply that needs them finds them in the link's table. `call` is the StepCall when the step
    has other shares; otherwise the reply resolves `future` itself, or, sent news_only (no future), goes to
    the link's on_news."""

    __slots__ = ("future", "call", "link", "ids", "finish_only", "streams", "finishing", "detached")

    def __init__(self, body: bytes, future, call: StepCall | None, link, ids: dict, finish_only: list = (),
                 streams: list | None = None, finishing: bool = False):
        super().__init__(body, True)
        self.future, self.call, self.link = future, call, link
        self.ids, self.finish_only, self.streams = ids, finish_only, streams
        self.finishing = finishing              # ends streams: the engine steps them no more, so it waits
        self.detached = False

    def _names(self) -> list:
        names = list(self.ids)
        if self.finish_only:
            names += self.finish_only
        return names

    def _streams(self, names: list) -> list:
        if self.streams is None:
            live, table = self.link.live, self.link.table
            self.streams = [live.get(name) or table.get(name) for name in names]
        return self.streams

    def _done(self, updates: dict) -> None:
        if self.call is not None:
            self.call.done(updates)
        elif self.future is None:
            _tell(self.link, updates)
        elif not self.future.done():
            self.future.set_result(updates)

    def detach(self) -> None:
        """The worker hangs: the step returns without this share (its streams' updates empty for now); the
        share's output, when the replaced worker answers, reaches the engine with its next step."""
        if not self.detached and not self.finishing:
            self.detached = True
            self._done(dict.fromkeys(self._names(), EMPTY))

    def step_ids(self) -> dict:
        return self.ids

    def reply(self, reply) -> None:
        if type(reply) is ErrorReply:
            self.fail(error_for(reply.code, reply.message))
            return
        names = self._names()
        updates = reply.updates
        link = self.link
        if reply.errors or len(updates) != len(names) or link.buffered or link.late or self.detached:
            self._attend(names, updates, reply.errors)
            return
        results = {name: EMPTY if update is None else update for name, update in zip(names, updates)}
        if reply.finished:
            live = link.live
            for place in reply.finished:
                stream = live.get(names[place])
                if stream is not None:           # else closed by the caller while the step was in flight
                    stream.acknowledged(updates[place])
        self._done(results)

    def _attend(self, names: list, updates: list, errors: dict) -> None:
        """The reply stream by stream: buffered streams, late output to pass on, streams the worker could not
        step (they fail with its error; one it left out fails as our bug), a share the step returned without."""
        results = {}
        for place, (name, stream) in enumerate(zip(names, self._streams(names))):
            update = updates[place] if place < len(updates) else _LEFT_OUT
            error = errors.get(name)
            if stream is None:                   # closed by the caller while the step was in flight
                results[name] = EMPTY
                continue
            if error is not None or update is _LEFT_OUT:
                failure = stream.fail(error_for(error.code, error.message) if error is not None else
                                      PoolError(ErrorCode.INTERNAL, "the worker's step reply left this stream out"))
                if not self.detached:            # else the next step that names it reports it; this one
                    failure = _untold(stream) or failure   # may report a failure from before (a replay)
                results[name] = failure or EMPTY
                continue
            if update is None:
                update = EMPTY
            stream.acknowledged(update)
            if self.detached:                    # the step returned without us: the engine hears it next time
                stream.hold_late(update)
            elif stream.late is not None:
                update = merge_updates((stream.take_late(), update))
            results[name] = update
        if not self.detached:
            self._done(results)

    def fail(self, error: PoolError) -> None:
        """The step failed as a whole (timeout, worker lost, rejected): its streams' state is unknown to
        their callers, so they end with the error rather than continue with a gap."""
        streams = [stream for stream in self._streams(self._names()) if stream is not None]
        for stream in streams:
            stream.fail(StreamFailed(error.code, f"a step of this stream failed: {error.message}"))
        if self.future is None:                      # news only: the failures are the news
            _tell(self.link, {stream.id: _untold(stream) or EMPTY for stream in streams})
        elif self.call is not None:
            self.call.failed(error)
        elif not self.future.done():
            self.future.set_exception(error)


def _tell(link, updates: dict) -> None:
    """A news-only step's news to `link.on_news`, which runs as the reply is read: a bug there must not stop
    the link's reading."""
    try:
        link.on_news(updates)
    except Exception:
        log.exception("on_news failed on the updates of %d streams", len(updates))
