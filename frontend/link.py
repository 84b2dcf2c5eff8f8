"""One connection from the API process to one worker, and how it survives the worker's death.

Requests go out as one frame (request id, body) on a DEALER socket and wait in `pending` for the reply with the
same id; every one has a timer, because ZeroMQ drops an oversize frame silently and a dead peer answers
nothing. The socket is read from the event loop (add_reader on ZeroMQ's descriptor, drained until empty),
so a reply costs no task and no future beyond the caller's own.

Recovery. When the connection drops (a socket monitor reports the disconnect: kill -9, OOM, a crash) or
a stream request times out, the link throws the socket away and starts a new epoch: a fresh socket, and
a Hello(reset=True, epoch+1) that makes the worker drop this session's streams and ignore anything still
arriving on older connections. Then it replays every acknowledged stream from its log (open + all
acknowledged id batches, output discarded, with the same ChunkFormat so the worker knows the role chunk
was sent) and re-sends, in their original order, the requests that had not been answered. Nothing
answered is re-sent and nothing unanswered is lost, so every delta reaches the caller exactly once. A
request re-sent `max_attempts` times fails with WorkerLost (a poison request must not kill workers forever).
"""

from __future__ import annotations

import asyncio
import itertools
import logging

import msgspec
import zmq
from zmq.utils.monitor import recv_monitor_message

from tokworker.protocol.messages import (ID_FRAME, PROTOCOL_VERSION, ErrorCode, ErrorReply, Hello, HelloReply, Stats,
                                         decode_reply, encode_message, frame)
from tokworker.frontend.errors import InvalidRequest, Overloaded, PoolError, RequestTimeout, WorkerLost, error_for
from tokworker.frontend.pending import Call, Pending, Probe
from tokworker.frontend.sinks import SinkSender
from tokworker.protocol.endpoints import sinks_path

log = logging.getLogger("tokworker.frontend")

_AUTH_EVENTS = (zmq.EVENT_HANDSHAKE_FAILED_AUTH, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL)
# A CURVE server drops a plaintext client mid-handshake, which the client often sees only as "failed, no
# detail" (the same as a peer dying mid-handshake): this many of those in a row count as a refusal.
_HANDSHAKE_DROPS = 3
_WATCHED = zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | \
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL


class _Disconnected(Exception):
    pass


_EVENTS, _POLLIN, _NOBLOCK = int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.NOBLOCK)
_unpack_id = ID_FRAME.unpack_from
_SWEEP_S = 0.05
_STATS = encode_message(Stats())          # how often a link with requests in flight looks for ones past their deadline


class WorkerLink:
    def __init__(self, context: zmq.Context, endpoint: str, session: str, streams: dict, *, keys=None,
                 request_timeout=30.0, connect_timeout=60.0, max_inflight=256, max_attempts=3,
                 max_message_bytes=64 << 20, hang_timeout=10.0, on_hung=None):
        self.context = context
        self.endpoint = endpoint
        self.session = session
        self.keys = keys
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self.max_inflight = max_inflight
        self.max_attempts = max_attempts
        self.max_message_bytes = max_message_bytes
        self.hang_timeout = hang_timeout        # no reply at all for this long while requests wait: hung
        self.on_hung = on_hung                  # what to do then (the pool kills a worker it spawned)
        self.replied = 0.0                      # when the worker last answered anything
        self.loop = asyncio.get_running_loop()
        self.pending: dict[int, Pending] = {}
        self.table = streams                    # the pool's one stream table (id -> Stream)
        self.live: dict = {}                    # id -> Stream placed here and not finished
        self.attended = 0                       # of those, buffered ones, and streams with late output: a step
        self.scored = 0                         # reply must visit them; streams stepped with logprobs
        self.logged = 0                         # streams that keep their own id log (not engine_ids)
        self.stateless = 0                      # stateless requests in flight (bounded by max_inflight)
        self.ready = False                      # connected and handshaken: requests go out at once
        self.down = False                       # gave up after connect_timeout: requests fail at once
        self.draining = False                   # the worker answered SHUTTING_DOWN: no new work until it is back
        self.failover = None                    # link -> another endpoint, when this one stays unreachable
        self.closed = False
        self.info: HelloReply | None = None
        self.expected_fingerprint: str | None = None
        self.epoch = 0
        self.recoveries = 0
        self.hangs = 0
        self.lagging = False                    # replaced as hung and not yet back
        self._ids = itertools.count(1)
        self._sock = self._monitor = None
        self._send = self._recv = self._get = None
        self._sweeping = None
        self._hello: asyncio.Future | None = None
        self._hello_id = -1
        self._auth_error: PoolError | None = None
        self._handshake_drops = 0
        self._sinks: SinkSender | None = None   # where client sockets go for direct streaming (made on first use)
        self._task: asyncio.Task | None = None

    @property
    def load(self) -> int:
        return len(self.pending)

    @property
    def open_streams(self) -> int:
        """Streams placed here and not finished (placement's measure)."""
        return len(self.live)

    # ------------------------------------------------------------ requests
    def request(self, body: bytes, on_reply=None, on_error=None, stateful=False, timeout=None) -> asyncio.Future:
        """Send one encoded request; the future gets `on_reply(reply)` (or the reply) or a PoolError.
        `on_reply`/`on_error` run as soon as the reply is read, even if the caller stopped waiting."""
        self.check(stateful, len(body))
        call = Call(body, self.loop.create_future(), on_reply, on_error, stateful)
        self.send(call, timeout)
        return call.future

    def check(self, stateful: bool = True, size: int = 0) -> None:
        """Raise what send() would refuse with, before anything is sent (a step spanning several links asks
        each first, so it is sent to all or to none). Stream requests are not bounded by the stateless
        in-flight limit: a burst of renders must never refuse an engine step."""
        if self.closed:
            raise PoolError(ErrorCode.CLOSED, "this pool is closed")
        if self.down:
            raise WorkerLost(ErrorCode.WORKER_LOST, f"worker at {self.endpoint} is unreachable")
        if not stateful and self.stateless >= self.max_inflight:
            raise Overloaded(ErrorCode.OVERLOADED, f"{self.stateless} requests in flight to {self.endpoint}")
        if size > self.max_message_bytes:
            raise InvalidRequest(ErrorCode.TOO_LARGE, f"request of {size} bytes; the worker accepts "
                                                      f"{self.max_message_bytes}")

    def send(self, pending: Pending, timeout: float | None = None) -> None:
        """Put `pending` in flight (check() first: this does not refuse)."""
        now = self.loop.time()
        pending.deadline = now + (timeout or self.request_timeout)
        if not pending.stateful:
            self.stateless += 1
        rid = next(self._ids)
        pipelined = bool(self.pending)
        if not pipelined:
            self.replied = now                  # the hang clock starts when work starts waiting
        self.pending[rid] = pending
        if self._sweeping is None:
            self._sweeping = self.loop.call_later(_SWEEP_S, self._sweep)
        if self.ready:
            self._transmit(rid, pending)
            if pipelined:            # a reply may have come in while sending; with none awaited, the sweep looks
                self._kick()

    def _transmit(self, rid: int, pending: Pending) -> None:
        pending.rid = rid
        pending.attempts += 1
        try:
            self._send(frame(rid, pending.body), _NOBLOCK)
        except zmq.ZMQError as exc:
            self._finish(pending, Overloaded(ErrorCode.OVERLOADED, f"cannot queue to {self.endpoint}: {exc}"))

    def _sweep(self) -> None:
        """Fail what is past its deadline (one timer per link, not one per request)."""
        self._sweeping = None
        now = self.loop.time()
        if self.pending and self.ready and now - self.replied > self.hang_timeout / 2:
            self._probe(now)
        expired = [p for p in self.pending.values() if p.deadline <= now]
        for pending in expired:
            if self.pending.get(pending.rid) is pending:
                self._finish(pending, RequestTimeout(ErrorCode.TIMEOUT, f"no reply from {self.endpoint} in time"))
                if pending.stateful and self.ready:
                    log.warning("stream request to %s timed out; reconnecting to fence it off", self.endpoint)
                    self._start_recovery()
        if self.pending and not self.closed:
            self._sweeping = self.loop.call_later(_SWEEP_S, self._sweep)
            self._kick()             # a send may have taken the descriptor's signal for a reply: read it now

    def _probe(self, now: float) -> None:
        """Quiet while work waits: a long render may be all it is, so ask the worker's lane (which answers
        between a render's bytecodes) for its stats; still nothing after hang_timeout: the worker is hung."""
        if now - self.replied > self.hang_timeout:
            self._hung(now)
        elif not any(type(p) is Probe for p in self.pending.values()):
            self.send(Probe(_STATS, True))

    def _hung(self, now: float) -> None:
        """Work waits and the worker has answered nothing for hang_timeout (stopped, stuck in C, live-locked):
        have it replaced; the disconnect that follows recovers the link as after kill -9 (replay, re-send)."""
        log.error("worker at %s answered nothing for %.1f s with %d requests waiting; replacing it",
                  self.endpoint, now - self.replied, len(self.pending))
        self.replied = now
        self.hangs += 1
        self.lagging = True                                  # until resumed, steps do not wait for this worker
        for pending in list(self.pending.values()):
            pending.detach()
        if self.on_hung is not None and self.on_hung(self):
            return
        self._start_recovery()                               # not ours to kill: at least fence the connection

    def _finish(self, pending: Pending, error: PoolError | None = None, reply=None) -> None:
        """Take `pending` out of flight and give it its answer."""
        if self.pending.pop(pending.rid, None) is pending and not pending.stateful:
            self.stateless -= 1
        if error is not None:
            pending.fail(error)
        else:
            pending.reply(reply)

    # ------------------------------------------------------------ replies
    def _on_readable(self) -> None:
        sock, get, recv = self._sock, self._get, self._recv
        try:
            while sock is self._sock and get(_EVENTS) & _POLLIN:
                self._deliver(recv(_NOBLOCK))
        except zmq.ZMQError:
            pass
        self.replied = self.loop.time()

    def _kick(self) -> None:
        """ZeroMQ's descriptor only signals changes: after a send, look for replies that are already there."""
        sock = self._sock
        if sock is not None and self._get(_EVENTS) & _POLLIN:
            self.loop.call_soon(self._on_readable)

    def _deliver(self, message: bytes) -> None:
        if len(message) <= 8:
            return
        rid = _unpack_id(message)[0]
        try:
            reply = decode_reply(memoryview(message)[8:])
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            reply = ErrorReply(code=ErrorCode.MALFORMED, message=f"undecodable reply: {exc}", request_id=rid)
        if rid == self._hello_id:
            self._hello_id = -1
            if self._hello is not None and not self._hello.done():
                self._hello.set_result(reply)
            return
        pending = self.pending.pop(rid, None)
        if pending is None:
            return                                           # timed out earlier, or from before a reset
        if not pending.stateful:
            self.stateless -= 1
        if type(reply) is ErrorReply and reply.code == ErrorCode.SHUTTING_DOWN:
            self.draining = True                             # new work goes to other workers until it is back
        pending.reply(reply)

    # ------------------------------------------------------------ connection and recovery
    async def start(self) -> HelloReply:
        """First connection; raises WorkerLost (or the auth error) if the worker does not answer."""
        return await self._recover(first=True)

    def _start_recovery(self) -> None:
        if self.closed or (self._task is not None and not self._task.done()):
            return
        self.ready = False
        self._task = self.loop.create_task(self._recover())

    async def _recover(self, first: bool = False) -> HelloReply | None:
        """Handshake on fresh sockets until the worker answers, then resume. The first connection raises
        on failure; a later one fails what waits (WorkerLost), marks the link down and keeps trying."""
        self.ready = False
        if not first:
            self.recoveries += 1
        deadline = self.loop.time() + self.connect_timeout
        delay = 0.02
        while not self.closed:
            self._open_socket()
            try:
                reply = await asyncio.wait_for(self._hello, max(deadline - self.loop.time(), 0.01))
            except (_Disconnected, asyncio.TimeoutError):
                reply = None
            except PoolError as exc:                             # the security handshake was refused
                if first:
                    self._close_socket()
                    raise
                reply, self._auth_error = None, exc
            if reply is None:
                if self.loop.time() < deadline:
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 0.5)
                    continue
                error = self._auth_error or WorkerLost(ErrorCode.WORKER_LOST,
                                                       f"no handshake from {self.endpoint} in {self.connect_timeout} s")
                if first:
                    self._close_socket()
                    raise error
                elsewhere = self.failover(self) if self.failover is not None else None
                if elsewhere is not None:                        # a whole daemon went away: rebuild there,
                    log.warning("%s stayed unreachable; moving this link's streams to %s", self.endpoint, elsewhere)
                    self.endpoint = elsewhere                    # replay and re-send as after a restart
                    deadline = self.loop.time() + self.connect_timeout
                    continue
                self._give_up(error)
                deadline = self.loop.time() + self.connect_timeout
                await asyncio.sleep(delay)
                continue
            error = self._refusal(reply)
            if error is not None:                                # wrong version or model: no point retrying
                self._close_socket()
                if first:
                    raise error
                self._give_up(error)
                return None
            self.info = reply
            self.max_message_bytes = min(self.max_message_bytes, reply.limits.max_message_bytes)
            self.down = self.draining = False
            self._auth_error = None
            self._handshake_drops = 0
            self._resume()
            return reply
        return None

    def _refusal(self, reply) -> PoolError | None:
        if type(reply) is ErrorReply:
            return error_for(reply.code, reply.message)
        if self.expected_fingerprint and reply.model_fingerprint != self.expected_fingerprint:
            return PoolError(ErrorCode.MODEL_MISMATCH, f"{self.endpoint} serves model {reply.model_fingerprint}, the pool "
                                               f"expects {self.expected_fingerprint}")
        return None

    def _open_socket(self) -> None:
        self._close_socket()
        self.epoch += 1
        sock = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 0)                       # bounded by max_inflight instead
        sock.setsockopt(zmq.RCVHWM, 0)
        sock.setsockopt(zmq.RECONNECT_IVL, 20)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 500)
        sock.setsockopt(zmq.HEARTBEAT_IVL, 2000)             # a peer gone silent (no FIN on tcp) counts as
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 10_000)       # a disconnect, and recovery starts
        if self.keys is not None:
            self.keys.apply(sock)
        self._monitor = sock.get_monitor_socket(_WATCHED)
        sock.connect(self.endpoint)
        self._sock = sock
        raw = super(zmq.Socket, sock)                       # pyzmq's Cython socket: no per-call option checks
        self._send, self._recv, self._get = raw.send, raw.recv, raw.get
        self.loop.add_reader(sock.getsockopt(zmq.FD), self._on_readable)
        self.loop.add_reader(self._monitor.getsockopt(zmq.FD), self._on_monitor)
        self._hello = self.loop.create_future()
        self._hello_id = next(self._ids)
        hello = Hello(version=PROTOCOL_VERSION, session=self.session, epoch=self.epoch, reset=True)
        sock.send(frame(self._hello_id, encode_message(hello)))
        self._kick()
        self._on_monitor()          # an unread ZeroMQ pipe never signals: look once so that the next event does

    def _close_socket(self) -> None:
        sock, monitor = self._sock, self._monitor
        self._sock = self._monitor = None
        if sock is None:
            return
        self.loop.remove_reader(sock.getsockopt(zmq.FD))
        self.loop.remove_reader(monitor.getsockopt(zmq.FD))
        sock.disable_monitor()
        monitor.close(linger=0)
        sock.close(linger=0)

    def _on_monitor(self) -> None:
        monitor = self._monitor
        try:
            while monitor is self._monitor and monitor.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                self._on_event(recv_monitor_message(monitor, zmq.NOBLOCK)["event"])
        except zmq.ZMQError:
            pass

    def _on_event(self, event: int) -> None:
        hello = self._hello
        if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            self._handshake_drops += 1
        if event in _AUTH_EVENTS or self._handshake_drops >= _HANDSHAKE_DROPS:
            error = PoolError(ErrorCode.AUTH_FAILED, f"{self.endpoint} refused the connection's security handshake "
                                             "(CurveZMQ keys missing, wrong or not authorized)")
            if hello is not None and not hello.done():
                hello.set_exception(error)
        else:                                                # disconnected, or the peer died mid-handshake
            if hello is not None and not hello.done():
                hello.set_exception(_Disconnected())
            elif self.ready:
                log.warning("lost the connection to %s; reconnecting", self.endpoint)
                self._start_recovery()

    def _take_pending(self) -> list[Pending]:
        waiting = list(self.pending.values())
        self.pending.clear()
        self.stateless = 0
        return waiting

    def _resume(self) -> None:
        """After a handshake: replay acknowledged streams, then re-send what was unanswered, in order. A
        stream's log holds every id sent for it; those of unanswered steps are re-sent, so the replay is
        the rest."""
        waiting = self._take_pending()
        self.ready = True
        self.lagging = False
        in_flight: dict[str, int] = {}
        for pending in waiting:
            for stream_id, ids in pending.step_ids().items():
                in_flight[stream_id] = in_flight.get(stream_id, 0) + len(ids)
        for stream in [s for s in self.live.values() if s.opened]:
            if stream.sink:                                  # what the dead worker wrote cannot be known
                stream.fail(WorkerLost(ErrorCode.WORKER_LOST, f"the worker that streamed {stream.id!r} to its "
                                                              f"client directly is gone"))
                continue
            try:
                body = stream.replay_request(in_flight.get(stream.id, 0))
            except PoolError as error:                       # the engine's record of its ids failed it
                stream.fail(error)
                continue
            replay = Call(body, self.loop.create_future(), None, stream.fail, True, replay=True)
            replay.future.add_done_callback(_quiet)
            self.send(replay)
        for pending in waiting:
            if pending.replay or pending.abandoned():
                pending.abandon()                            # replayed afresh above, or the caller gave up
                continue
            if pending.attempts >= self.max_attempts:
                pending.fail(WorkerLost(ErrorCode.WORKER_LOST, f"sent {pending.attempts} times to "
                                                               f"{self.endpoint}; the worker died each time"))
                continue
            rid = next(self._ids)
            self.pending[rid] = pending
            if not pending.stateful:
                self.stateless += 1
            self._transmit(rid, pending)
        self._kick()

    def _give_up(self, error: PoolError) -> None:
        """The worker stayed unreachable: fail what waits on it, and keep trying in the background."""
        log.error("giving up on %s for now: %s", self.endpoint, error)
        self.down = True
        for pending in self._take_pending():
            pending.fail(WorkerLost(error.code, error.message))
        for stream in list(self.live.values()):
            stream.fail(WorkerLost(error.code, error.message))

    def hand_over(self, stream_id: str, fd: int) -> None:
        """Give this link's worker the client socket of `stream_id` (direct streaming; see frontend/sinks.py).
        A worker restarted since keeps no old connection: a failed send connects again once."""
        for attempt in (0, 1):
            if self._sinks is None:
                self._sinks = SinkSender(sinks_path(self.endpoint))
            try:
                self._sinks.hand(self.session, stream_id, fd)
                return
            except OSError:
                self._sinks.close()
                self._sinks = None
                if attempt:
                    raise

    async def close(self) -> None:
        self.closed = True
        self.ready = False
        if self._sinks is not None:
            self._sinks.close()
            self._sinks = None
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self._sweeping is not None:
            self._sweeping.cancel()
            self._sweeping = None
        for pending in self._take_pending():
            pending.fail(PoolError(ErrorCode.CLOSED, "the pool was closed"))
        self._close_socket()


def _quiet(future: asyncio.Future) -> None:
    """Replays have no caller; retrieve their exception so asyncio does not log it as unhandled."""
    if not future.cancelled():
        future.exception()
