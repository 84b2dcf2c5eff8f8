"""Spawns local worker processes, watches them, restarts the ones that die, stops them all at the end.

A watcher thread polls the children; a dead one (kill -9, OOM, SIGXCPU from its CPU backstop, a crash)
is started again on the same endpoint, with an exponential backoff when it keeps dying young (a broken
model directory must not become a fork loop). Clients notice the restart through their own connection
(link.py) and rebuild what they had there; the launcher knows nothing about requests.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

from tokworker.worker.options import WorkerOptions, options_to_json

log = logging.getLogger("tokworker.launcher")

POLL_S = 0.02
YOUNG_S = 2.0                       # a worker that dies younger than this is restarted with backoff
BACKOFF_S = (0.05, 5.0)
CRASH_LOOP = 3                      # this many young deaths in a row: the workers cannot start at all


def _child_env() -> dict:
    """The parent's environment, with this package importable even when it is not installed."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


class Launcher:
    def __init__(self, options: list[WorkerOptions], python: str = sys.executable):
        self.options = list(options)
        self.python = python
        self.restarts = 0
        self.exits: deque[tuple[int, int, int]] = deque(maxlen=256)   # (index, pid, exit status), latest last
        self._procs: list[subprocess.Popen | None] = [None] * len(self.options)
        self._started = [0.0] * len(self.options)
        self._next_start = [0.0] * len(self.options)
        self._backoff = [BACKOFF_S[0]] * len(self.options)
        self._young_deaths = [0] * len(self.options)
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._env = _child_env()

    @property
    def pids(self) -> list[int | None]:
        with self._lock:
            return [p.pid if p is not None and p.poll() is None else None for p in self._procs]

    @property
    def crash_looping(self) -> bool:
        """True when some worker died young CRASH_LOOP times in a row (a bad model directory, a broken
        install): waiting for it to answer is pointless, its stderr says why."""
        return max(self._young_deaths) >= CRASH_LOOP

    def start(self) -> "Launcher":
        with self._lock:
            for index in range(len(self.options)):
                self._spawn(index)
        self._thread = threading.Thread(target=self._watch, name="tokworker-launcher", daemon=True)
        self._thread.start()
        return self

    def _spawn(self, index: int) -> None:
        self._procs[index] = subprocess.Popen([self.python, "-m", "tokworker.worker", options_to_json(self.options[index])],
                                              stdin=subprocess.DEVNULL, env=self._env)
        self._started[index] = time.monotonic()

    def _watch(self) -> None:
        while not self._stopping.wait(POLL_S):
            with self._lock:
                if self._stopping.is_set():
                    return
                now = time.monotonic()
                for index, proc in enumerate(self._procs):
                    if proc is not None and proc.poll() is not None:
                        lived = now - self._started[index]
                        self._young_deaths[index] = self._young_deaths[index] + 1 if lived < YOUNG_S else 0
                        self._backoff[index] = (min(self._backoff[index] * 2, BACKOFF_S[1]) if lived < YOUNG_S
                                                else BACKOFF_S[0])
                        self._next_start[index] = now + (self._backoff[index] if lived < YOUNG_S else 0.0)
                        log.warning("worker %d (pid %d, %s) exited with %s after %.1f s; restarting", index, proc.pid,
                                    self.options[index].bind, proc.returncode, lived)
                        self.exits.append((index, proc.pid, proc.returncode))
                        self._procs[index] = None
                    if self._procs[index] is None and now >= self._next_start[index]:
                        try:
                            self._spawn(index)
                            self.restarts += 1
                        except OSError as exc:
                            log.error("cannot start worker %d: %s", index, exc)
                            self._next_start[index] = now + BACKOFF_S[1]

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM every worker, wait up to grace_s for clean exits, then SIGKILL what is left."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            procs = [p for p in self._procs if p is not None]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("worker pid %d ignored SIGTERM; killing it", proc.pid)
                proc.kill()
                proc.wait()
