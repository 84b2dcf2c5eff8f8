"""One daemon per endpoint. A daemon holds an exclusive `flock` on a lock file beside each endpoint it serves
(ipc://PATH: PATH.lock; tcp://HOST:PORT: a file named by host and port in this user's runtime directory),
before any worker binds, and its workers inherit the lock, so it is held until the last of them exits. A
second daemon on the same endpoint finds it held and stops at once, naming the pid written in the file,
instead of binding over the first daemon's ipc socket (ZeroMQ unlinks a socket file it binds over).

Clients probe the same lock (`holder`): an ipc socket that is not there yet is worth waiting for only
while a daemon holds its endpoint.
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from pathlib import Path

from tokworker.protocol.endpoints import parse_endpoint, runtime_dir
from tokworker.worker.security import ensure_private_dir

TAKE_TRIES = 25                     # a client's probe holds a shared lock for microseconds: retry through it
TAKE_PAUSE_S = 0.02


class EndpointInUse(RuntimeError):
    """Another process (pid `pid`, 0 when unknown) serves `endpoint`."""

    def __init__(self, endpoint: str, pid: int):
        holder = f"pid {pid}" if pid else "another process"
        super().__init__(f"{endpoint} is in use by {holder} (a running `tokworker serve`): stop it, or give "
                         "this daemon another --bind")
        self.endpoint, self.pid = endpoint, pid


def lock_path(endpoint: str) -> Path:
    """Where the lock of `endpoint` lives.

    >>> lock_path("ipc:///run/user/1000/tokworker/worker.1")
    PosixPath('/run/user/1000/tokworker/worker.1.lock')
    >>> lock_path("tcp://[::1]:7000").name
    'tcp-___1_-7000.lock'
    """
    parsed = parse_endpoint(endpoint)
    if parsed.scheme == "ipc":
        return Path(parsed.path + ".lock")
    return runtime_dir() / f"tcp-{re.sub(r'[^A-Za-z0-9.-]', '_', parsed.host)}-{parsed.port}.lock"


class EndpointLocks:
    """The locks a daemon holds: `fds` go to its workers (inherited, so a worker outliving a killed daemon
    keeps the endpoint taken); `release()` removes the files and lets go."""

    def __init__(self):
        self.held: list[tuple[Path, int]] = []

    @property
    def fds(self) -> tuple[int, ...]:
        return tuple(fd for _, fd in self.held)

    def take(self, endpoint: str) -> None:
        path = lock_path(endpoint)
        ensure_private_dir(path.parent)
        for _ in range(TAKE_TRIES):
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                time.sleep(TAKE_PAUSE_S)
                continue
            if _same_file(fd, path):             # not a file its last holder unlinked while we opened it
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
                self.held.append((path, fd))
                return
            os.close(fd)
        raise EndpointInUse(endpoint, holder(endpoint) or 0)

    def release(self) -> None:
        for path, fd in reversed(self.held):
            path.unlink(missing_ok=True)         # while still held: a waiting taker then sees a new file
            os.close(fd)
        self.held.clear()


def hold_endpoints(endpoints: list[str]) -> EndpointLocks:
    """Take the lock of every endpoint, or none of them (raises EndpointInUse for the first one taken)."""
    locks = EndpointLocks()
    try:
        for endpoint in endpoints:
            locks.take(endpoint)
    except BaseException:
        locks.release()
        raise
    return locks


def holder(endpoint: str) -> int | None:
    """The pid that holds `endpoint` (0 when its file does not say), or None when nobody does."""
    try:
        fd = os.open(lock_path(endpoint), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).strip()
            return int(text) if text.isdigit() else 0
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        now = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)
