"""The worker's lane: the thread that owns the client socket. Every message is read here by one typed decoder
and dispatched once, by one match: session requests (hello, open, step, forward, close, stats), decoded in full, are
served here at once; stateless work (render, encode, decode, compile, guide), read only as far as its type,
goes to the main thread as a Job, which decodes and runs it under the CPU budget and hands back the reply's
body or its error. The lane counts requests, errors
and dropped messages and writes every error reply. The interpreter hands its lock to the waiting lane
every SWITCH_S, so a long render or a compile never holds an engine step back for longer.

A client that stops reading its replies is stopped being read: replies go out with ROUTER_MANDATORY over a
short queue (REPLY_QUEUE messages), and when that client's queue is full the lane holds its later replies
(up to HELD_BYTES, more are dropped) and parks its new requests unserved (up to PARKED_BYTES, more are
dropped) until the queue moves again. Its floods then cost the worker neither memory nor time, and every
other client is served as before.
"""

from __future__ import annotations

import logging
import socket as socketlib
import time
from collections import deque
from typing import Union

import msgspec
import zmq

from tokworker.protocol.messages import (CloseStreams, CodedError, Compile, Decode, Draining, Encode, EncodeRun,
                                         ErrorCode, ErrorReply, Forward, Guide, Hello, OpenStream, Render, Stats,
                                         Step, encode_message, unpack_id)
from tokworker.worker.connections import Connections
from tokworker.worker.errorlog import RequestErrors
from tokworker.worker.errors import error_of
from tokworker.worker.replies import encode_reply
from tokworker.worker.request_socket import SocketFrame
from tokworker.worker.sessions import peer_of

log = logging.getLogger("tokworker.worker")

RETRY_S = 0.005                    # how soon a blocked client's held replies are tried again, doubling
RETRY_MAX_S = 1.0                  # up to this while it reads nothing: a parked client costs next to nothing
SWITCH_S = 0.001                   # the interpreter's switch interval: a step's longest wait behind a render
REPLY_QUEUE = 8                    # replies ZeroMQ queues for one client (each at most max_message_bytes)
HELD_BYTES = 64 << 20              # replies the lane holds for a client that stopped reading
PARKED_BYTES = 16 << 20            # requests parked unserved from such a client
QUEUED_BYTES = 64 << 20            # stateless requests handed to the main thread and not yet answered
SMALL_STEP = 16 << 10              # bytes of a step message below which its reply is not counted (the hot path)
HOUSEKEEPING_S = 1.0
STOPPED_S = 0.1                    # retries taking nothing this far apart: its client stopped reading (said)
BLOCKED_LOG_S = 10.0               # at most one line a client that stopped reading writes in the log, per this
NO_ID = bytes(8)                   # the request id of an error reply to a message without one, and of a notice
DRAINING = encode_message(Draining())
# ZeroMQ's flags as plain ints: pyzmq's enum makes each `flags & zmq.POLLIN` a Python-level call (2 us) and
# `sock.rcvmore` an attribute lookup by name (5 us, against 2 for getsockopt); the loop does a dozen a request
POLLIN, POLLOUT, EVENTS, RCVMORE, NOBLOCK = map(int, (zmq.POLLIN, zmq.POLLOUT, zmq.EVENTS, zmq.RCVMORE, zmq.NOBLOCK))


def _deferred(kind):
    """A stateless request read only as far as its type: its fields are skipped, not built. The main thread
    decodes it in full when it runs it, so a queue of them costs their bytes (a Decode's 400k ids built as
    Python ints while they wait took a flooded worker past its memory limit)."""
    return msgspec.defstruct(f"Deferred{kind.__name__}", [], tag_field="type", tag=kind.__struct_config__.tag)


DEFERRED = tuple(_deferred(kind) for kind in (Render, Encode, EncodeRun, Decode, Compile, Guide))
DeferredGuide = DEFERRED[-1]
# the lane's one decoder: session requests in full, stateless ones as their type
decode_in_lane = msgspec.msgpack.Decoder(Hello | Stats | OpenStream | Step | Forward | CloseStreams |
                                         Union[DEFERRED]).decode


def decode_error(exc: Exception) -> tuple[str, str]:
    """(code, message) for a body that does not decode as a request."""
    if isinstance(exc, msgspec.ValidationError):
        return ErrorCode.UNKNOWN_TYPE if "`$.type`" in str(exc) else ErrorCode.INVALID, str(exc)
    if isinstance(exc, RecursionError):
        return ErrorCode.TOO_LARGE, "payload nests too deeply"
    if isinstance(exc, MemoryError):
        return ErrorCode.OUT_OF_MEMORY, "out of memory decoding it"
    return ErrorCode.MALFORMED, f"cannot decode body: {exc}"


class Job:
    """A stateless request on its way to the main thread and back: `message` is its ZeroMQ frame (a request
    id, then the msgpack body); the reply's body, or `error` ((code, message)), is set there. `opens`: the
    streams a render opens on its prompt (Render.open), which the lane opens before it sends the body."""

    __slots__ = ("identity", "request_id", "message", "arrived", "body", "error", "opens")

    def __init__(self, identity: bytes, request_id: int, message: zmq.Frame, arrived: float):
        self.identity, self.request_id, self.message, self.arrived = identity, request_id, message, arrived
        self.body = self.error = None
        self.opens = ()


class _Blocked:
    __slots__ = ("replies", "held", "requests", "parked", "wait", "retry_at")

    def __init__(self):
        self.replies: deque = deque()
        self.held = 0
        self.requests: deque = deque()
        self.parked = 0
        self.wait = RETRY_S
        self.retry_at = time.monotonic() + RETRY_S


class Lane:
    """See the module's docstring. `worker` serves the session requests and builds the stats; `jobs` is
    what the main thread takes (woken through `wake_main`), `done` what it gives back (waking the lane)."""

    def __init__(self, worker, sock: zmq.Socket, wake_main, stop: list):
        self.worker, self.sock, self.wake_main, self.stop = worker, sock, wake_main, stop
        self.jobs: deque[Job] = deque()
        self.done: deque[Job] = deque()
        self._wake_read, self._wake_write = socketlib.socketpair()
        self._wake_read.setblocking(False)
        self.blocked: dict[bytes, _Blocked] = {}
        self.blocked_said, self.blocked_unsaid = -BLOCKED_LOG_S, 0
        self.queued = 0                              # jobs handed to the main thread and not yet back
        self.queued_bytes = 0
        self.requests = self.errors = self.dropped = 0
        self.announced = False                       # every connection was told this worker drains (Draining)
        self.request_errors = RequestErrors(log)
        self.ipc = worker.options.bind.startswith("ipc://")      # whose a session is: see sessions.py
        self.connections = Connections(sock, worker.sessions, worker.streams)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)

    # ------------------------------------------------------------ the loop
    def run(self) -> None:
        worker, sock, done = self.worker, self.sock, self.done
        poller = zmq.Poller()
        poller.register(sock, POLLIN)
        poller.register(self._wake_read, POLLIN)
        connections = self.connections
        monitor = connections.monitor
        poller.register(monitor, POLLIN)
        wake_fd = self._wake_read.fileno()
        sinks, requests = worker.streams.sinks, worker.request_sockets
        polled: dict[int, int] = {}                   # the plain sockets' descriptors registered, and for what
        housekeeping = time.monotonic() + HOUSEKEEPING_S
        if worker.draining:                          # SIGTERM came before the lane started
            self.announce()
        while not self.stop[0]:
            if sinks is not None or requests is not None:
                polled = _poll_plain(poller, sinks, requests, polled)
            timeout = max(0.0, housekeeping - time.monotonic())      # a stop or a drain wakes it sooner
            if self.blocked:
                timeout = min(timeout, max(0.0, min(b.retry_at for b in self.blocked.values()) - time.monotonic()))
            ready = dict(poller.poll(timeout * 1000))
            if polled and len(ready) > (wake_fd in ready) + (sock in ready) + (monitor in ready):
                self._serve_plain(sinks, requests, ready, polled)
            if monitor in ready:
                connections.read_reports()
            if self.blocked:
                self._retry(time.monotonic())
            if wake_fd in ready:
                self._wake_read.recv(4096)
                if worker.draining and not self.announced:
                    self.announce()
            while done:
                self._finish(done.popleft())
            if ready.get(sock):
                while sock.getsockopt(EVENTS) & POLLIN:
                    try:
                        self.route(*self._receive())
                    except MemoryError:                  # that message is lost, the lane is not
                        self.dropped += 1
            now = time.monotonic()
            if now >= housekeeping:
                housekeeping = now + HOUSEKEEPING_S
                worker.housekeeping(idle=not self.queued)
        connections.close()
        self._wake_read.close()
        self._wake_write.close()

    def wake(self) -> None:
        """From another thread (or a signal handler): look at the worker's state now, not at the next poll."""
        try:
            self._wake_write.send(b"\0", socketlib.MSG_DONTWAIT)
        except BlockingIOError:                      # its buffer is full of wakes already
            pass

    def announce(self) -> None:
        """The worker drains: tell every connection that said Hello, unasked (request id 0), so its client
        sends new work elsewhere at once; a client connecting later learns it from its handshake."""
        self.announced = True
        for identity in list(self.worker.sessions.of):
            self.send([identity, NO_ID, DRAINING])

    def give_back(self, job: Job) -> None:
        """From the main thread: the job is answered."""
        self.done.append(job)
        self._wake_write.send(b"\0")

    def _serve_plain(self, sinks, requests, ready: dict, polled: dict[int, int]) -> None:
        """The plain sockets that are ready: request connections (each one's requests served in the order it
        sent them, its replies' rest flushed), sockets handed over, and client sockets that take more bytes."""
        writable = []
        for fd, flags in ready.items():
            if not isinstance(fd, int):
                continue
            if requests is not None and (fd in requests.connections or fd == requests.listener.fileno()):
                if flags & POLLOUT:
                    self._unblock(requests.on_writable(fd))
                if flags & POLLIN:
                    for identity, message in requests.on_readable(fd):
                        self.route(identity, message)
            elif flags & POLLOUT:
                writable.append(fd)
            elif flags & POLLIN and polled.get(fd) == POLLIN:
                sinks.on_readable(fd)
        if writable:
            sinks.on_writable(writable)

    def _unblock(self, identity: bytes | None) -> None:
        """A connection's socket took the rest of a reply: its held replies go now, not at the next retry."""
        blocked = self.blocked.get(identity) if identity is not None else None
        if blocked is not None:
            blocked.retry_at = 0.0
            self._retry(time.monotonic())

    # ------------------------------------------------------------ one message
    def _receive(self) -> tuple:
        """(identity, message) off the socket; the message is ZeroMQ's frame, not a copy (a flood of large
        requests is not held twice), and None when it was not one frame."""
        sock = self.sock
        identity = sock.recv()
        message = sock.recv(copy=False) if sock.getsockopt(RCVMORE) else None
        while sock.getsockopt(RCVMORE):
            sock.recv()
            message = None
        return identity, message

    def route(self, identity: bytes, message) -> None:
        """A message off the socket: parked while its client does not read, else served."""
        blocked = self.blocked.get(identity)
        if blocked is not None:
            size = len(identity) + (len(message) if message is not None else 0)
            if blocked.parked + size <= PARKED_BYTES:
                blocked.requests.append((identity, message))
                blocked.parked += size
            else:
                self.dropped += 1
            return
        self.serve(identity, message)

    def serve(self, identity: bytes, message) -> None:
        """Decode the message once and dispatch it once; exactly one reply (or a job that makes it)."""
        if message is None or len(message) < 8:
            self.requests += 1
            self.error(identity, NO_ID, ErrorCode.MALFORMED, "expected one frame: a request id (8 bytes), then the body")
            return
        buffer = message.buffer
        header = buffer[:8].tobytes()
        try:
            msg = decode_in_lane(buffer[8:])
        except (msgspec.DecodeError, ValueError, RecursionError, MemoryError) as exc:
            self.requests += 1
            self.error(identity, header, *decode_error(exc))
            return
        worker = self.worker
        if type(msg) is not Stats and type(msg) is not Hello:    # handshakes and status polls are not requests
            self.requests += 1
        if worker.sessions.stale(identity):
            self.error(identity, header, ErrorCode.STALE, "this connection's session moved to a newer connection")
            return
        worker.cpu.arm()
        try:
            match msg:
                case Step():
                    reply = worker.step(identity, msg, len(message))
                    if msg.news_only and not reply.errors and not any(reply.updates):
                        return
                    body = encode_reply(reply, worker.options.max_message_bytes, sized=len(message) > SMALL_STEP)
                case OpenStream():
                    self.connections.note(identity, message)
                    body = encode_message(worker.open_stream(identity, msg))
                case CloseStreams():
                    body = encode_message(worker.close_streams(identity, msg))
                case Forward():
                    body = encode_message(worker.forward(identity, msg))
                case Stats():
                    body = encode_message(worker.stats(self))
                case Hello() if type(message) is SocketFrame:
                    raise CodedError(ErrorCode.INVALID, "a hello comes over ZeroMQ, where its peer is known")
                case Hello():
                    self.connections.note(identity, message)
                    body = encode_message(worker.hello(identity, msg, peer_of(message, self.ipc)))
                case _:
                    self._hand_over(identity, header, message, type(msg) is DeferredGuide)
                    return
        except Exception as exc:
            code, text = error_of(exc)
            if code == ErrorCode.INTERNAL:
                log.exception("request %d (%s) failed", unpack_id(header), type(msg).__name__)
            self.error(identity, header, code, text)
            return
        self.send([identity, header, body])

    def _hand_over(self, identity: bytes, header: bytes, message: zmq.Frame, guide: bool) -> None:
        """Stateless work to the main thread, while its queue has room."""
        worker = self.worker
        if worker.draining and not guide:               # a guide serves a stream that drains
            self.error(identity, header, ErrorCode.SHUTTING_DOWN, "this worker is shutting down: send new work to "
                                                                 "another")
        elif self.queued < worker.options.max_queue and self.queued_bytes + len(message) <= QUEUED_BYTES:
            self.queued += 1
            self.queued_bytes += len(message)
            self.jobs.append(Job(identity, unpack_id(header), message, time.monotonic()))
            self.wake_main()
        else:
            self.error(identity, header, ErrorCode.OVERLOADED, f"this worker's queue is full ({self.queued} "
                                                               f"requests, {self.queued_bytes} bytes)")

    def _finish(self, job: Job) -> None:
        self.queued -= 1
        self.queued_bytes -= len(job.message)
        header = job.message.buffer[:8].tobytes()
        if job.error is None and job.opens:
            if self.worker.sessions.stale(job.identity):   # its client re-sends it on its newer connection
                job.error = (ErrorCode.STALE, "this connection's session moved to a newer connection")
            else:
                self.connections.note(job.identity, job.message)
                try:
                    self.worker.open_all(job.identity, job.opens)
                except Exception as exc:
                    job.error = error_of(exc)
        if job.error is not None:
            self.error(job.identity, header, *job.error)
        elif job.body is not None:
            self.send([job.identity, header, job.body])
        else:                                            # even the error reply could not be built
            self.dropped += 1

    def error(self, identity: bytes, header: bytes, code: str, message: str) -> None:
        """Answer with a typed error, counted and logged (rate-limited)."""
        self.errors += 1
        request_id = unpack_id(header)
        self.request_errors.record(request_id, code, message, self.worker.sessions.label(identity))
        self.send([identity, header, encode_message(ErrorReply(code=code, message=message[:2000],
                                                               request_id=request_id))])

    # ------------------------------------------------------------ clients that stop reading
    def send(self, reply: list) -> None:
        identity = reply[0]
        blocked = self.blocked.get(identity)
        if blocked is None:
            if self._try(reply):
                return
            blocked = self.blocked[identity] = _Blocked()
        size = sum(map(len, reply))
        if blocked.held + size > HELD_BYTES:
            self.dropped += 1
            return
        blocked.replies.append(reply)
        blocked.held += size

    def _say_blocked(self) -> None:
        """A client stopped reading (its held replies' retries, STOPPED_S and more apart, sent nothing): said
        at most once per BLOCKED_LOG_S (a busy client that keeps catching up and falling behind again wrote
        this line dozens of times a second). A reply held until a socket takes the rest of the one before is
        flow control, not worth a line: a request socket is there after any reply larger than its buffer."""
        now = time.monotonic()
        if now - self.blocked_said < BLOCKED_LOG_S:
            self.blocked_unsaid += 1
            return
        more = f" ({self.blocked_unsaid} more since the last such line)" if self.blocked_unsaid else ""
        log.warning("a client stopped reading its replies; its requests wait until it reads again%s", more)
        self.blocked_said, self.blocked_unsaid = now, 0

    def _try(self, reply) -> bool:
        """Sent, or the peer is gone (nothing to hold); False when its queue is full. A connection with a
        request socket is answered there (request_socket.py)."""
        requests = self.worker.request_sockets
        if requests is not None and requests.of:
            sent = requests.reply(*reply)
            if sent is not None:
                return sent
        try:
            self.sock.send_multipart([reply[0], reply[1] + reply[2]], NOBLOCK, copy=False)
        except zmq.Again:
            return False
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:
                raise
        return True

    def _retry(self, now: float) -> None:
        """Try the blocked clients whose time has come; one that took nothing waits twice as long."""
        for identity, blocked in list(self.blocked.items()):
            if blocked.retry_at > now:
                continue
            replies = blocked.replies
            held = len(replies)
            while replies and self._try(replies[0]):
                blocked.held -= sum(map(len, replies.popleft()))
            if replies:
                if len(replies) == held and blocked.wait >= STOPPED_S:
                    self._say_blocked()
                blocked.wait = RETRY_S if len(replies) < held else min(blocked.wait * 2, RETRY_MAX_S)
                blocked.retry_at = now + blocked.wait
                continue
            del self.blocked[identity]
            for identity, message in blocked.requests:  # served now, in the order they came
                self.route(identity, message)


def _poll_plain(poller: zmq.Poller, sinks, requests, polled: dict[int, int]) -> dict[int, int]:
    """Register the plain sockets' descriptors: the listeners and the API processes for input, the client
    sockets with bytes waiting for output; what is no longer wanted is unregistered."""
    wanted = dict.fromkeys(requests.readable(), POLLIN) if requests is not None else {}
    if requests is not None:
        for fd in requests.waiting:
            wanted[fd] = POLLIN | POLLOUT
    if sinks is not None:
        wanted.update(dict.fromkeys(sinks.readable(), POLLIN))
        for fd in sinks.waiting:
            wanted[fd] = POLLOUT
    if wanted != polled:
        for fd in polled.keys() - wanted.keys():
            poller.unregister(fd)
        for fd, flags in wanted.items():
            if polled.get(fd) != flags:
                poller.register(fd, flags)
    return wanted


