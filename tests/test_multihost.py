"""Multi-host for real: three network namespaces joined by veth pairs stand in for three hosts. A daemon
runs in each of two of them, the pool in the third, over CURVE tcp on the veth addresses. Streams spread
over both daemons; then the first daemon is killed (kill -9, its whole process group): the pool's link to
it fails over to the other daemon and replays its streams there, so every stream ends with exactly the
in-process engine's text, nothing lost or repeated.

Needs root and iproute2 (`ip netns`); skips with the reason otherwise. Addresses are 10.77.0.0/24 inside
namespaces this test makes (and removes, even on failure)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.long]  # daemons in network namespaces, one killed

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "tokworker" / "data" / "default"
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
PORT = 7000
STREAMS = 8
TEXT = "Across hosts: every delta once, 日本語 and café and 🚀, through a daemon's death. " * 6


def ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)


class Hosts:
    """Namespaces pool, a, b; veth pool<->a on 10.77.0.0/30, pool<->b on 10.77.0.4/30."""

    def __init__(self):
        tag = uuid.uuid4().hex[:6]
        self.ns = {name: f"tw{tag}{name}" for name in ("pool", "a", "b")}
        self.address = {"a": "10.77.0.2", "b": "10.77.0.6"}
        self.made: list[str] = []
        try:
            for name in self.ns.values():
                self._run("netns", "add", name)
                self.made.append(name)
                self._run("-n", name, "link", "set", "lo", "up")
            for host, (near, far) in {"a": ("10.77.0.1", "10.77.0.2"), "b": ("10.77.0.5", "10.77.0.6")}.items():
                here, there = f"tw{tag}p{host}", f"tw{tag}{host}p"
                self._run("link", "add", here, "type", "veth", "peer", "name", there)
                self._run("link", "set", here, "netns", self.ns["pool"])
                self._run("link", "set", there, "netns", self.ns[host])
                for ns, dev, addr in ((self.ns["pool"], here, near), (self.ns[host], there, far)):
                    self._run("-n", ns, "addr", "add", f"{addr}/30", "dev", dev)
                    self._run("-n", ns, "link", "set", dev, "up")
        except Exception:
            self.remove()
            raise

    @staticmethod
    def _run(*args: str) -> None:
        result = ip(*args)
        if result.returncode != 0:
            raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")

    def command(self, host: str, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns[host], *argv]

    def remove(self) -> None:
        for name in self.made:
            ip("netns", "del", name)
        self.made = []


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed (apt-get install -y iproute2)"
    probe = f"twprobe{uuid.uuid4().hex[:6]}"
    made = ip("netns", "add", probe)
    if made.returncode != 0:
        return f"cannot make a network namespace here: {made.stderr.strip()}"
    ip("netns", "del", probe)
    return None


@pytest.fixture
def hosts():
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    made = Hosts()
    try:
        yield made
    finally:
        made.remove()


def test_streams_survive_a_daemon_killed_on_another_host(hosts, tmp_path):
    from tokworker.worker.security import generate_keys

    keys = generate_keys(tmp_path / "keys", ["api"])
    daemons = {}
    try:
        for host in ("a", "b"):
            daemons[host] = subprocess.Popen(
                hosts.command(host, sys.executable, "-m", "tokworker.cli", "serve", "--model-dir", str(MODEL),
                              "--bind", f"tcp://{hosts.address[host]}:{PORT}", "--curve-keys", str(keys),
                              "--log-level", "WARNING"),
                env=ENV, start_new_session=True, stderr=subprocess.PIPE, text=True)
        endpoints = [f"tcp://{hosts.address[h]}:{PORT}" for h in ("a", "b")]
        driver = subprocess.Popen(hosts.command("pool", sys.executable, __file__, json.dumps(endpoints), str(keys)),
                                  env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for line in driver.stdout:
            if line.strip() == "KILL":
                os.killpg(daemons["a"].pid, signal.SIGKILL)     # the daemon and its workers, at once
                daemons["a"].wait(10)
                driver.stdin.write("KILLED\n")
                driver.stdin.flush()
            elif line.startswith("{"):
                result = json.loads(line)
                break
        else:
            raise AssertionError(f"the pool's driver ended without a result (status {driver.wait(30)})")
        assert driver.wait(30) == 0
    finally:
        for proc in daemons.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert result["streams_on_a"] > 0 and result["streams_on_b"] > 0      # both daemons had streams
    assert result["moved"] >= 1                                        # the link to a now points at b
    assert result["mismatches"] == [], result
    assert result["finished"] == STREAMS


# ---------------------------------------------------------------- the pool's side, run inside its namespace

def drive(endpoints: list[str], keys: str) -> dict:
    import asyncio

    import uvloop

    from tokworker.frontend import TokenizerPool
    from tokworker.protocol.deltas import StreamParams
    from tokworker.protocol.endpoints import ClientKeys
    from tokworker.stream.state import TextStream
    from tokworker.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_dir(MODEL)
    ids = tokenizer.encode(TEXT) + tokenizer.eos_token_ids[:1]
    expected = "".join(d.content or "" for d in TextStream(tokenizer, StreamParams()).push(ids).deltas)

    async def main():
        pool = await TokenizerPool.connect(endpoints, curve_keys=ClientKeys.from_dir(keys, "api"),
                                           connect_timeout=3.0, request_timeout=60.0)
        try:
            streams = [await pool.open_stream(f"s{i}", StreamParams()) for i in range(STREAMS)]
            on = {ep: sum(s.link.endpoint == ep for s in streams) for ep in endpoints}
            texts = {s.id: [] for s in streams}
            finished = 0
            for step, at in enumerate(range(0, len(ids), 3)):
                if step == 4:
                    print("KILL", flush=True)
                    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
                updates = await pool.step({s.id: ids[at:at + 3] for s in streams})
                for stream_id, update in updates.items():
                    texts[stream_id].extend(d.content or "" for d in update.deltas)
                    finished += update.finish_reason == "stop"
            moved = sum(link.endpoint == endpoints[1] for link in pool.links) - 1
            return {"streams_on_a": on[endpoints[0]], "streams_on_b": on[endpoints[1]], "moved": moved,
                    "finished": finished,
                    "mismatches": [sid for sid, parts in texts.items() if "".join(parts) != expected]}
        finally:
            await pool.close()

    return uvloop.run(main())


if __name__ == "__main__":
    print(json.dumps(drive(json.loads(sys.argv[1]), sys.argv[2])), flush=True)
