"""What both ends of a link share: how a daemon's workers are named, the key files a CURVE client reads,
and the error for an endpoint that is not private (see tokworker/worker/security.py for the server side).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import zmq.auth

SERVER = "server"                      # server.key / server.key_secret in a key directory
AUTHORIZED = "authorized_clients"      # the public keys a daemon admits


class InsecureEndpoint(ValueError):
    """An endpoint that would let someone else in (or that we cannot check)."""


def worker_endpoints(base: str, count: int) -> list[str]:
    """The endpoints of a daemon's `count` workers: worker 0 at `base`, worker i at tcp port + i, or at
    ipc path + ".i". Clients use the same rule to find every worker from the first one's handshake."""
    scheme, _, rest = base.partition("://")
    if scheme == "tcp":
        host, _, port = rest.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"tcp endpoint needs host:port, got {base!r}")
        return [f"tcp://{host}:{int(port) + i}" for i in range(count)]
    if scheme == "ipc":
        return [base] + [f"{base}.{i}" for i in range(1, count)]
    raise ValueError(f"endpoint must be ipc:// or tcp://, got {base!r}")


@dataclass(frozen=True)
class ClientKeys:
    """What a client needs for a CURVE connection: the server's public key and its own pair."""

    server_public: bytes
    public: bytes
    secret: bytes

    @classmethod
    def from_dir(cls, directory: str | os.PathLike, name: str = "client") -> "ClientKeys":
        directory = Path(directory)
        server_public, _ = zmq.auth.load_certificate(directory / f"{SERVER}.key")
        public, secret = zmq.auth.load_certificate(directory / f"{name}.key_secret")
        if secret is None:
            raise ValueError(f"{directory / (name + '.key_secret')} holds no secret key")
        return cls(server_public, public, secret)

    def apply(self, socket: zmq.Socket) -> None:
        socket.curve_serverkey = self.server_public
        socket.curve_publickey = self.public
        socket.curve_secretkey = self.secret
