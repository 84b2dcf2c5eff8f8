"""Which connection owns which session. A client names its session in Hello; streams belong to the
session, and a Hello with a newer epoch moves the session to the new connection, after which requests
from the old one are answered STALE and never touch the session's streams (so a client's reconnect can
never be raced by its past). A connection that never said Hello has a session of its own.

Both tables are bounded (max_sessions, least recently greeted first out), but never forget a session with
open streams or its current connection: a storm of new connections must not orphan live streams.
"""

from __future__ import annotations

from collections import OrderedDict

from tokworker.protocol.messages import CodedError, ErrorCode, Hello

MAX_NAME = 1024                    # characters in a session name or a stream id (both are kept in tables)


class Sessions:
    def __init__(self, max_sessions: int, live: dict):
        self.max_sessions = max_sessions
        self.live = live                                   # session -> its open streams (the stream table's)
        self.owners: OrderedDict[str, tuple[int, bytes]] = OrderedDict()   # session -> (epoch, identity)
        self.of: OrderedDict[bytes, str] = OrderedDict()                     # identity -> session

    def session(self, identity: bytes) -> str:
        """The session a connection's requests act for."""
        return self.of.get(identity) or identity.hex()

    def stale(self, identity: bytes) -> bool:
        """True when this connection's session has moved to a newer connection."""
        session = self.of.get(identity)
        return session is not None and self.owners.get(session, (0, identity))[1] != identity

    def label(self, identity: bytes) -> str:
        """How logs name a connection: never its session's name, which proves ownership of its streams."""
        return f"connection {identity.hex()}"

    def hello(self, identity: bytes, msg: Hello) -> str:
        """Bind the connection to the session Hello names (a newer epoch takes it over); returns the session."""
        if len(msg.session) > MAX_NAME:
            raise CodedError(ErrorCode.INVALID, f"a session name is at most {MAX_NAME} characters")
        session = msg.session or identity.hex()
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
