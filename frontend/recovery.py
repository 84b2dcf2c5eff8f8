"""How a link (link.py) survives its worker's death: the Recovery half of WorkerLink.

When the connection drops (a socket monitor reports the disconnect: kill -9, OOM, a crash) or a stream
request times out, the link throws the connection away and starts a new epoch: a fresh socket, and a
Hello(reset=True, epoch+1) that makes the worker drop this session's streams and ignore anything still
arriving on older connections. Then it replays every acknowledged stream from its log (open + all
acknowledged id batches, output discarded, with the same ChunkFormat so the worker knows the role chunk
was sent) and re-sends, in their original order, the requests that had not been answered. Nothing
answered is re-sent and nothing unanswered is lost, so every delta reaches the caller exactly once. A
request re-sent `max_attempts` times fails with WorkerLost (a poison request must not kill workers forever).
"""

from __future__ import annotations

import asyncio
import logging

import zmq

from tokworker.protocol.messages import PROTOCOL_VERSION, ErrorCode, ErrorReply, Hello, HelloReply, encode_message, frame
from tokworker.frontend.connection import Connection
from tokworker.frontend.errors import PoolError, WorkerLost, error_for
from tokworker.frontend.pending import Call, Pending

log = logging.getLogger("tokworker.frontend")

_AUTH_EVENTS = (zmq.EVENT_HANDSHAKE_FAILED_AUTH, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL)
# A CURVE server drops a plaintext client mid-handshake, which the client often sees only as "failed, no
# detail" (the same as a peer dying mid-handshake): this many of those in a row count as a refusal.
_HANDSHAKE_DROPS = 3


class _Disconnected(Exception):
    pass


class Recovery:
    """WorkerLink's connection and its recovery (see the module's docstring); the link's requests and
    replies are in link.py."""

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
            self.down, self.draining = False, reply.draining
            self._auth_error = None
            self._handshake_drops = 0
            self._open_requests()
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
        self._connection = connection = Connection(self.context, self.endpoint, self.keys, self.loop,
                                                   self._on_readable, self._on_event)
        self._hello = self.loop.create_future()
        self._hello_id = next(self._ids)
        hello = Hello(version=PROTOCOL_VERSION, session=self.session, epoch=self.epoch, reset=True)
        connection.send(frame(self._hello_id, encode_message(hello)))
        self._kick()
        connection.read_events()

    def _close_socket(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()
        requests, self._requests = self._requests, None
        if requests is not None:
            requests.close()

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
                self._on_readable()                          # what it sent before it left: a Draining notice
                if self.draining:                            # a drained worker's exit: expected
                    log.info("the draining worker at %s left; reconnecting in the background", self.endpoint)
                    self.shed_stateless()
                else:
                    log.warning("lost the connection to %s; reconnecting", self.endpoint)
                self._start_recovery()

    def _take_pending(self) -> list[Pending]:
        waiting = list(self.pending.values())
        self.pending.clear()
        self.news_only.clear()             # only streams that end with their worker had them
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
            if stream.handed:                                # what the dead worker wrote cannot be known
                stream.fail(WorkerLost(ErrorCode.WORKER_LOST, f"the worker that streamed {stream.id!r} to its "
                                                              f"client directly is gone"))
                continue
            try:
                if stream.unsent:                            # its socket never reached the dead worker: the
                    bodies = stream.forward_requests(in_flight.get(stream.id, 0))   # client has none of it
                else:
                    bodies = (stream.replay_request(in_flight.get(stream.id, 0)),)
            except PoolError as error:                       # the engine's record of its ids failed it
                stream.fail(error)
                continue
            for body, on_reply in zip(bodies, (None, _forwarded(stream))):
                replay = Call(body, self.loop.create_future(), on_reply, stream.fail, True, replay=True)
                replay.future.add_done_callback(quiet)
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
        if self.pending:
            self._watch(self.loop.time())                    # the hang clock starts again from the handshake
        self._kick()

    def _give_up(self, error: PoolError) -> None:
        """The worker stayed unreachable: fail what waits on it, and keep trying in the background."""
        log.error("giving up on %s for now: %s", self.endpoint, error)
        self.down = True
        for pending in self._take_pending():
            pending.fail(WorkerLost(error.code, error.message))
        for stream in list(self.live.values()):
            stream.fail(WorkerLost(error.code, error.message))


def _forwarded(stream):
    """The reply to a rebuilt direct stream's Step (StreamHandle.forward_requests): its output so far."""
    def on_reply(reply) -> None:
        if reply.errors:
            error = next(iter(reply.errors.values()))
            stream.fail(error_for(error.code, error.message))
        else:
            stream.forwarded(reply.updates[0] if reply.updates else None)
    return on_reply


def quiet(future: asyncio.Future) -> None:
    """Replays have no caller; retrieve their exception so asyncio does not log it as unhandled."""
    if not future.cancelled():
        future.exception()
