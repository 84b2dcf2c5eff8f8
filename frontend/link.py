"""One connection from the API process to one worker: its requests in flight and their replies.

Requests go out as one frame (request id, body) on a DEALER socket and wait in `pending` for the reply with the
same id; every one has a timer, because ZeroMQ drops an oversize frame silently and a dead peer answers
nothing. The socket is read from the event loop (add_reader on ZeroMQ's descriptor, drained until empty),
so a reply costs no task and no future beyond the caller's own. A link counts the streams placed on its
worker (`place` / `remove`). How it survives its worker's death is recovery.py, its base class.
"""

from __future__ import annotations

import asyncio
import itertools
import logging

import msgspec
import zmq

from tokworker.protocol.messages import (ID_FRAME, Draining, ErrorCode, ErrorReply, HelloReply, Stats, decode_reply,
                                         encode_message, frame)
from tokworker.frontend.errors import InvalidRequest, Overloaded, PoolError, RequestTimeout, ShuttingDown, WorkerLost
from tokworker.frontend.pending import Call, Pending, Probe
from tokworker.frontend.recovery import Recovery
from tokworker.frontend.request_socket import RequestSocket
from tokworker.frontend.sinks import SinkSender
from tokworker.protocol.endpoints import requests_path, sinks_path

log = logging.getLogger("tokworker.frontend")

_EVENTS, _POLLIN, _NOBLOCK = int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.NOBLOCK)
_unpack_id = ID_FRAME.unpack_from
_SLACK_S = 0.001                          # the sweep wakes this late, so what falls due then is past due
_STATS = encode_message(Stats())
ASK_EVERY_S = 1.0                         # news-only steps go out for this long after an answered request
REFUSED_AFTER_S = 0.5                     # a request socket closed unanswered while ZeroMQ's stays up: refused


def encode_request(msg) -> bytes:
    """A request's body, or InvalidRequest for one msgspec cannot encode (the caller's values, not ours)."""
    try:
        return encode_message(msg)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidRequest(ErrorCode.INVALID, f"cannot encode this request: {exc}") from None


class WorkerLink(Recovery):
    def __init__(self, context: zmq.Context, endpoint: str, session: str, streams: dict, *, keys=None,
                 request_timeout=30.0, connect_timeout=60.0, max_inflight=256, max_attempts=3,
                 max_message_bytes=64 << 20, hang_timeout=10.0, on_hung=None, on_news=None):
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
        self.on_news = on_news                  # where the news of news-only steps goes ({stream id: update})
        self.asked = 0.0                        # when a request that is answered was last sent (news_only)
        self.news_only: dict[int, Pending] = {} # news-only steps sent, by request id, while none is answered
        self.replied = 0.0                      # when the worker last answered anything
        self.loop = asyncio.get_running_loop()
        self.pending: dict[int, Pending] = {}
        self.table = streams                    # the pool's one stream table (id -> StreamHandle)
        self.live: dict = {}                    # id -> StreamHandle placed here and not finished (place/remove)
        self.buffered = 0                       # of those, buffered ones (a step's reply must visit them),
        self.scored = 0                         # those stepped with logprobs,
        self.logged = 0                         # those that keep their own id log (not engine_ids),
        self.handed = 0                         # and those whose worker writes their client's socket
        self.late = 0                           # streams holding late output (steps.py)
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
        self._connection = None                 # this epoch's Connection (recovery.py)
        self._requests: RequestSocket | None = None   # where this epoch's requests go, if not over ZeroMQ
        self.requests_refused = False           # the worker closed a request socket unanswered: ZeroMQ from now on
        self._sweeping = None                   # the one timer: the sweep, due at _sweep_at
        self._sweep_at = 0.0
        self._hello: asyncio.Future | None = None
        self._hello_id = -1
        self._auth_error: PoolError | None = None
        self._handshake_drops = 0
        self._sinks: SinkSender | None = None   # where client sockets go for direct streaming (made on first use)
        self.handover_fallbacks = 0             # client sockets this worker could not take at once (forwarded)
        self._task: asyncio.Task | None = None

    @property
    def load(self) -> int:
        return len(self.pending)

    @property
    def open_streams(self) -> int:
        """Streams placed here and not finished (placement's measure)."""
        return len(self.live)

    def place(self, stream) -> None:
        """A stream opened on this link's worker: counted until remove()."""
        self.live[stream.id] = stream
        self.buffered += stream.buffered
        self.scored += stream.scored
        self.logged += stream.logged
        self.handed += stream.handed

    def remove(self, stream) -> None:
        """A placed stream ended (finished, failed or closed)."""
        if self.live.get(stream.id) is stream:
            del self.live[stream.id]
        self.buffered -= stream.buffered
        self.scored -= stream.scored
        self.logged -= stream.logged
        self.handed -= stream.handed
        if stream.late is not None:             # counted while open (StreamHandle.hold_late)
            self.late -= 1

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
        now = self.asked = self.loop.time()
        pending.deadline = now + (timeout or self.request_timeout)
        if not pending.stateful:
            self.stateless += 1
        rid = next(self._ids)
        pipelined = bool(self.pending)
        if not pipelined:
            self.replied = now                  # the hang clock starts when work starts waiting
        self.pending[rid] = pending
        if self._sweeping is None or pending.deadline < self._sweep_at:
            self._watch(now)
        if self.ready:
            self._transmit(rid, pending)
            if pipelined:            # a reply may have come in while sending; with none awaited, the sweep looks
                self._kick()

    def tells_news_only(self) -> bool:
        """A step of this link's streams may go out news_only: every stream here has its client's socket
        with its worker (nothing of theirs comes back but their end), none holds late output, and an answered
        request went out within ASK_EVERY_S (its answer shows the worker alive and every step before it
        served, as the hang clock needs)."""
        return (self.handed == len(self.live) and not self.late and self.ready and self.on_news is not None
                and self.loop.time() - self.asked < ASK_EVERY_S)

    def send_news_only(self, step: Pending) -> None:
        """Send `step` (a Step with news_only, of streams tells_news_only() allowed); its answer, if any, goes
        to `step.reply`, and none has come once an answer to a later request has."""
        rid = next(self._ids)
        step.rid = rid
        self.news_only[rid] = step
        refused = self._put(frame(rid, step.body))
        if refused is not None:
            del self.news_only[rid]
            step.fail(Overloaded(ErrorCode.OVERLOADED, refused))

    def _transmit(self, rid: int, pending: Pending) -> None:
        pending.rid = rid
        pending.attempts += 1
        refused = self._put(frame(rid, pending.body))
        if refused is not None:
            self._finish(pending, Overloaded(ErrorCode.OVERLOADED, refused))

    def _put(self, data: bytes) -> str | None:
        """Send one request's bytes over this epoch's request socket, else ZeroMQ; why not, if it cannot."""
        requests = self._requests
        if requests is not None:
            if requests.send(data):
                return None
            return f"cannot queue to {self.endpoint}: its worker has not read the last {len(requests.waiting)} bytes"
        try:
            self._connection.send(data, _NOBLOCK)
        except zmq.ZMQError as exc:
            return f"cannot queue to {self.endpoint}: {exc}"
        return None

    def _open_requests(self) -> None:
        """A handshaken epoch's request socket, where the worker has one (RequestSocket; before anything of
        the epoch is sent, so its requests keep one order): its requests go there, and their replies come back
        there."""
        path = requests_path(self.endpoint) if "request_socket" in self.info.capabilities else None
        if path is None or self.requests_refused:
            return
        try:
            self._requests = RequestSocket(path, self.session, self.epoch, self.loop, self._reply_read,
                                           self._requests_broke, self.info.limits.max_message_bytes + 8)
        except OSError as exc:
            log.info("requests to %s go over ZeroMQ this epoch: its request socket refused (%s)", self.endpoint, exc)

    def _reply_read(self, message: bytes) -> None:
        """A reply off the request socket (RequestSocket.read)."""
        self.replied = self.loop.time()
        self._deliver(message)

    def _requests_broke(self) -> None:
        """The worker closed this epoch's request socket: what went there may be lost, so a new epoch
        re-sends it. Closed before any reply came, it is a refusal if the ZeroMQ connection outlives it by
        REFUSED_AFTER_S (a dead worker's drops at once, and its recovery starts a new epoch): the worker did
        not know the greeting, or had no room for another connection, and the link's requests go over ZeroMQ
        from then on."""
        requests = self._requests
        if requests is None or not requests.broken or not self.ready:
            return
        if requests.answered:
            log.warning("the worker at %s closed its request socket; reconnecting", self.endpoint)
            self._start_recovery()
        else:
            self.loop.call_later(REFUSED_AFTER_S, self._requests_refused, self.epoch)

    def _requests_refused(self, epoch: int) -> None:
        if self.epoch == epoch and self.ready and not self.closed:
            log.warning("the worker at %s refused a request socket; its requests go over ZeroMQ", self.endpoint)
            self.requests_refused = True
            self._start_recovery()

    def _arm(self, due: float) -> None:
        """Have the sweep run at `due` (its one timer, moved earlier). It runs when something falls due, not
        at a fixed pace: a link that is answered promptly never wakes the loop for it."""
        if self._sweeping is not None:
            self._sweeping.cancel()
        self._sweep_at = due
        self._sweeping = self.loop.call_at(due + _SLACK_S, self._sweep)

    def _watch(self, now: float) -> None:
        """Arm the sweep for the first thing due among what waits: a deadline, the hang probe (quiet for
        hang_timeout / 2) or the hang itself (quiet for hang_timeout, the probe unanswered)."""
        due = min(p.deadline for p in self.pending.values())
        if self.ready:
            quiet = now - self.replied
            due = min(due, self.replied + (self.hang_timeout if quiet > self.hang_timeout / 2
                                           else self.hang_timeout / 2))
        self._arm(max(due, now))

    def _sweep(self) -> None:
        """Fail what is past its deadline, probe a worker quiet while work waits (one timer per link, not one
        per request, armed for the first of them: _watch)."""
        self._sweeping = None
        connection = self._connection
        if self.pending and connection is not None and connection.get(_EVENTS) & _POLLIN:
            self._on_readable()      # a reply already here is no silence (timers run before the loop reads)
        if self.pending and self._requests is not None:
            self._requests.read()
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
            self._watch(now)
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
        connection = self._connection
        if connection is None:
            return
        get, recv = connection.get, connection.recv
        try:                         # read first: a wake-up nearly always has a reply (Again when it had none)
            self._deliver(recv(_NOBLOCK))
            while connection is self._connection and get(_EVENTS) & _POLLIN:
                self._deliver(recv(_NOBLOCK))
        except zmq.ZMQError:
            pass
        self.replied = self.loop.time()

    def _kick(self) -> None:
        """ZeroMQ's descriptor only signals changes: after a send, look for replies that are already there."""
        connection = self._connection
        if connection is not None and connection.get(_EVENTS) & _POLLIN:
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
        if self.news_only:
            self._heard(rid)
        pending = self.pending.pop(rid, None) or self.news_only.pop(rid, None)
        if pending is None:
            if not rid and type(reply) is Draining:         # unasked: the worker read SIGTERM
                self._drains()
            return                                           # timed out earlier, or from before a reset
        if not pending.stateful:
            self.stateless -= 1
        if type(reply) is ErrorReply and reply.code == ErrorCode.SHUTTING_DOWN:
            self.draining = True                             # new work goes to other workers until it is back
        pending.reply(reply)

    def _heard(self, rid: int) -> None:
        """An answer to request `rid`: the news-only steps sent before it were served with nothing to say (a
        worker serves a connection's steps in order, and its other answers never overtake them)."""
        news_only = self.news_only
        while news_only:
            sent = next(iter(news_only))
            if sent >= rid:
                return
            del news_only[sent]

    def _drains(self) -> None:
        """The worker drains: no new work goes to it (its open streams go on). What it will not answer once
        it has left fails then with ShuttingDown, which the pool sends elsewhere (recovery.py)."""
        if not self.draining:
            log.info("the worker at %s is draining; new work goes to the others", self.endpoint)
        self.draining = True

    def shed_stateless(self) -> None:
        """The draining worker left: its stateless requests still waiting are never answered; fail them now
        with ShuttingDown (the pool retries them on a worker that is not draining)."""
        for pending in [p for p in self.pending.values() if not p.stateful]:
            self._finish(pending, ShuttingDown(ErrorCode.SHUTTING_DOWN, f"the worker at {self.endpoint} drained "
                                                                        f"and left"))

    def hand_over(self, stream_id: str, fd: int, head: bytes = b"") -> bool:
        """Give this link's worker the client socket of `stream_id` (direct streaming; see frontend/sinks.py;
        `head`: the response's status line and headers, for the worker to write before its body), without
        waiting: False (counted in `handover_fallbacks`) when the worker cannot take it now, or cannot be
        reached. A worker restarted since keeps no old connection: a failed send connects again once."""
        for attempt in (0, 1):
            try:
                if self._sinks is None:
                    self._sinks = SinkSender(sinks_path(self.endpoint))
                if self._sinks.hand(self.session, stream_id, fd, head):
                    return True
                break                                        # its queue is full: the worker is not reading
            except BlockingIOError:                          # its listener's backlog is full
                break
            except OSError:
                if self._sinks is not None:
                    self._sinks.close()
                    self._sinks = None
                if attempt:
                    break
        self.handover_fallbacks += 1
        return False

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
