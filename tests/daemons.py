"""What tests that start a `tokworker serve` share: the command as a process, and waiting until it holds its
endpoint. A client connecting to an ipc endpoint waits for its socket only while a daemon holds the
endpoint; before the daemon process has taken it, a client is told at once that there is no such socket."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tokworker.worker.endpoint_lock import holder

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def tokworker(*args, env=ENV, **kwargs) -> subprocess.Popen:
    """`tokworker ARGS` as a process, its output read as text."""
    return subprocess.Popen([sys.executable, "-m", "tokworker.cli", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def wait_held(proc: subprocess.Popen, bind: str, timeout: float = 60) -> int:
    """The pid holding `bind` once `proc` (a starting daemon) took it and wrote its pid (it locks the file
    first: 0 in between); fails if `proc` exits first."""
    deadline = time.monotonic() + timeout
    while not (pid := holder(bind)):
        assert proc.poll() is None, f"the daemon exited with {proc.returncode}"
        assert time.monotonic() < deadline, f"{bind} not taken in {timeout} s"
        time.sleep(0.02)
    return pid
