"""Who may talk to a worker: private ipc:// directories, CurveZMQ for tcp://, and the endpoint rules.

- ipc:// sockets live in a directory owned by this user with mode 0700, so no other local user can even
  reach the socket file; an existing directory that others can open is refused, not repaired.
- tcp:// always needs CurveZMQ: the server's key pair encrypts and authenticates the connection, and a
  ZAP handler admits only client public keys found in `authorized_clients/`. Without keys a tcp://
  bind (and in particular 0.0.0.0 or ::) is refused.

A key directory made by `tokworker keys DIR`:
    server.key, server.key_secret            the daemon's pair (the secret stays on the daemon's host)
    <name>.key, <name>.key_secret            a client's pair (copy server.key and these to the client)
    authorized_clients/<name>.key            public keys the daemon admits
"""

from __future__ import annotations

import os
from pathlib import Path

import zmq
import zmq.auth

from tokworker.protocol.endpoints import AUTHORIZED, SERVER, InsecureEndpoint, check_private_dir, parse_endpoint


def check_bind(endpoint: str, curve_keys: str | None) -> None:
    """Refuse an endpoint that is not private: tcp:// without keys, ipc:// outside a 0700 directory of ours."""
    parsed = parse_endpoint(endpoint)
    if parsed.scheme == "tcp":
        if not curve_keys:
            raise InsecureEndpoint(f"refusing to bind {endpoint} without CurveZMQ keys: pass --curve-keys DIR "
                                   "(make one with `tokworker keys DIR`) or use ipc://")
        check_key_dir(curve_keys)
        return
    ensure_private_dir(Path(parsed.path).parent)


def check_key_dir(curve_keys: str) -> None:
    """A key directory the daemon can serve from: the server's pair and the admitted clients' folder."""
    keys = Path(curve_keys)
    if not keys.is_dir():
        raise InsecureEndpoint(f"--curve-keys {curve_keys}: no such directory (make one with `tokworker keys DIR`)")
    for needed in (keys / f"{SERVER}.key_secret", keys / AUTHORIZED):
        if not needed.exists():
            raise InsecureEndpoint(f"--curve-keys {curve_keys}: {needed.name} is missing (make the directory with "
                                   "`tokworker keys DIR`)")


def ensure_private_dir(directory: Path) -> None:
    """Create `directory` with mode 0700, or accept it only if it is a real directory (no symlink) of this
    user's that nobody else can open."""
    directory = Path(directory)
    if not os.path.lexists(directory):
        directory.mkdir(parents=True, mode=0o700)
        os.chmod(directory, 0o700)
    check_private_dir(directory)


def generate_keys(directory: str | os.PathLike, clients: list[str] = ("client",)) -> Path:
    """Make (or extend) a key directory: the server pair if missing, a pair per client name, and each
    client's public key in authorized_clients/. Secret files are 0600."""
    directory = Path(directory)
    ensure_private_dir(directory)
    (directory / AUTHORIZED).mkdir(mode=0o700, exist_ok=True)
    names = [] if (directory / f"{SERVER}.key_secret").exists() else [SERVER]
    for name in [*names, *clients]:
        if name != SERVER and (name == AUTHORIZED or "/" in name or name.startswith(".")):
            raise ValueError(f"bad client name {name!r}")
        public, secret = zmq.auth.create_certificates(directory, name)
        os.chmod(secret, 0o600)
        if name != SERVER:
            (directory / AUTHORIZED / f"{name}.key").write_bytes(Path(public).read_bytes())
    return directory


def secure_server(context: zmq.Context, socket: zmq.Socket, keys_dir: str):
    """Make `socket` a CURVE server admitting only authorized client keys; returns the ZAP
    authenticator (a thread), which must be stopped when the socket closes."""
    from zmq.auth.thread import ThreadAuthenticator

    keys = Path(keys_dir)
    public, secret = zmq.auth.load_certificate(keys / f"{SERVER}.key_secret")
    authorized = keys / AUTHORIZED
    if not authorized.is_dir():
        raise InsecureEndpoint(f"{authorized} is missing: no client could be admitted")
    authenticator = ThreadAuthenticator(context)
    authenticator.start()
    authenticator.configure_curve(domain="*", location=str(authorized))
    socket.curve_secretkey = secret
    socket.curve_publickey = public
    socket.curve_server = True
    return authenticator
