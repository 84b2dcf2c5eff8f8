"""Opening a stream on the pool (TokenizerPool.open_stream): its arguments checked, the worker chosen (the
one with the fewest streams, or the worker of the stream it opens beside), and its StreamHandle placed on that
worker's link before the open is sent, so a step never finds it missing.
"""

from __future__ import annotations

import asyncio

from tokworker.protocol.deltas import ChunkFormat, StreamParams
from tokworker.protocol.messages import ErrorCode, OpenStream
from tokworker.frontend.errors import InvalidRequest, Overloaded, ShuttingDown
from tokworker.frontend.link import encode_request
from tokworker.frontend.sinks import takes_sink
from tokworker.frontend.stream import StreamHandle


async def open_stream(pool, stream_id: str, params: StreamParams | None, prompt_ids, prompt_text, buffer: bool,
                      chunks: ChunkFormat | None, engine_ids, sink: bool, beside: str | None,
                      prompt_tokens: int | None) -> StreamHandle:
    """TokenizerPool.open_stream on `pool`; see its docstring."""
    if chunks is not None and not isinstance(chunks, ChunkFormat):
        raise InvalidRequest(ErrorCode.INVALID, f"chunks is a ChunkFormat, not {type(chunks).__name__}")
    if not isinstance(stream_id, str):
        raise InvalidRequest(ErrorCode.INVALID, f"stream ids are str, not {type(stream_id).__name__}")
    if engine_ids is not None and not callable(engine_ids):
        raise InvalidRequest(ErrorCode.INVALID, f"engine_ids is a callable returning the stream's ids, not "
                                                f"{type(engine_ids).__name__}")
    pool._check_open()
    existing = pool.streams.get(stream_id)
    if existing is not None and not existing.finished:
        raise InvalidRequest(ErrorCode.STREAM_EXISTS, f"stream {stream_id!r} is already open")
    if pool.open_streams >= pool.max_streams:
        raise Overloaded(ErrorCode.OVERLOADED, f"{pool.open_streams} streams open, the pool's limit")
    params = params or StreamParams()
    prompt_ids = list(prompt_ids) if prompt_ids is not None else None
    if beside is not None:
        first = pool.streams.get(beside)
        if first is None or first.finished:
            raise InvalidRequest(ErrorCode.UNKNOWN_STREAM, f"no open stream {beside!r} to open {stream_id!r} "
                                                           f"beside")
        direct = sink and first.sink and chunks is not None
        return await _open_on(pool, first.link, stream_id, params, prompt_ids, prompt_text, buffer, chunks,
                              engine_ids, direct, beside if direct else None)
    while True:
        link = min(pool._for_new_work(), key=lambda link: (link.open_streams, link.load))
        capabilities = link.info.capabilities
        direct = sink and takes_sink(capabilities, chunks)
        try:
            return await _open_on(pool, link, stream_id, params, prompt_ids, prompt_text, buffer, chunks,
                                  engine_ids, direct, prompt_tokens=prompt_tokens if direct else None)
        except ShuttingDown:
            continue                                     # that worker is draining: open it on another


async def _open_on(pool, link, stream_id: str, params: StreamParams, prompt_ids, prompt_text,
                   buffer: bool, chunks, engine_ids, sink: bool, sink_of: str | None = None,
                   prompt_tokens: int | None = None) -> StreamHandle:
    """Open the stream on `link` (a WorkerLink); `sink_of`: the stream whose client socket it shares."""
    body = encode_request(OpenStream(stream_id=stream_id, params=params, prompt_ids=prompt_ids,
                                     prompt_text=prompt_text, chunks=chunks, sink=sink, sink_of=sink_of,
                                     prompt_tokens=prompt_tokens))
    link.check(size=len(body))                   # refused before the stream exists anywhere
    stream = StreamHandle(stream_id, link, params, prompt_ids, prompt_text, buffer, chunks, pool._retire,
                          engine_ids, sink)
    link.place(stream)

    def opened(reply):
        stream.opened = True
        return stream

    pool.streams[stream_id] = stream
    try:
        return await link.request(body, on_reply=opened, on_error=stream.fail, stateful=True)
    except asyncio.CancelledError:
        # the caller gave up while the worker opens it: it is closed there too, or it would stay open
        # (and counted) with no one to close it
        await asyncio.shield(pool.close_stream(stream_id))
        raise
