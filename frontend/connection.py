"""One ZeroMQ connection from the API process to one worker: a DEALER socket read from the event loop and
its monitor, which reports a disconnect (kill -9, OOM, a crash) or a refused security handshake. A link
(link.py) opens one per epoch, says Hello on it, and throws it away when the worker is lost.
"""

from __future__ import annotations

import zmq
from zmq.utils.monitor import recv_monitor_message

_WATCHED = zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | \
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL


class Connection:
    """The socket of one epoch. `send`, `recv` and `get` are pyzmq's Cython methods, bound once (no
    per-call option checks); `on_readable()` runs when replies may wait, `on_event(event)` for each
    monitor event."""

    __slots__ = ("loop", "sock", "monitor", "send", "recv", "get", "_on_event")

    def __init__(self, context: zmq.Context, endpoint: str, keys, loop, on_readable, on_event):
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 0)                       # bounded by max_inflight instead
        sock.setsockopt(zmq.RCVHWM, 0)
        sock.setsockopt(zmq.RECONNECT_IVL, 20)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 500)
        if not endpoint.startswith("ipc://"):
            # a peer gone silent (no FIN on tcp) counts as a disconnect, and recovery starts; over ipc the kernel
            # closes a dead worker's socket and a hung one fails the link's probe, so no heartbeat wakes anyone
            sock.setsockopt(zmq.HEARTBEAT_IVL, 2000)
            sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 10_000)
        if keys is not None:
            keys.apply(sock)
        self.loop, self.sock, self._on_event = loop, sock, on_event
        self.monitor = sock.get_monitor_socket(_WATCHED)
        sock.connect(endpoint)
        raw = super(zmq.Socket, sock)                       # pyzmq's Cython socket
        self.send, self.recv, self.get = raw.send, raw.recv, raw.get
        loop.add_reader(sock.getsockopt(zmq.FD), on_readable)
        loop.add_reader(self.monitor.getsockopt(zmq.FD), self.read_events)

    def read_events(self) -> None:
        """Every monitor event waiting. An unread ZeroMQ pipe never signals its descriptor again, so this
        also runs once right after connecting."""
        monitor = self.monitor
        try:
            while monitor is not None and monitor.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                self._on_event(recv_monitor_message(monitor, zmq.NOBLOCK)["event"])
                monitor = self.monitor                       # the handler may have closed this connection
        except zmq.ZMQError:
            pass

    def close(self) -> None:
        sock, monitor = self.sock, self.monitor
        if monitor is None:
            return
        self.monitor = None
        self.loop.remove_reader(sock.getsockopt(zmq.FD))
        self.loop.remove_reader(monitor.getsockopt(zmq.FD))
        sock.disable_monitor()
        monitor.close(linger=0)
        sock.close(linger=0)
