"""Which connection owns which session. A client names its session in Hello; streams belong to the
session, and a Hello with a newer epoch moves the session to the new connection, after which requests
from the old one are answered STALE and never touch the session's streams (so a client's reconnect can
never be raced by its past). A connection that never said Hello has a session of its own.

A session belongs to the peer that named it: over ipc its process (SO_PEERCRED, which ZeroMQ reads), over
tcp the CURVE key its handshake proved (else its address). A Hello names a session among its peer's own,
so another key or process that learns a session's name gets a session of its own, whatever its epoch, and
no Hello can name the session of a connection that never said one. Logs name connections, not sessions.
The streams of a connection that drops go with it (connections.py), not when they idle out.

Both tables are bounded (max_sessions, least recently greeted first out), but never forget a session with
open streams or its current connection: a storm of new connections must not orphan live streams.
"""

from __future__ import annotations

from collections import OrderedDict

import zmq

from tokworker.protocol.messages import CodedError, ErrorCode, Hello

MAX_NAME = 1024                    # characters in a session name or a stream id (both are kept in tables)
RAW = "\x01"                       # how the session of a connection without a Hello begins (no peer does)


def peer_of(message: zmq.Frame, ipc: bool) -> str:
    """Who sent `message`: over ipc its process, over tcp its CURVE key, else its address."""
    try:
        address = message.get("Peer-Address")
    except zmq.ZMQError:
        address = ""
    if ipc:
        return process_peer(address.rsplit(":", 1)[-1])
    try:
        return "key " + message.get("User-Id")
    except zmq.ZMQError:
        return "address " + address


def process_peer(pid) -> str:
    """The peer that is a local process (ZeroMQ's ipc peer, or a socket handed over beside it).

    >>> process_peer(4242), session_key(process_peer(4242), "api-0")
    ('pid 4242', 'pid 4242\\x00api-0')
    """
    return f"pid {pid}"


def session_key(peer: str, name: str) -> str:
    return f"{peer}\0{name}"


class Sessions:
    def __init__(self, max_sessions: int, live: dict):
        self.max_sessions = max_sessions
        self.live = live                                   # session -> its open streams (the stream table's)
        self.owners: OrderedDict[str, tuple[int, bytes]] = OrderedDict()   # session -> (epoch, identity)
        self.of: OrderedDict[bytes, str] = OrderedDict()                     # identity -> session

    def session(self, identity: bytes) -> str:
        """The session a connection's requests act for."""
        return self.of.get(identity) or RAW + identity.hex()

    def stale(self, identity: bytes) -> bool:
        """True when this connection's session has moved to a newer connection."""
        session = self.of.get(identity)
        return session is not None and self.owners.get(session, (0, identity))[1] != identity

    def label(self, identity: bytes) -> str:
        """How logs name a connection: never its session's name, which proves ownership of its streams."""
        return f"connection {identity.hex()}"

    def hello(self, identity: bytes, msg: Hello, peer: str) -> str:
        """Bind the connection to the session Hello names among `peer`'s (a newer epoch takes it over from
        another connection of the same peer); returns the session."""
        if len(msg.session) > MAX_NAME:
            raise CodedError(ErrorCode.INVALID, f"a session name is at most {MAX_NAME} characters")
        session = session_key(peer, msg.session or identity.hex())
        current = self.owners.get(session)
        if current is not None and current[1] != identity and msg.epoch <= current[0]:
            raise CodedError(ErrorCode.STALE, f"that session is at epoch {current[0]} already")
        self.owners[session] = (msg.epoch, identity)
        self.owners.move_to_end(session)
        self.of[identity] = session
        self.of.move_to_end(identity)
        self._forget()
        return session

    def _forget(self) -> None:
        """Keep both tables within max_sessions, least recently greeted first out, sparing sessions with
        open streams and their current connections (they are at most max_streams, so this always ends)."""
        live, owners, of = self.live, self.owners, self.of
        limit = self.max_sessions
        while len(owners) > limit:
            session = next(iter(owners))
            if session in live:
                owners.move_to_end(session)
                limit += 1                               # counted as live, not against the limit
            else:
                del owners[session]
        limit = self.max_sessions
        while len(of) > limit:
            identity, session = next(iter(of.items()))
            if session in live and owners.get(session, (0, b""))[1] == identity:
                of.move_to_end(identity)
                limit += 1
            else:
                del of[identity]
