"""The worker's lane: the thread that owns the client socket. It serves session requests (hello, open,
step, close, stats) itself, at once, and hands stateless work (render, encode, decode, compile, guide) to
the main thread, which runs it under the CPU budget. The interpreter hands its lock to the waiting lane
every SWITCH_S, so a long render or a compile never holds an engine step back for longer.

A client that stops reading its replies is stopped being read: replies go out with ROUTER_MANDATORY over a
short queue (REPLY_QUEUE messages), and when that client's queue is full the lane holds its later replies
(up to HELD_BYTES, more are dropped) and parks its new requests unserved (up to PARKED_BYTES, more are
dropped) until the queue moves again. Its floods then cost the worker neither memory nor time, and every other client
is served as before.
"""

from __future__ import annotations

import logging
import struct
import time
from collections import deque

import msgspec
import zmq

from tokworker.protocol.messages import ErrorCode, unpack_id

log = logging.getLogger("tokworker.worker")

POLL_S = 0.1                       # how soon the lane sees a stop
RETRY_S = 0.005                    # how often a blocked client's held replies are tried again
SWITCH_S = 0.001                   # the interpreter's switch interval: a step's longest wait behind a render
REPLY_QUEUE = 8                    # replies ZeroMQ queues for one client (each at most max_message_bytes)
HELD_BYTES = 64 << 20              # replies the lane holds for a client that stopped reading
PARKED_BYTES = 16 << 20            # requests parked unserved from such a client
QUEUED_BYTES = 64 << 20            # stateless requests handed to the main thread and not yet answered
ARRIVED = struct.Struct("<d")
# How a session request's msgpack body begins after its map header (msgspec writes the tag first): only a
# hint for the lane, every body is decoded in full when handled.
_SESSION_TAGS = (b"\xa4step", b"\xa4open", b"\xa5close", b"\xa5hello", b"\xa5stats")


def split_frame(frames: list) -> list:
    """[identity, message] off the socket -> [identity, request id, body], how the worker handles it;
    anything but one frame of at least 8 bytes -> a shape handle() answers as malformed."""
    if len(frames) == 2 and len(frames[1]) >= 8:
        message = frames[1]
        return [frames[0], message[:8], message[8:]]
    return [frames[0], b"", b""]


def is_session_request(frames) -> bool:
    return len(frames) == 3 and frames[2][1:6] == b"\xa4type" and frames[2][6:12].startswith(_SESSION_TAGS)


class _Blocked:
    __slots__ = ("replies", "held", "requests", "parked")

    def __init__(self):
        self.replies: deque = deque()
        self.held = 0
        self.requests: deque = deque()
        self.parked = 0


class Lane:
    def __init__(self, worker, sock, work, stop: list):
        self.worker, self.sock, self.work, self.stop = worker, sock, work, stop
        self.blocked: dict[bytes, _Blocked] = {}
        self.handed: deque = deque()                 # sizes of the requests the main thread has, in its order
        self.handed_bytes = 0
        self.dropped = 0
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)

    def run(self) -> None:
        worker, sock, work = self.worker, self.sock, self.work
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(work, zmq.POLLIN)
        sinks = worker.streams.sinks
        polled: dict[int, int] = {}                   # the sinks' descriptors registered, and for what
        housekeeping = time.monotonic() + 1.0
        while not self.stop[0]:
            if sinks is not None:
                polled = _poll_sinks(poller, sinks, polled)
            ready = dict(poller.poll((RETRY_S if self.blocked else POLL_S) * 1000))
            if sinks is not None and len(ready) > (work in ready) + (sock in ready):
                _serve_sinks(sinks, ready, polled)
            if self.blocked:
                self._retry()
            if ready.get(work):
                while work.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                    reply = work.recv_multipart()
                    worker.queued -= 1
                    self.handed_bytes -= self.handed.popleft()
                    if len(reply) > 1:
                        self.send(reply)
                    elif reply[0]:                       # a session request the main thread sent back
                        self.serve(msgspec.msgpack.decode(reply[0]))
            if ready.get(sock):
                while sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                    try:
                        self.route(split_frame(sock.recv_multipart()))
                    except MemoryError:                  # that message is lost, the lane is not
                        self.dropped += 1
            now = time.monotonic()
            if now >= housekeeping:
                housekeeping = now + 1.0
                worker.streams.evict_idle()

    def route(self, frames: list[bytes]) -> None:
        blocked = self.blocked.get(frames[0])
        if blocked is not None:
            size = sum(map(len, frames))
            if blocked.parked + size <= PARKED_BYTES:
                blocked.requests.append(frames)
                blocked.parked += size
            else:
                self.dropped += 1
            return
        worker = self.worker
        if is_session_request(frames):
            self.serve(frames)
            return
        size = sum(map(len, frames))
        if worker.queued < worker.options.max_queue and self.handed_bytes + size <= QUEUED_BYTES:
            worker.queued += 1
            self.handed.append(size)
            self.handed_bytes += size
            self.work.send_multipart([*frames, ARRIVED.pack(time.monotonic())], copy=False)
        elif len(frames) == 3 and len(frames[1]) == 8:
            self.send(worker._error(frames[0], frames[1], unpack_id(frames[1]), ErrorCode.OVERLOADED,
                                    f"this worker's queue is full ({worker.queued} requests, "
                                    f"{self.handed_bytes} bytes)"))

    def serve(self, frames: list[bytes]) -> None:
        reply = self.worker.handle(frames, time.monotonic())
        if reply is not None:
            self.send(reply)

    def send(self, reply: list) -> None:
        identity = reply[0]
        blocked = self.blocked.get(identity)
        if blocked is None:
            if self._try(reply):
                return
            log.warning("a client stopped reading its replies; its requests wait until it reads again")
            blocked = self.blocked[identity] = _Blocked()
        size = sum(map(len, reply))
        if blocked.held + size > HELD_BYTES:
            self.dropped += 1
            return
        blocked.replies.append(reply)
        blocked.held += size

    def _try(self, reply) -> bool:
        """Sent, or the peer is gone (nothing to hold); False when its queue is full."""
        try:
            self.sock.send_multipart([reply[0], reply[1] + reply[2]], zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return False
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:
                raise
        return True

    def _retry(self) -> None:
        for identity, blocked in list(self.blocked.items()):
            replies = blocked.replies
            while replies and self._try(replies[0]):
                blocked.held -= sum(map(len, replies.popleft()))
            if replies:
                continue
            del self.blocked[identity]
            for frames in blocked.requests:             # served now, in the order they came
                self.route(frames)


def _poll_sinks(poller: zmq.Poller, sinks, polled: dict[int, int]) -> dict[int, int]:
    """Register the sinks' descriptors: the listener and the API processes for input, the client sockets
    with bytes waiting for output; what is no longer wanted is unregistered."""
    wanted = dict.fromkeys(sinks.readable(), zmq.POLLIN)
    for fd in sinks.waiting:
        wanted[fd] = zmq.POLLOUT
    if wanted != polled:
        for fd in polled.keys() - wanted.keys():
            poller.unregister(fd)
        for fd, flags in wanted.items():
            if polled.get(fd) != flags:
                poller.register(fd, flags)
    return wanted


def _serve_sinks(sinks, ready: dict, polled: dict[int, int]) -> None:
    writable = [fd for fd, flags in ready.items() if isinstance(fd, int) and flags & zmq.POLLOUT]
    for fd, flags in ready.items():
        if isinstance(fd, int) and flags & zmq.POLLIN and polled.get(fd) == zmq.POLLIN:
            sinks.on_readable(fd)
    if writable:
        sinks.on_writable(writable)
