"""Spawns local worker processes, watches them, restarts the ones that die, stops them all at the end.

A worker tells the launcher it is ready (its socket is bound, its tokenizer loaded) by writing one byte
to a pipe the launcher passes it. A worker that exits on its own before that cannot start (a corrupt
tokenizer.json, a port in use, missing keys): restarting it would only repeat the failure, so the launcher
gives up and keeps the worker's own error (the last lines of its stderr) in `failure`, which the daemon
and a spawned pool report. A worker that was ready once and then died (kill -9, OOM, SIGXCPU from its CPU
backstop, a crash) is started again on the same endpoint, with an exponential backoff when it keeps dying
young. Clients notice a restart through their own connection (link.py); the launcher knows nothing about
requests.

The watcher thread sleeps in poll() on each child's pidfd and ready pipe, so an idle pool never wakes it:
it lives in the API process, where every wake-up would take the GIL from the event loop.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

from tokworker.worker.options import WorkerOptions, options_to_json, validate_options

log = logging.getLogger("tokworker.launcher")

POLL_S = 0.02                       # only where pidfd_open is missing (not Linux >= 5.3): poll the children
YOUNG_S = 2.0                       # a worker that dies younger than this is restarted with backoff
BACKOFF_S = (0.05, 5.0)
CRASH_LOOP = 3                      # this many failed starts in a row: a once-healthy slot gives up too
READY_FD_ENV = "TOKWORKER_READY_FD"
STDERR_TAIL_LINES = 20              # what a failure quotes of the worker's stderr, bounded in lines ...
STDERR_LINE_BYTES = 500             # ... and in bytes per line


class WorkerStartError(RuntimeError):
    """A worker exited before it was ready; `stderr` holds the last lines it wrote."""

    def __init__(self, index: int, bind: str, status: int, stderr: str):
        cause = next((line for line in reversed(stderr.splitlines()) if line.strip()), "(nothing on stderr)")
        how = f"signal {signal.Signals(-status).name}" if status < 0 else f"status {status}"
        super().__init__(f"worker {index} ({bind}) exited with {how} before it was ready: {cause.strip()}")
        self.index, self.bind, self.status, self.stderr = index, bind, status, stderr


def notify_ready() -> None:
    """In the worker, once it serves: tell the launcher that started it (if any)."""
    fd = os.environ.pop(READY_FD_ENV, None)
    if fd is not None:
        try:
            os.write(int(fd), b"R")
            os.close(int(fd))
        except OSError:
            pass                    # the launcher went away; the parent check in the loop handles that


def _child_env() -> dict:
    """The parent's environment, with this package importable even when it is not installed."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _pidfd(pid: int) -> int:
    """A descriptor that becomes readable when process `pid` exits; -1 where the OS has none (the watcher
    then polls every POLL_S)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return -1


def _relay(pipe, tail: deque) -> None:
    """Copy a worker's stderr to ours as it comes, keeping its last lines for a failure report."""
    with pipe:
        for line in iter(pipe.readline, b""):
            tail.append(line[-STDERR_LINE_BYTES:])
            try:
                os.write(2, line)
            except OSError:
                pass


class _Slot:
    """One worker's place: its current process and what the watcher knows about it."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.pidfd = -1             # readable once the process exits
        self.ready_fd = -1          # readable once it says it serves (or dies first: end of file)
        self.ready = False          # this process said it serves
        self.healthy_once = False   # some process in this slot did
        self.started = self.next_start = 0.0
        self.backoff = BACKOFF_S[0]
        self.early_deaths = 0
        self.tail: deque[bytes] = deque(maxlen=STDERR_TAIL_LINES)
        self.relay: threading.Thread | None = None

    def close(self, *fds: str) -> None:
        """Close the named descriptors ("ready_fd", "pidfd") that are open."""
        for name in fds:
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)


class Launcher:
    def __init__(self, options: list[WorkerOptions], python: str = sys.executable, inherit_fds: tuple[int, ...] = ()):
        for option in options:
            validate_options(option)                 # a typo fails here, before any process starts
        self.options = list(options)
        self.python = python
        self.inherit_fds = inherit_fds              # the daemon's endpoint locks: held while any worker lives
        self.restarts = 0
        self.exits: deque[tuple[int, int, int]] = deque(maxlen=256)   # (index, pid, exit status), latest last
        self.failure: WorkerStartError | None = None
        self._slots = [_Slot() for _ in self.options]
        self._stopping = threading.Event()
        self._wake_read, self._wake_write = os.pipe()   # stop() wakes the watcher out of its poll
        self._changed = threading.Condition()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._env = _child_env()

    @property
    def pids(self) -> list[int | None]:
        with self._lock:
            return [s.proc.pid if s.proc is not None and s.proc.poll() is None else None for s in self._slots]

    @property
    def crash_looping(self) -> bool:
        """True when the workers cannot start: waiting for them to answer is pointless (see `failure`)."""
        return self.failure is not None

    @property
    def all_ready(self) -> bool:
        return all(slot.ready for slot in self._slots)

    def start(self) -> "Launcher":
        with self._lock:
            for index in range(len(self.options)):
                self._spawn(index)
        self._thread = threading.Thread(target=self._watch, name="tokworker-launcher", daemon=True)
        self._thread.start()
        return self

    def wait_ready(self, timeout: float) -> bool:
        """Block until every worker is ready (True), one cannot start (raises its WorkerStartError) or
        `timeout` passes (False)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.failure is None and not self.all_ready:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        if self.failure is not None:
            raise self.failure
        return True

    def _spawn(self, index: int) -> None:
        slot = self._slots[index]
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        try:
            slot.proc = subprocess.Popen([self.python, "-m", "tokworker.worker", options_to_json(self.options[index])],
                                         stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, pass_fds=(write_fd, *self.inherit_fds),
                                         env={**self._env, READY_FD_ENV: str(write_fd)})
        except OSError:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        slot.ready_fd, slot.ready, slot.started = read_fd, False, time.monotonic()
        slot.pidfd = _pidfd(slot.proc.pid)
        slot.tail = deque(maxlen=STDERR_TAIL_LINES)
        slot.relay = threading.Thread(target=_relay, args=(slot.proc.stderr, slot.tail), daemon=True,
                                      name=f"tokworker-worker-{index}-stderr")
        slot.relay.start()

    def _poll_ready(self, slot: _Slot) -> None:
        try:
            said = os.read(slot.ready_fd, 1)
        except BlockingIOError:
            return
        slot.close("ready_fd")              # its byte, or the end of the pipe of a worker that died first
        if said:
            slot.ready = slot.healthy_once = True
            slot.early_deaths = 0
            with self._changed:
                self._changed.notify_all()

    def _watch(self) -> None:
        """Sleep in poll() until a child exits, says it is ready, a restart falls due or stop() is called:
        an idle pool wakes this thread (and the GIL) never."""
        while True:
            with self._lock:
                if self._stopping.is_set():
                    return
                now = time.monotonic()
                for index, slot in enumerate(self._slots):
                    self._tend(index, slot, now)
                    if self.failure is not None:
                        return
                poller = select.poll()
                for fd in (self._wake_read, *(fd for slot in self._slots for fd in (slot.pidfd, slot.ready_fd))):
                    if fd >= 0:
                        poller.register(fd, select.POLLIN)
                timeout = self._timeout(time.monotonic())
            poller.poll(None if timeout is None else max(0.0, timeout) * 1000)

    def _timeout(self, now: float) -> float | None:
        """Seconds until the watcher must look again by itself: the next restart due, or POLL_S for a
        child without a pidfd; None (no timeout) when every child is watched by its descriptors."""
        due = [slot.next_start - now for slot in self._slots if slot.proc is None]
        if any(slot.proc is not None and slot.pidfd < 0 for slot in self._slots):
            due.append(POLL_S)
        return min(due) if due else None

    def _tend(self, index: int, slot: _Slot, now: float) -> None:
        proc = slot.proc
        if proc is not None and not slot.ready and slot.ready_fd >= 0:
            self._poll_ready(slot)
        if proc is not None and proc.poll() is not None:
            self._died(index, slot, proc, now)
        if slot.proc is None and self.failure is None and now >= slot.next_start:
            try:
                self._spawn(index)
                self.restarts += 1
            except OSError as exc:
                log.error("cannot start worker %d: %s", index, exc)
                slot.next_start = now + BACKOFF_S[1]

    def _died(self, index: int, slot: _Slot, proc: subprocess.Popen, now: float) -> None:
        lived = now - slot.started
        slot.close("ready_fd", "pidfd")
        self.exits.append((index, proc.pid, proc.returncode))
        slot.proc = None
        if not slot.ready and proc.returncode > 0:
            # Its own exit before ready (an exception while loading or binding) repeats on every start. A
            # signal (kill -9 or the OOM killer while it loaded) says nothing about the next start.
            slot.relay.join(1.0)                     # its last lines, for the report
            slot.early_deaths += 1
            if not slot.healthy_once or slot.early_deaths >= CRASH_LOOP:
                stderr = b"".join(slot.tail).decode(errors="replace")
                self.failure = WorkerStartError(index, self.options[index].bind, proc.returncode, stderr)
                log.error("%s; not restarting it", self.failure)
                with self._changed:
                    self._changed.notify_all()
                return
        young = lived < YOUNG_S
        slot.backoff = min(slot.backoff * 2, BACKOFF_S[1]) if young else BACKOFF_S[0]
        slot.next_start = now + (slot.backoff if young else 0.0)
        log.warning("worker %d (pid %d, %s) exited with %s after %.1f s; restarting", index, proc.pid,
                    self.options[index].bind, proc.returncode, lived)

    def stop(self, grace_s: float = 5.0, drain: bool = False) -> None:
        """Stop every worker: SIGQUIT (at once; a worker ignores SIGINT, which a terminal sends the whole
        group) or, with `drain`, SIGTERM (their open streams finish first);
        wait up to grace_s for clean exits, then SIGKILL what is left."""
        self._stopping.set()
        if self._thread is not None and self._wake_write >= 0:
            os.write(self._wake_write, b"s")
            self._thread.join()
        with self._lock:
            procs = [s.proc for s in self._slots if s.proc is not None]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM if drain else signal.SIGQUIT)
        deadline = time.monotonic() + grace_s
        for proc in procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("worker pid %d did not exit in %.1f s; killing it", proc.pid, grace_s)
                proc.kill()
                proc.wait()
        for slot in self._slots:
            slot.close("ready_fd", "pidfd")
            if slot.relay is not None:
                slot.relay.join(1.0)
        if self._wake_write >= 0:
            os.close(self._wake_read)
            os.close(self._wake_write)
            self._wake_read = self._wake_write = -1
