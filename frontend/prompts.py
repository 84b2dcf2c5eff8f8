"""A chat's prompt and its streams in one trip (TokenizerPool.render_open): one `render` carries the streams to
open on the rendered prompt, so its ids cross the wire once and the worker that renders reads where
generation starts from the text.

    reply, streams = await pool.render_open([OpenStream(stream_id="c-0", chunks=fmt)], 32768, messages, tools)
    reply.ids                      # the prompt; streams == [] when it leaves no room in the context

The worker with the fewest streams renders it and opens every stream of the request there (all or none, and
only when the prompt fits: protocol.deltas.room), once its render is done. Its lane reads a close sent
meanwhile before that open, so a caller that gives up mid-render has its streams closed when (and if) the
reply says they opened. A long prompt is cut by its worker into runs (tokenizer/parts.py), which come back as
msgpack this process never decodes; they are encoded at once on the least loaded workers (`encode_run`),
joined, and the streams then opened on the joined ids where they were placed.

The ids come packed (Render.packed): `reply.ids` is an array('I') read from the reply's bytes, no Python int
built for it here, and that is what the streams' handles keep and the engine is given (a list when the worker
sent one: streams that write the prompt's ids into their JSON, ChunkFormat.token_ids).
"""

from __future__ import annotations

import asyncio

import msgspec

from tokworker.protocol.deltas import room
from tokworker.protocol.messages import CloseStreams, EncodeRun, OpenStream, Render, RenderReply
from tokworker.protocol.packed_ids import unpacked_ids
from tokworker.frontend.errors import ShuttingDown
from tokworker.frontend.link import encode_request
from tokworker.frontend.recovery import quiet
from tokworker.frontend.sinks import takes_sink
from tokworker.frontend.stream import StreamHandle


async def render_open(pool, opens: list[OpenStream], max_model_len: int, render: dict,
                      timeout: float | None) -> tuple[RenderReply, list[StreamHandle]]:
    """See the module's docstring; `render`: the Render's fields but `open`, `max_model_len` and `parts`."""
    while True:
        links = pool._for_new_work()
        link = min(links, key=lambda link: (link.open_streams, link.load))
        sink = takes_sink(link.info.capabilities, opens[0].chunks)    # one format for a response's choices
        placed = [msgspec.structs.replace(msg, sink=msg.sink and sink, sink_of=msg.sink_of if msg.sink and sink
                                          else None) for msg in opens]
        body = encode_request(Render(**render, open=placed, max_model_len=max_model_len, parts=len(links),
                                     packed=True))
        link.check(size=len(body))                   # bounded in flight as any render
        streams = [StreamHandle(msg.stream_id, link, msg.params, None, None, False, msg.chunks, pool._retire,
                                None, msg.sink) for msg in placed]
        for stream in streams:
            link.place(stream)
            pool.streams[stream.id] = stream
        gave_up = []                                # the caller stopped waiting

        def rendered(reply: RenderReply):
            reply.ids = unpacked_ids(reply.ids)
            if reply.runs:                          # cut: they open on the joined ids
                if gave_up:
                    forget(pool, streams)
                return reply
            if not reply.opened or gave_up:
                for stream in streams:
                    stream.opened = reply.opened
                forget(pool, streams)
            else:
                acknowledged(streams, reply.ids, max_model_len)
            return reply

        try:
            reply = await link.request(body, on_reply=rendered, on_error=lambda _: forget(pool, streams),
                                       timeout=timeout)
        except ShuttingDown:
            continue                                # that worker is draining: render it on another
        except asyncio.CancelledError:
            gave_up.append(True)
            if streams[0].opened:
                forget(pool, streams)
            raise
        if reply.runs:
            await _join_and_open(pool, reply, placed, streams, max_model_len, timeout)
        return reply, streams if reply.opened else []


async def _join_and_open(pool, reply: RenderReply, placed: list[OpenStream], streams: list[StreamHandle],
                         max_model_len: int, timeout: float | None) -> None:
    """A prompt its worker cut: its other runs encoded at once on the least loaded workers and joined into
    `reply.ids`, then the streams opened on them where they were placed (unless the prompt leaves no room),
    in order (the choices after the first write to its socket)."""
    sent: list[str] = []
    try:
        parts = await asyncio.gather(*(pool._call(EncodeRun(run=run), timeout) for run in reply.runs))
        for part in parts:
            reply.ids.extend(part.ids[0])
        reply.runs = []
        limits = [room(len(reply.ids), stream.params.max_tokens, max_model_len) for stream in streams]
        if 0 in limits:
            forget(pool, streams)
            return
        link, ids = streams[0].link, reply.ids
        requests = []
        for msg, stream, limit in zip(placed, streams, limits):
            params = msgspec.structs.replace(stream.params, max_tokens=limit)
            body = encode_request(msgspec.structs.replace(msg, params=params, prompt_ids=ids))
            requests.append(link.request(body, on_error=stream.fail, stateful=True))
            sent.append(stream.id)
        await asyncio.gather(*requests)
        acknowledged(streams, ids, max_model_len)
        reply.opened = True
    except BaseException:
        for stream in streams:
            stream.opened = stream.opened or stream.id in sent   # the lane opens before it reads a close
        forget(pool, streams)
        raise


def acknowledged(streams: list[StreamHandle], ids, max_model_len: int) -> None:
    """Streams their worker opened on the prompt `ids`: what a replay on another worker opens them with."""
    for stream in streams:
        stream.opened = True
        stream.prompt_ids = ids
        limit = room(len(ids), stream.params.max_tokens, max_model_len)
        if limit != stream.params.max_tokens:
            stream.params = msgspec.structs.replace(stream.params, max_tokens=limit)


def forget(pool, streams: list[StreamHandle]) -> None:
    """Handles whose streams nobody will step: out of the pool's table, and closed on their worker if they
    opened there."""
    opened = [stream.id for stream in streams if stream.opened and not stream.finished]
    for stream in streams:
        if pool.streams.get(stream.id) is stream:
            del pool.streams[stream.id]
        stream.close()
    link = streams[0].link
    if opened and not link.down:
        link.request(encode_request(CloseStreams(stream_ids=opened)), stateful=True).add_done_callback(quiet)
