"""How one engine step leaves the API process: split into one Step message per worker, the ids logged in
their streams (all or none), each share sent, one future for the whole step.

The usual step (no stream ending, none with logprobs, every stream open) is split with set operations on
each link's `live` table and sent whole, so nothing visits its streams one by one but the id log; any
other step (finishes, logprobs, streams that ended already) is grouped stream by stream.
"""

from __future__ import annotations

import asyncio

from tokworker.protocol.deltas import EMPTY, StreamUpdate
from tokworker.protocol.messages import ErrorCode, Step
from tokworker.frontend.constraints import encode_request
from tokworker.frontend.errors import InvalidRequest, UnknownStream
from tokworker.frontend.stream import StepCall, StepPart, drop_logged, extend_logs


def send_step(links: list, table: dict, ids: dict, finish=()) -> asyncio.Future:
    """Send the step `ids` (stream id -> new ids, or (ids, logprobs)) ending `finish` over `links`, whose
    streams are in `table`; the future gets {stream id: StreamUpdate}."""
    if not finish and ids:
        shares = _shares(links, ids)
        if shares is not None:
            return _send_shares(table, shares)
    return _send_grouped(table, ids, finish)


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
    """Each link's share as one Step; a step on one link (the usual case) needs no StepCall."""
    future = asyncio.get_running_loop().create_future()
    call = StepCall(future, None, len(shares)) if len(shares) > 1 else None
    parts = []
    for link, share in shares:
        body = encode_request(Step(ids=share))
        link.check(size=len(body))                  # every link takes its share, or none does
        parts.append((link, StepPart(body, future, call, link, share)))
    _dispatch(table, parts)
    return future


def _send_grouped(table: dict, ids: dict, finish) -> asyncio.Future:
    """Any step: streams on several links, streams that ended already, finishes, logprobs."""
    late: dict[str, StreamUpdate] | None = None
    groups: dict = {}                                # link -> (ids, streams, finish-only, finishing)
    scored: dict = {}                                # link -> streams stepped as (ids, logprobs)
    for stream_id, batch in ids.items():
        stream = table.get(stream_id)
        if stream is None or stream.finished:
            late = _late(table, stream_id, late)
            continue
        group = _group(groups, stream.link)
        if type(batch) is tuple:
            batch, logprobs = batch
            scored.setdefault(stream.link, {})[stream_id] = logprobs
        group[0][stream_id] = batch
        group[1].append(stream)
    for stream_id in dict.fromkeys(finish):
        stream = table.get(stream_id)
        if stream is None or stream.finished:
            late = _late(table, stream_id, late)
            continue
        group = _group(groups, stream.link)
        group[3].append(stream_id)
        if stream_id not in group[0]:
            group[2].append(stream_id)
    future = asyncio.get_running_loop().create_future()
    if not groups:
        future.set_result(late or {})
        return future
    call = StepCall(future, late, len(groups))
    parts = []
    for link, (batch_ids, streams, finish_only, finishing) in groups.items():
        body = encode_request(Step(ids=batch_ids, finish=finishing, logprobs=scored.get(link, {})))
        link.check(size=len(body))                   # every link takes its share, or none does
        streams += [table[stream_id] for stream_id in finish_only]
        parts.append((link, StepPart(body, future, call, link, batch_ids, finish_only, streams, bool(finishing))))
    _dispatch(table, parts)
    return future


def _group(groups: dict, link) -> tuple:
    group = groups.get(link)
    if group is None:
        group = groups[link] = ({}, [], [], [])
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
        link.send(part)
        if link.lagging:                             # replaced as hung: the others' share does not wait for it
            part.detach()


def _late(table: dict, stream_id: str, late: dict | None) -> dict:
    """Ids for a stream that has ended (the engine had not seen the abort yet), or that never was."""
    stream = table.get(stream_id)
    if stream is None:
        raise UnknownStream(ErrorCode.UNKNOWN_STREAM, f"no stream {stream_id!r}")
    late = {} if late is None else late
    late[stream_id] = stream.take_failure() or EMPTY
    return late
