"""What both ends of a link share: endpoint syntax and naming, where ipc sockets live and who may own them,
and the key files a CURVE client reads (tokworker/worker/security.py has the server's side).

An endpoint is `tcp://host:port` or `ipc:///absolute/path`; anything else is refused at once with a
ValueError that says what is wrong, because ZeroMQ itself would either reject it without saying why or
connect to it forever.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import zmq.auth

SERVER = "server"                      # server.key / server.key_secret in a key directory
AUTHORIZED = "authorized_clients"      # the public keys a daemon admits
SCHEMES = ("tcp", "ipc")
IPC_PATH_MAX = 107                     # sun_path holds 108 bytes with its terminating NUL


class InsecureEndpoint(ValueError):
    """An endpoint that would let someone else in (or that we cannot check)."""


class MissingDirectory(InsecureEndpoint):
    """An ipc endpoint's directory that is not there (yet: a daemon that is starting makes it)."""


@dataclass(frozen=True)
class Endpoint:
    scheme: str
    host: str = ""                     # tcp
    port: int = 0                      # tcp
    path: str = ""                     # ipc

    def __str__(self) -> str:
        return f"tcp://{self.host}:{self.port}" if self.scheme == "tcp" else f"ipc://{self.path}"


def parse_endpoint(text: str) -> Endpoint:
    """`tcp://host:port` or `ipc:///abs/path` -> an Endpoint; a ValueError naming the problem otherwise.

    >>> str(parse_endpoint("tcp://10.0.0.2:7000"))
    'tcp://10.0.0.2:7000'
    >>> parse_endpoint("127.0.0.1:7000")
    Traceback (most recent call last):
    ValueError: endpoint '127.0.0.1:7000' has no scheme: write tcp://127.0.0.1:7000 or ipc:///absolute/path
    """
    if not isinstance(text, str):
        raise ValueError(f"an endpoint is a str like tcp://host:port, not {type(text).__name__}")
    scheme, sep, rest = text.partition("://")
    if not sep:
        raise ValueError(f"endpoint {text!r} has no scheme: write tcp://{text} or ipc:///absolute/path")
    if scheme not in SCHEMES:
        raise ValueError(f"endpoint must be ipc:// or tcp://, got {text!r}")
    if scheme == "ipc":
        if not rest.startswith("/"):
            raise InsecureEndpoint(f"ipc endpoint needs an absolute path, got {text!r}")
        if len(rest.encode()) > IPC_PATH_MAX:
            raise ValueError(f"ipc path of {len(rest.encode())} bytes, over the OS limit of {IPC_PATH_MAX}: {text!r}")
        return Endpoint("ipc", path=rest)
    host, colon, port = rest.rpartition(":")
    if not colon or not host:
        raise ValueError(f"tcp endpoint needs host:port, got {text!r}")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"tcp endpoint needs a port from 1 to 65535, got {port!r} in {text!r}")
    if "/" in host or (host.startswith("[") != host.endswith("]")):
        raise ValueError(f"tcp endpoint has a malformed host {host!r} in {text!r}")
    return Endpoint("tcp", host=host, port=int(port))


def worker_endpoints(base: str, count: int) -> list[str]:
    """The endpoints of a daemon's `count` workers: worker 0 at `base`, worker i at tcp port + i, or at
    ipc path + ".i". Clients use the same rule to find every worker from the first one's handshake."""
    endpoint = parse_endpoint(base)
    if endpoint.scheme == "tcp":
        if endpoint.port + count - 1 > 65535:
            raise ValueError(f"{count} workers from port {endpoint.port} would pass port 65535")
        return [f"tcp://{endpoint.host}:{endpoint.port + i}" for i in range(count)]
    return [base] + [f"{base}.{i}" for i in range(1, count)]


# ---------------------------------------------------------------- ipc: private directories

def runtime_dir() -> Path:
    """Where this user's daemon sockets go by default: $XDG_RUNTIME_DIR, else the login manager's
    /run/user/UID when it is this user's, else ~/.tokworker/run. Never a fixed name in the shared temp
    directory, where another local user could create it first."""
    uid = os.getuid()
    candidates = [os.environ.get("XDG_RUNTIME_DIR"), f"/run/user/{uid}"]
    for candidate in candidates:
        if candidate:
            try:
                info = os.lstat(candidate)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode) and info.st_uid == uid and not info.st_mode & 0o077:
                return Path(candidate) / "tokworker"
    return Path.home() / ".tokworker" / "run"


def default_bind() -> str:
    """The daemon's default endpoint (and `tokworker status`'s): ipc:// in this user's runtime directory."""
    return f"ipc://{runtime_dir() / 'worker'}"


def check_private_dir(directory: str | os.PathLike) -> None:
    """Accept `directory` only if it is a real directory (not a symlink: lstat, and O_NOFOLLOW on the
    open), owned by this user, that nobody else can open. Raises InsecureEndpoint otherwise."""
    directory = Path(directory)
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise MissingDirectory(f"{directory} does not exist") from None
    except OSError as exc:                       # ELOOP or ENOTDIR: a symlink or a file where a directory must be
        kind = "a symlink" if os.path.islink(directory) else "not a directory"
        raise InsecureEndpoint(f"ipc sockets must live in a real directory: {directory} is {kind} ({exc.strerror})") \
            from None
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise InsecureEndpoint(f"ipc sockets must live in a directory only you can open: {directory} has mode "
                               f"{stat.S_IMODE(info.st_mode):o} and owner {info.st_uid} (you are {os.getuid()}); "
                               "use a fresh directory")


def check_ipc_peer(endpoint: str) -> None:
    """Before a client connects to an ipc endpoint: its directory is private and ours, and the socket, if
    it is there yet, is a socket of ours rather than a symlink to someone else's."""
    parsed = parse_endpoint(endpoint)
    if parsed.scheme != "ipc":
        return
    path = Path(parsed.path)
    check_private_dir(path.parent)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return                                   # not bound yet: nobody else can create it in a private directory
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid():
        raise InsecureEndpoint(f"{path} is not a socket of yours (mode {stat.filemode(info.st_mode)}, owner "
                               f"{info.st_uid}): refusing to connect")


# ---------------------------------------------------------------- CURVE: the client's keys

@dataclass(frozen=True)
class ClientKeys:
    """What a client needs for a CURVE connection: the server's public key and its own pair."""

    server_public: bytes
    public: bytes
    secret: bytes

    @classmethod
    def from_dir(cls, directory: str | os.PathLike, name: str = "client") -> "ClientKeys":
        directory = Path(directory)
        if not directory.is_dir():
            raise ValueError(f"CURVE key directory {directory} does not exist (make one with `tokworker keys DIR`)")
        server_public, _ = zmq.auth.load_certificate(directory / f"{SERVER}.key")
        public, secret = zmq.auth.load_certificate(directory / f"{name}.key_secret")
        if secret is None:
            raise ValueError(f"{directory / (name + '.key_secret')} holds no secret key")
        return cls(server_public, public, secret)

    def apply(self, socket: zmq.Socket) -> None:
        socket.curve_serverkey = self.server_public
        socket.curve_publickey = self.public
        socket.curve_secretkey = self.secret


def sinks_path(endpoint: str) -> str | None:
    """Where a worker takes sockets: beside its ipc:// endpoint; None over tcp:// (no socket crosses hosts)
    or where the path would be too long for a Unix socket.

    >>> sinks_path("ipc:///run/user/1000/tokworker/worker.1"), sinks_path("tcp://10.0.0.2:7000")
    ('/run/user/1000/tokworker/worker.1.sinks', None)
    """
    return _beside(endpoint, ".sinks")


def requests_path(endpoint: str) -> str | None:
    """Where a worker reads requests over a plain Unix stream socket (frontend/request_socket.py): beside its
    ipc:// endpoint, as sinks_path.

    >>> requests_path("ipc:///run/user/1000/tokworker/worker.1"), requests_path("tcp://10.0.0.2:7000")
    ('/run/user/1000/tokworker/worker.1.requests', None)
    """
    return _beside(endpoint, ".requests")


def _beside(endpoint: str, suffix: str) -> str | None:
    parsed = parse_endpoint(endpoint)
    path = parsed.path + suffix
    return path if parsed.scheme == "ipc" and len(path.encode()) <= IPC_PATH_MAX else None
