"""Endpoints as a user types them: malformed ones fail at once with a ValueError that names the problem,
`connect_timeout` bounds a connection to nobody, `close()` never blocks, and ipc endpoints are checked on
the client's side too (owner, mode, symlinks) before anything is sent there.
Covers tokworker.frontend.connection."""

from __future__ import annotations

import os
import pwd
import socket
import time

import pytest
import uvloop

from tokworker.frontend import TokenizerPool, WorkerLost
from tokworker.protocol.endpoints import (Endpoint, InsecureEndpoint, check_ipc_peer, check_private_dir,
                                          parse_endpoint, runtime_dir, worker_endpoints)
from tokworker.worker.security import check_bind, ensure_private_dir


@pytest.mark.parametrize("text, expected", [
    ("tcp://127.0.0.1:7000", Endpoint("tcp", host="127.0.0.1", port=7000)),
    ("tcp://[::1]:7000", Endpoint("tcp", host="[::1]", port=7000)),
    ("tcp://*:7000", Endpoint("tcp", host="*", port=7000)),
    ("ipc:///run/x/worker", Endpoint("ipc", path="/run/x/worker")),
])
def test_good_endpoints_parse(text, expected):
    assert parse_endpoint(text) == expected
    assert str(parse_endpoint(text)) == text


@pytest.mark.parametrize("text, message", [
    ("127.0.0.1:7000", "has no scheme: write tcp://127.0.0.1:7000"),
    ("tcp://127.0.0.1", "needs host:port"),
    ("tcp://:7000", "needs host:port"),
    ("tcp://host:port", "a port from 1 to 65535"),
    ("tcp://host:0", "a port from 1 to 65535"),
    ("tcp://host:65536", "a port from 1 to 65535"),
    ("http://127.0.0.1:8000", "must be ipc:// or tcp://"),
    ("inproc://x", "must be ipc:// or tcp://"),
    ("ipc://relative/path", "needs an absolute path"),
    ("ipc:///" + "x" * 200, "over the OS limit"),
])
def test_bad_endpoints_are_refused_with_the_reason(text, message):
    with pytest.raises(ValueError, match=message):
        parse_endpoint(text)


def test_worker_endpoints_stay_in_the_port_range():
    assert worker_endpoints("tcp://h:65534", 2) == ["tcp://h:65534", "tcp://h:65535"]
    with pytest.raises(ValueError, match="would pass port 65535"):
        worker_endpoints("tcp://h:65535", 2)


@pytest.mark.parametrize("endpoint", ["127.0.0.1:7000", "tcp://127.0.0.1", "http://127.0.0.1:8000"])
def test_connect_refuses_a_malformed_endpoint_at_once(endpoint):
    async def main():
        started = time.monotonic()
        with pytest.raises(ValueError):
            await TokenizerPool.connect(endpoint, connect_timeout=30)
        return time.monotonic() - started

    assert uvloop.run(main()) < 5                        # not the 30 s connect timeout


def test_connect_timeout_is_honoured_and_close_does_not_block():
    with socket.socket() as probe:                       # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    async def main():
        started = time.monotonic()
        with pytest.raises(WorkerLost, match="no handshake"):
            await TokenizerPool.connect([f"tcp://127.0.0.1:{port}", "tcp://nonexistent.invalid:7000"],
                                        connect_timeout=1.0)
        return time.monotonic() - started

    elapsed = uvloop.run(main())
    assert 0.9 < elapsed < 5.0                           # the timeout, plus close() without waiting


# ---------------------------------------------------------------- ipc directories that can't be hijacked

def _nobody() -> int:
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        return 65534


needs_root = pytest.mark.skipif(os.getuid() != 0, reason="making files owned by another user needs root")


@needs_root
def test_a_directory_owned_by_another_user_is_refused_on_both_sides(tmp_path):
    planted = tmp_path / "planted"
    planted.mkdir(mode=0o700)
    os.chown(planted, _nobody(), -1)                     # another user made it first, with the right mode
    with pytest.raises(InsecureEndpoint, match="owner"):
        check_bind(f"ipc://{planted}/worker", None)
    with pytest.raises(InsecureEndpoint, match="owner"):
        check_ipc_peer(f"ipc://{planted}/worker")

    async def main():
        with pytest.raises(InsecureEndpoint):
            await TokenizerPool.connect(f"ipc://{planted}/worker", connect_timeout=5)

    uvloop.run(main())


def test_a_symlinked_directory_is_refused_even_to_a_private_target(tmp_path):
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(target)                              # the swap: a name we check, pointing elsewhere
    for check in (lambda: check_bind(f"ipc://{link}/worker", None), lambda: check_ipc_peer(f"ipc://{link}/worker"),
                  lambda: check_private_dir(link), lambda: ensure_private_dir(link)):
        with pytest.raises(InsecureEndpoint, match="symlink"):
            check()


@needs_root
def test_a_symlinked_socket_to_another_users_socket_is_refused(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(theirs / "sock"))
        os.chown(theirs / "sock", _nobody(), -1)
        (mine / "worker").symlink_to(theirs / "sock")
        with pytest.raises(InsecureEndpoint, match="not a socket of yours"):
            check_ipc_peer(f"ipc://{mine}/worker")
        os.unlink(mine / "worker")
        os.link(theirs / "sock", mine / "worker")        # a hard link keeps its owner: still refused
        with pytest.raises(InsecureEndpoint, match="not a socket of yours"):
            check_ipc_peer(f"ipc://{mine}/worker")


def test_a_mode_others_can_open_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    with pytest.raises(InsecureEndpoint, match="mode 755"):
        check_ipc_peer(f"ipc://{shared}/worker")


def test_the_default_runtime_dir_is_never_a_fixed_name_in_the_shared_temp_dir(monkeypatch, tmp_path):
    import tempfile
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    path = runtime_dir()
    assert not str(path).startswith(tempfile.gettempdir())
    private = tmp_path / "xdg"
    private.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(private))
    assert runtime_dir() == private / "tokworker"
    os.chmod(private, 0o755)                             # an XDG dir others can open is not used
    assert runtime_dir() != private / "tokworker"
