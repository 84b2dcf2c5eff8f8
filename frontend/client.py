"""TokenizerPool: the API process's asyncio handle on a pool of tokworker workers.

    pool = await TokenizerPool.spawn(model_dir, workers=4)        # local workers over private ipc://
    pool = await TokenizerPool.connect("tcp://host:7000", curve_keys="keys/")   # a `tokworker serve` daemon

    prompt = await pool.render(messages, tools=tools)              # any worker, the least loaded
    constraint = await pool.compile(tools=tools, tool_name="f")    # kept on a worker; then per engine step:
    masks = await pool.guide({"req-1": (constraint, state, sampled_ids)})   # next state + token bitmask
    stream = await pool.open_stream("req-1", StreamParams(stop=["</answer>"]), prompt_ids=prompt.ids)
    updates = await pool.step({"req-1": [17, 42], "req-2": [5]})   # one message per worker per engine step
    async for update in stream: ...                                # the same updates, per stream

A stream opened with `chunks=ChunkFormat(id, model, created)` gets `update.sse`: its OpenAI chunks as
finished server-sent event bytes, written by the worker, for the HTTP response as they are.

A stream lives on one worker (its state is there); render/encode/decode go to whichever worker has the
fewest requests in flight. Every request has a timeout; a full pool raises Overloaded instead of queueing
without bound; a worker that dies is restarted (by the launcher, or by the daemon's) and the link replays
what it lost, so callers see each delta exactly once (see link.py).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
import uuid
from collections import deque
from collections.abc import Sequence
from pathlib import Path

import zmq

from tokworker.protocol.deltas import ChunkFormat, StreamParams, StreamUpdate
from tokworker.protocol.messages import (CloseStreams, StreamError, Compile, Decode, Encode, ErrorCode, OpenStream, Render,
                               RenderReply, Stats, StatsReply)
from tokworker.frontend.constraints import Constraint, GuideStep, compile_on, guide
from tokworker.frontend.opens import open_stream
from tokworker.frontend.prompts import render_open
from tokworker.frontend.errors import InvalidRequest, NoSuchSocket, Overloaded, PoolError, ShuttingDown, WorkerLost
from tokworker.worker.launcher import Launcher
from tokworker.frontend.link import WorkerLink, encode_request
from tokworker.frontend.handover import hand_over
from tokworker.frontend.steps import send_step
from tokworker.frontend.stream import StreamHandle
from tokworker.worker.options import DEFAULT_MODEL_DIR, WorkerOptions
from tokworker.protocol.endpoints import (ClientKeys, MissingDirectory, check_ipc_peer, parse_endpoint,
                                          worker_endpoints)
from tokworker.worker.endpoint_lock import holder

MAX_FORGOTTEN = 16384


class TokenizerPool:
    """The pool's handle (see the module's docstring). One engine step through it, on the bundled tokenizer:
    the stop string's first characters are held back until the next step shows them to be the stop, which
    also tells the engine to abort the request.

    >>> import asyncio
    >>> from tokworker.protocol.deltas import StreamParams
    >>> async def two_steps():
    ...     async with await TokenizerPool.spawn(workers=1) as pool:
    ...         ids = await pool.encode("Hello world! STOP here")
    ...         print([await pool.decode([i]) for i in ids])
    ...         await pool.open_stream("req-1", StreamParams(stop=["STOP"]), buffer=False)
    ...         for batch in (ids[:3], ids[3:]):                      # two engine steps
    ...             update = (await pool.step({"req-1": batch}))["req-1"]
    ...             print([d.content for d in update.deltas], update.finish_reason, update.stop_reason, update.abort)
    >>> asyncio.run(two_steps())
    ['Hel', 'lo', ' wor', 'ld', '!', ' S', 'T', 'O', 'P', ' here']
    ['Hello wor'] None None False
    ['ld! '] stop STOP True
    """

    def __init__(self, endpoints: list[str], *, keys: ClientKeys | None = None, request_timeout: float = 30.0,
                 connect_timeout: float = 60.0, max_inflight: int = 256, max_attempts: int = 3,
                 hang_timeout: float = 10.0, launcher: Launcher | None = None, run_dir: str | None = None):
        self.context = zmq.Context(io_threads=1)
        self.keys = keys
        self.session = uuid.uuid4().hex
        self._link_options = dict(keys=keys, request_timeout=request_timeout, connect_timeout=connect_timeout,
                                  max_inflight=max_inflight, max_attempts=max_attempts, hang_timeout=hang_timeout,
                                  on_hung=self._replace_hung, on_news=None)
        self.streams: dict[str, StreamHandle] = {}   # the one table of streams, open and lately finished
        self.links: list[WorkerLink] = [self._new_link(endpoint, i) for i, endpoint in enumerate(endpoints)]
        self.launcher = launcher
        self.run_dir = run_dir
        self._ended: deque[StreamHandle] = deque()   # finished streams still in the table, oldest first
        self.max_streams = 0
        self.closed = False

    def _new_link(self, endpoint: str, index: int) -> WorkerLink:
        link = WorkerLink(self.context, endpoint, f"{self.session}-{index}", self.streams, **self._link_options)
        link.failover = self._failover
        return link

    def _failover(self, lost: WorkerLink) -> str | None:
        """Where a link whose worker stayed unreachable for connect_timeout rebuilds its streams: the worker
        (of another daemon, when a whole daemon went away) with the fewest streams that is up."""
        others = [link for link in self.links if link.ready and not link.draining and link.endpoint != lost.endpoint]
        return min(others, key=lambda link: link.open_streams).endpoint if others else None

    # ------------------------------------------------------------ construction
    @classmethod
    async def spawn(cls, model_dir: str | Path | None = None, workers: int = 2, *, request_timeout: float = 30.0,
                    startup_timeout: float = 60.0, max_inflight: int = 256, max_attempts: int = 3,
                    chat_template: str | None = None, hang_timeout: float = 10.0,
                    **worker_options) -> "TokenizerPool":
        """Start `workers` local worker processes on private ipc:// sockets and connect to them.
        `chat_template` replaces the model's template: a template file, its text, or "chatml".
        `worker_options` are WorkerOptions fields (tool_parser, reasoning_parser, memory_limit_mb, ...).
        A request whose worker died under it is sent again, `max_attempts` times in all; a worker that
        answers nothing (not even a liveness probe) for `hang_timeout` while work waits is killed and
        replaced the same way."""
        run_dir = tempfile.mkdtemp(prefix="tokworker-")         # mode 0700: only this user can reach the sockets
        endpoints = worker_endpoints(f"ipc://{run_dir}/worker", workers)    # the daemon's naming: discoverable
        worker_options.setdefault("log_level", "WARNING")
        options = [WorkerOptions(model_dir=str(model_dir or DEFAULT_MODEL_DIR), bind=endpoint, index=i,
                                 pool_size=workers, chat_template=chat_template, **worker_options)
                   for i, endpoint in enumerate(endpoints)]
        launcher = Launcher(options).start()
        pool = cls(endpoints, request_timeout=request_timeout, connect_timeout=startup_timeout,
                   max_inflight=max_inflight, max_attempts=max_attempts, hang_timeout=hang_timeout,
                   launcher=launcher, run_dir=run_dir)
        try:
            starting = asyncio.ensure_future(pool._start())
            while not starting.done():
                await asyncio.wait([starting], timeout=0.1)
                if launcher.crash_looping and not starting.done():
                    starting.cancel()
                    raise PoolError(ErrorCode.WORKER_FAILED, f"workers for {model_dir or DEFAULT_MODEL_DIR} cannot "
                                                             f"start: {launcher.failure}")
            starting.result()
        except BaseException:
            await pool.close()
            raise
        return pool

    @classmethod
    async def connect(cls, endpoints: str | list[str], *, curve_keys: str | Path | ClientKeys | None = None,
                      discover: bool = True, request_timeout: float = 30.0, connect_timeout: float = 10.0,
                      max_inflight: int = 256, max_attempts: int = 3) -> "TokenizerPool":
        """Connect to running workers (a `tokworker serve` daemon). With `discover`, each endpoint that is a
        daemon's first worker brings in the rest of that daemon's workers."""
        endpoints = [endpoints] if isinstance(endpoints, str) else list(endpoints)
        for endpoint in endpoints:            # a ValueError at once for a malformed or hijackable endpoint
            await _checked_peer(endpoint, connect_timeout)
        keys = ClientKeys.from_dir(curve_keys) if isinstance(curve_keys, (str, Path)) else curve_keys
        pool = cls(endpoints, keys=keys, request_timeout=request_timeout, connect_timeout=connect_timeout,
                   max_inflight=max_inflight, max_attempts=max_attempts)
        try:
            await pool._start()
            if discover:
                known = set(endpoints)
                extra = [ep for link in pool.links if link.info.index == 0 and link.info.pool_size > 1
                         for ep in worker_endpoints(link.endpoint, link.info.pool_size)[1:] if ep not in known]
                if extra:
                    links = [pool._new_link(ep, len(pool.links) + i) for i, ep in enumerate(extra)]
                    pool.links.extend(links)
                    await pool._start(links)
        except BaseException:
            await pool.close()
            raise
        return pool

    async def _start(self, links: list[WorkerLink] | None = None) -> None:
        links = self.links if links is None else links
        expected = self.links[0].info.model_fingerprint if self.links[0].info else None
        for link in links:
            link.expected_fingerprint = expected
        infos = await asyncio.gather(*(link.start() for link in links))
        fingerprints = {info.model_fingerprint for info in infos} | ({expected} if expected else set())
        if len(fingerprints) != 1:
            raise PoolError(ErrorCode.MODEL_MISMATCH, f"workers serve different tokenizers: {sorted(fingerprints)}")
        for link in self.links:
            link.expected_fingerprint = infos[0].model_fingerprint
        self.max_streams = sum(link.info.limits.max_streams for link in self.links if link.info)

    def _replace_hung(self, link: WorkerLink) -> bool:
        """A worker of ours that stopped answering is killed; the launcher starts another and the link
        recovers as after any death. Workers of a daemon are not ours to kill (False)."""
        pid = link.info.pid if link.info is not None else None
        if self.launcher is None or pid is None or pid not in self.launcher.pids:
            return False
        os.kill(pid, signal.SIGKILL)
        return True

    @property
    def info(self):
        """The first worker's handshake: vocab size, eos ids, capabilities, limits."""
        return self.links[0].info

    async def __aenter__(self) -> "TokenizerPool":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ------------------------------------------------------------ stateless requests
    def _for_new_work(self) -> list[WorkerLink]:
        """Links that take new work: connected ones first, never one whose worker is draining."""
        links = [link for link in self.links if link.ready and not link.draining] or \
            [link for link in self.links if not link.down and not link.draining]
        if not links:
            if any(link.draining for link in self.links):
                raise ShuttingDown(ErrorCode.SHUTTING_DOWN, "every worker is shutting down")
            raise WorkerLost(ErrorCode.WORKER_LOST, "no worker is reachable")
        return links

    def _least_loaded(self) -> WorkerLink:
        return min(self._for_new_work(), key=lambda link: link.load)

    async def _call(self, msg, timeout: float | None):
        self._check_open()
        body = encode_request(msg)
        while True:
            link = self._least_loaded()                      # raises when every worker is draining
            try:
                return await link.request(body, timeout=timeout)
            except ShuttingDown:
                continue                                     # that link is marked draining: the next one

    async def render(self, messages: list[dict], tools: list[dict] | None = None, *, add_generation_prompt: bool = True,
                     continue_final_message: bool = False, chat_template: str | None = None, return_text: bool = False,
                     documents: list[dict] | None = None, timeout: float | None = None,
                     **template_kwargs) -> RenderReply:
        """Messages -> prompt ids (and the text with return_text) through the model's chat template."""
        return await self._call(Render(messages=messages, tools=tools, documents=documents,
                                       add_generation_prompt=add_generation_prompt,
                                       continue_final_message=continue_final_message, chat_template=chat_template,
                                       template_kwargs=template_kwargs, return_text=return_text), timeout)

    async def render_open(self, opens: list[OpenStream], max_model_len: int, messages: list, tools=None, *,
                          add_generation_prompt: bool = True, continue_final_message: bool = False,
                          chat_template: str | None = None, documents: list | None = None,
                          timeout: float | None = None, **template_kwargs) -> tuple[RenderReply, list[StreamHandle]]:
        """render(), and in the same trip the streams of `opens` (OpenStream messages without a prompt) opened
        on the rendered prompt, on one worker; see prompts.py. Their handles come back (step them as
        open_stream's), or none when the prompt leaves them no room in the context of `max_model_len`."""
        self._check_open()
        for msg in opens:
            existing = self.streams.get(msg.stream_id)
            if existing is not None and not existing.finished:
                raise InvalidRequest(ErrorCode.STREAM_EXISTS, f"stream {msg.stream_id!r} is already open")
        if self.open_streams + len(opens) > self.max_streams:
            raise Overloaded(ErrorCode.OVERLOADED, f"{self.open_streams} streams open, the pool's limit")
        render = dict(messages=messages, tools=tools, documents=documents, add_generation_prompt=add_generation_prompt,
                      continue_final_message=continue_final_message, chat_template=chat_template,
                      template_kwargs=template_kwargs)
        return await render_open(self, opens, max_model_len, render, timeout)

    async def encode(self, texts: str | list[str], *, add_special_tokens: bool = False,
                     split_special_tokens: bool = False, timeout: float | None = None):
        """A text -> its ids; a list of texts -> a list of id lists (one message, one worker)."""
        single = isinstance(texts, str)
        reply = await self._call(Encode(texts=[texts] if single else list(texts), add_special_tokens=add_special_tokens,
                                        split_special_tokens=split_special_tokens), timeout)
        return reply.ids[0] if single else reply.ids

    async def decode(self, ids, *, skip_special_tokens: bool = False, timeout: float | None = None):
        """Ids -> text; a list of id lists -> a list of texts."""
        batch = bool(ids) and not isinstance(ids[0], int)
        reply = await self._call(Decode(ids=[list(x) for x in ids] if batch else [list(ids)],
                                        skip_special_tokens=skip_special_tokens), timeout)
        return reply.texts if batch else reply.texts[0]

    async def compile(self, *, pattern: str | None = None, json_schema: dict | None = None,
                      tools: list[dict] | None = None, tool_name: str | None = None, format: str = "hermes",
                      eos_token_ids: list[int] | None = None, timeout: float | None = None) -> Constraint:
        """A regex / JSON schema / forced tool call -> a Constraint kept on the least loaded worker, for
        guide() to answer per-step masks from (see frontend/constraints.py)."""
        self._check_open()
        request = encode_request(Compile(pattern=pattern, json_schema=json_schema, tools=tools, tool_name=tool_name,
                                  format=format, eos_token_ids=eos_token_ids))
        return await compile_on(self._least_loaded(), request, timeout)

    async def guide(self, queries: dict[str, tuple[Constraint, int, list[int]]], *,
                    timeout: float | None = None) -> dict[str, GuideStep | PoolError]:
        """One engine step of constrained decoding: {name: (constraint, state, ids sampled since)} -> {name:
        GuideStep(state, mask, accepting)}, or that query's PoolError. One message per worker."""
        self._check_open()
        return await guide(self, queries, timeout)

    async def stats(self) -> list[StatsReply]:
        return list(await asyncio.gather(*(link.request(encode_request(Stats())) for link in self.links if link.ready)))

    # ------------------------------------------------------------ streams
    async def open_stream(self, stream_id: str, params: StreamParams | None = None, prompt_ids: list[int] | None = None,
                          prompt_text: str | None = None, *, buffer: bool = True,
                          chunks: ChunkFormat | None = None, engine_ids=None, sink: bool = False,
                          beside: str | None = None, prompt_tokens: int | None = None) -> StreamHandle:
        """Create a stream on the worker with the fewest; `buffer=False` when only step()'s return value is
        read (no per-stream buffer to fill). With `chunks`, every update carries `sse`: the stream's OpenAI
        chat.completion.chunk server-sent events (`data: {json}\n\n` each), and no deltas.
        `engine_ids`: a callable returning every id step() has been given for this stream (the engine's own
        record, e.g. `lambda: request.output_token_ids`); the pool then keeps no copy and a replay after a
        worker's death reads it (see stream.py for its contract).
        `sink` (with `chunks`): direct streaming, where the worker takes it (a local worker): the worker
        writes the events itself to the client socket given to hand_over() (a `whole` format: the whole HTTP
        response, once its choices ended); the returned StreamHandle's `sink` says whether it does. Such a
        stream is not replayed after its worker's death: it fails.
        `beside`: an open stream's id: this one opens on that stream's worker (the choices of one response on
        one worker); with `sink`, where that stream writes its client's socket itself, this one writes to the
        same socket (the response's events interleaved, its tail after the last of `chunks.n` choices), and
        hand_over takes them together. `prompt_tokens` (the first choice of several): the response's prompt
        tokens, for its usage chunk (several prompts; none: the first choice's)."""
        return await open_stream(self, stream_id, params, prompt_ids, prompt_text, buffer, chunks, engine_ids, sink,
                                 beside, prompt_tokens)

    def hand_over(self, stream_id: str, fd: int, shared: Sequence[str] = (), head: bytes = b"") -> bool:
        """Give the worker of a stream opened with `sink` the client's socket `fd` (it gets a reference of
        its own; the caller's stays open until the caller closes it); `shared`: the streams opened `beside`
        it, which write to the same socket; `head`: a whole response's headers ("Name: value\\r\\n" each),
        which its worker writes after the status line, or a streamed one's status line and headers, which it
        writes before the first event (frontend/handover.py). Never waits: True when the
        socket is on its way; False when that worker cannot take it now (its lane is stopped or far behind) or
        cannot be reached. Then the caller
        writes the response itself, as for streams opened without `sink`: each stream's updates carry its
        events in `sse` from its next step on, those its worker made already first (a Forward each; counted
        once in `handover_fallbacks`), or in its finish when the step that ended it was sent already.
        WorkerLost when a finish reached the caller before this call (the caller, writing nothing then, has
        dropped its events: it cuts the response short)."""
        return hand_over(self.streams, stream_id, fd, shared, head)

    @property
    def handover_fallbacks(self) -> int:
        """Client sockets that workers could not take at once, whose responses were forwarded instead (for
        the front door's /metrics)."""
        return sum(link.handover_fallbacks for link in self.links)

    @property
    def on_news(self):
        """None, or a callable that takes {stream id: update}. Set, a step of streams whose worker writes
        their client's socket goes out without waiting for an answer (its update would be empty but for
        their end), and those streams' ends and failures come to it instead (an engine loop sets it)."""
        return self._link_options["on_news"]

    @on_news.setter
    def on_news(self, callback) -> None:
        self._link_options["on_news"] = callback
        for link in self.links:
            link.on_news = callback

    @property
    def open_streams(self) -> int:
        return sum(link.open_streams for link in self.links)

    def submit_step(self, ids: dict[str, list[int]], finish=(), aborted=()) -> asyncio.Future:
        """Send one engine step now (one message per worker) and return a future of {stream id: update}.
        An engine loop can keep several steps in flight; each stream's updates still arrive in order."""
        self._check_open()
        return send_step(self.links, self.streams, ids, finish, aborted)

    async def step(self, ids: dict[str, list[int]], finish=(), aborted=()) -> dict[str, StreamUpdate]:
        """One engine step: the new ids of each stream, or (ids, logprobs) for a stream opened with
        StreamParams.logprobs (one `(logprob, [(top id, top logprob), ...])` per id), and the streams the
        engine ended -> their updates (those of `aborted`, a set of streams in `finish`, end with
        finish_reason "abort").
        A stream that already finished gets an empty update, or once, if it failed, its StreamFailure (code
        and message, which the response's writer writes in its format)."""
        return await self.submit_step(ids, finish, aborted)

    def _retire(self, stream: StreamHandle) -> None:
        """A finished stream stays in the table a while (late ids for it are no error), bounded in count."""
        ended = self._ended
        ended.append(stream)
        while len(ended) > MAX_FORGOTTEN:
            old = ended.popleft()
            if self.streams.get(old.id) is old:
                del self.streams[old.id]

    async def close_stream(self, *stream_ids: str, error: StreamError | None = None) -> None:
        """Drop streams (aborted requests): no more output; their iterators end. `error`: a stream whose
        worker writes its client's socket (direct) first ends its response with it, in its format."""
        groups: dict[WorkerLink, list[str]] = {}
        for stream_id in stream_ids:
            stream = self.streams.pop(stream_id, None)     # closed by the caller: later ids are an error
            if stream is None or stream.finished:
                continue
            stream.close()
            groups.setdefault(stream.link, []).append(stream_id)
        futures = [link.request(encode_request(CloseStreams(stream_ids=ids, error=error)), stateful=True)
                   for link, ids in groups.items() if not link.down]
        results = await asyncio.gather(*futures, return_exceptions=True)
        for result in results:
            if isinstance(result, InvalidRequest):
                raise result

    def _check_open(self) -> None:
        if self.closed:
            raise PoolError(ErrorCode.CLOSED, "this pool is closed")

    # ------------------------------------------------------------ shutdown
    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for link in self.links:
            await link.close()
        for stream in list(self.streams.values()):
            stream.fail(PoolError(ErrorCode.CLOSED, "the pool was closed"))
        self.streams.clear()
        self.context.destroy(linger=0)        # closes any socket left open too: term() would wait for it
        if self.launcher is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.launcher.stop)
        if self.run_dir is not None:
            shutil.rmtree(self.run_dir, ignore_errors=True)


async def _checked_peer(endpoint: str, timeout: float) -> None:
    """check_ipc_peer, then, for an ipc socket that is not there: wait (up to `timeout`) only while a daemon
    holds the endpoint (it is starting), else raise NoSuchSocket at once."""
    parsed = parse_endpoint(endpoint)
    if parsed.scheme != "ipc":
        return
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            check_ipc_peer(endpoint)
            if os.path.lexists(parsed.path):
                return
        except MissingDirectory:
            pass
        pid = holder(endpoint)
        if pid is None:
            raise NoSuchSocket(ErrorCode.WORKER_LOST, f"no such socket: {parsed.path} (no `tokworker serve` runs "
                                                      f"on {endpoint})")
        if asyncio.get_running_loop().time() >= deadline:
            raise NoSuchSocket(ErrorCode.WORKER_LOST, f"no such socket: {parsed.path} (the daemon holding {endpoint}, "
                                                      f"pid {pid}, has not bound it in {timeout:g} s)")
        await asyncio.sleep(0.05)

