"""The daemon's lifecycle as an operator meets it, with real `tokworker serve` processes: one daemon per
endpoint (a second one exits 1 at once naming the first one's pid, which keeps serving); a client finds
out at once that an ipc endpoint has no socket."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import uvloop

from tests.daemons import wait_held
from tokworker.frontend import NoSuchSocket, TokenizerPool, WorkerLost
from tokworker.tokenizer import Tokenizer
from tokworker.worker.endpoint_lock import hold_endpoints, holder, lock_path

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "tokworker" / "data" / "default"
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def cli(*args, env=ENV) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tokworker.cli", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.fixture
def run_dir(tmp_path):
    path = tmp_path / "run"
    path.mkdir(mode=0o700)
    return path


def encode_on(bind: str, text: str) -> list[int]:
    async def main():
        async with await TokenizerPool.connect(bind, connect_timeout=30) as pool:
            return await pool.encode(text)
    return uvloop.run(main())


def test_a_second_daemon_on_the_same_ipc_endpoint_exits_1_naming_the_first(run_dir):
    bind = f"ipc://{run_dir}/worker"
    first = cli("serve", "--model-dir", str(MODEL), "--workers", "2", "--bind", bind)
    try:
        assert wait_held(first, bind) == first.pid
        assert encode_on(bind, "before ü") == Tokenizer.from_dir(MODEL).encode("before ü")
        started = time.monotonic()
        second = cli("serve", "--model-dir", str(MODEL), "--bind", bind)
        _, err = second.communicate(timeout=60)
        elapsed = time.monotonic() - started
        assert second.returncode == 1, err
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert f"{bind} is in use by pid {first.pid}" in lines[0]
        assert elapsed < 10                                   # at once: no worker was started
        status = cli("status", "--endpoint", bind)
        out, err = status.communicate(timeout=60)
        assert status.returncode == 0, out + err
        assert out.count("serving") == 2
        assert encode_on(bind, "after ü") == Tokenizer.from_dir(MODEL).encode("after ü")
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(30) == 0
    assert holder(bind) is None and not list(run_dir.iterdir())      # sockets and locks gone


def test_a_second_daemon_on_a_worker_endpoint_of_the_first_exits_1(run_dir):
    """Worker i of a daemon listens on base + ".i": each endpoint is locked, not only the first."""
    bind = f"ipc://{run_dir}/worker"
    first = cli("serve", "--model-dir", str(MODEL), "--workers", "2", "--bind", bind)
    try:
        wait_held(first, bind)
        second = cli("serve", "--model-dir", str(MODEL), "--bind", bind + ".1")
        _, err = second.communicate(timeout=60)
        assert second.returncode == 1 and f"{bind}.1 is in use by pid {first.pid}" in err
    finally:
        first.send_signal(signal.SIGINT)
        assert first.wait(30) == 0


def test_a_second_daemon_on_the_same_tcp_port_exits_1_naming_the_first(tmp_path):
    from tokworker.worker.security import generate_keys
    keys = generate_keys(tmp_path / "keys")
    bind = "tcp://127.0.0.1:47311"
    env = {**ENV, "XDG_RUNTIME_DIR": str(tmp_path)}          # the tcp lock lives in the runtime directory
    os.chmod(tmp_path, 0o700)
    first = cli("serve", "--model-dir", str(MODEL), "--bind", bind, "--curve-keys", str(keys), env=env)
    try:
        deadline = time.monotonic() + 60
        while not any(tmp_path.glob("tokworker/tcp-*.lock")):
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        second = cli("serve", "--model-dir", str(MODEL), "--bind", bind, "--curve-keys", str(keys), env=env)
        _, err = second.communicate(timeout=60)
        assert second.returncode == 1, err
        assert f"{bind} is in use by pid {first.pid}" in err and "Traceback" not in err
    finally:
        first.send_signal(signal.SIGINT)
        assert first.wait(30) == 0


def test_locks_are_all_or_nothing_and_name_their_holder(run_dir):
    ours = hold_endpoints([f"ipc://{run_dir}/a"])
    try:
        assert holder(f"ipc://{run_dir}/a") == os.getpid()
        assert lock_path(f"ipc://{run_dir}/a").read_text() == f"{os.getpid()}\n"
        child = subprocess.run([sys.executable, "-c", (
            "import sys\n"
            "from tokworker.worker.endpoint_lock import EndpointInUse, hold_endpoints, holder\n"
            f"try:\n    hold_endpoints(['ipc://{run_dir}/b', 'ipc://{run_dir}/a'])\n"
            "except EndpointInUse as exc:\n    print(exc.pid, exc.endpoint)\n"
            f"print(holder('ipc://{run_dir}/b'))\n")], env=ENV, capture_output=True, text=True, timeout=60)
        assert child.stdout.split("\n")[:2] == [f"{os.getpid()} ipc://{run_dir}/a", "None"], child.stderr
    finally:
        ours.release()
    assert holder(f"ipc://{run_dir}/a") is None and not list(run_dir.iterdir())


@pytest.mark.parametrize("where", ["run", "missing/deeper"])
def test_connecting_to_an_ipc_endpoint_with_no_socket_fails_at_once(tmp_path, run_dir, where):
    path = tmp_path / where / "worker"

    async def main():
        started = time.monotonic()
        with pytest.raises(NoSuchSocket) as failed:
            await TokenizerPool.connect(f"ipc://{path}", connect_timeout=30)
        return failed.value, time.monotonic() - started

    error, elapsed = uvloop.run(main())
    assert error.code == "worker_lost" and isinstance(error, WorkerLost)
    assert error.message == f"no such socket: {path} (no `tokworker serve` runs on ipc://{path})"
    assert elapsed < 1                                         # not the 30 s connect timeout


def test_a_client_waits_for_the_socket_of_a_daemon_that_holds_its_endpoint(run_dir):
    bind = f"ipc://{run_dir}/worker"
    locks = hold_endpoints([bind])                             # a daemon that is starting: no socket yet

    async def main():
        started = time.monotonic()
        with pytest.raises(NoSuchSocket) as failed:
            await TokenizerPool.connect(bind, connect_timeout=0.5)
        return failed.value, time.monotonic() - started

    try:
        error, elapsed = uvloop.run(main())
    finally:
        locks.release()
    assert f"the daemon holding {bind}, pid {os.getpid()}, has not bound it in 0.5 s" in error.message
    assert 0.5 <= elapsed < 5
