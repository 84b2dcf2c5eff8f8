"""The worker's connections as ZeroMQ sees them: when one drops (its API process died or closed it, over ipc
or tcp, or it left the worker's heartbeats unanswered for peer_timeout_s because its host died or its
network was cut), the streams of the session it holds go with it, at once. A client never resumes a dropped
connection's streams (it reconnects with a Hello that resets its session, which drops them too), so nothing
a client could still use is lost, and a dead API process's streams do not wait out the idle timeout.

A connection is known by the descriptor its messages arrive on (ZeroMQ's SRCFD), noted when it says Hello or
opens a stream; a socket monitor reports each descriptor that drops. The monitor's reports are read before
a descriptor is noted, so a descriptor that a new connection reuses is never taken for the old one's.
"""

from __future__ import annotations

import logging

import zmq
from zmq.utils.monitor import parse_monitor_message

log = logging.getLogger("tokworker.worker")


class Connections:
    def __init__(self, sock: zmq.Socket, sessions, streams):
        self.sock, self.sessions, self.streams = sock, sessions, streams
        self.monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        self.on_fd: dict[int, bytes] = {}            # descriptor -> the connection (routing id) noted on it

    def note(self, identity: bytes, message: zmq.Frame) -> None:
        """`message` came from `identity`: remember which descriptor that connection is."""
        self.read_reports()
        try:
            self.on_fd[message.get(zmq.SRCFD)] = identity
        except zmq.ZMQError:
            pass

    def read_reports(self) -> None:
        """Drop the streams of every noted connection the monitor reports gone."""
        monitor = self.monitor
        while monitor.get(zmq.EVENTS) & zmq.POLLIN:
            report = parse_monitor_message(monitor.recv_multipart())
            identity = self.on_fd.pop(report["value"], None)
            if identity is not None:
                self._gone(identity)

    def _gone(self, identity: bytes) -> None:
        sessions = self.sessions
        if sessions.stale(identity):                 # its session moved to a newer connection: not its to drop
            return
        session = sessions.session(identity)
        open_streams = self.streams.sessions.get(session)
        if open_streams:
            log.info("dropping %d stream(s) of a connection that closed", len(open_streams))
            self.streams.drop_session(session)

    def close(self) -> None:
        self.sock.disable_monitor()
        self.monitor.close(linger=0)
