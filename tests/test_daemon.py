"""The `tokworker` command as a user runs it: `serve` as a real subprocess (clients find all its workers,
SIGTERM stops everything cleanly), the endpoint rules it enforces, `keys`, and `demo`.
Covers tokworker.worker.daemon and tokworker.demo."""

from __future__ import annotations

import json
import os
import signal
import stat
import tempfile
import time
from pathlib import Path

import pytest
import uvloop

from tests.daemons import REPO, tokworker, wait_held
from tokworker.frontend import TokenizerPool
from tokworker.tokenizer import Tokenizer
from tokworker.protocol.endpoints import InsecureEndpoint
from tokworker.worker.security import check_bind, ensure_private_dir

pytestmark = pytest.mark.slow  # daemons

MODEL = REPO / "tokworker" / "data" / "default"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_serve_finds_all_workers_and_stops_cleanly_on_sigterm():
    run_dir = Path(tempfile.mkdtemp(prefix="tokworker-daemon-"))
    base = f"ipc://{run_dir}/sock"
    daemon = tokworker("serve", "--model-dir", str(MODEL), "--workers", "3", "--bind", base)
    wait_held(daemon, base)

    async def use():
        async with await TokenizerPool.connect(base, connect_timeout=30) as pool:
            assert [link.endpoint for link in pool.links] == [base, base + ".1", base + ".2"]
            texts = [f"text number {i} ü" for i in range(30)]
            assert await pool.encode(texts) == Tokenizer.from_dir(MODEL).encode_batch(texts)
            for path in (run_dir / "sock", run_dir / "sock.1", run_dir / "sock.2"):
                assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0        # socket files: owner only
            return [link.info.pid for link in pool.links]

    try:
        pids = uvloop.run(use())
    finally:
        daemon.send_signal(signal.SIGTERM)
        status = daemon.wait(20)
    log = daemon.stderr.read()
    assert status == 0, log
    assert "stopped cleanly" in log
    assert not any(alive(pid) for pid in pids)
    assert not list(run_dir.iterdir())                                          # sockets removed on the way out


@pytest.mark.parametrize("bind, message", [
    ("tcp://0.0.0.0:{port}", "without CurveZMQ keys"),
    ("tcp://[::]:{port}", "without CurveZMQ keys"),
    ("ipc:///tmp/tokworker-test.sock", "only you can open"),
    ("inproc://x", "must be ipc:// or tcp://"),
])
def test_serve_refuses_endpoints_others_could_reach(bind, message):
    daemon = tokworker("serve", "--model-dir", str(MODEL), "--bind", bind.format(port=47123))
    _, err = daemon.communicate(timeout=30)
    assert daemon.returncode == 2
    assert message in err


def test_ipc_directories_must_be_private(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    with pytest.raises(InsecureEndpoint):
        check_bind(f"ipc://{shared}/sock", None)
    fresh = tmp_path / "fresh" / "deeper"
    check_bind(f"ipc://{fresh}/sock", None)                                    # created 0700
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700
    os.chmod(shared, 0o700)
    ensure_private_dir(shared)
    with pytest.raises(InsecureEndpoint):
        check_bind("ipc://relative/sock", None)


def test_a_spawned_pool_lives_in_a_private_directory():
    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1) as pool:
            assert stat.S_IMODE(Path(pool.run_dir).stat().st_mode) == 0o700
            return pool.run_dir

    run_dir = uvloop.run(main())
    assert not Path(run_dir).exists()                                           # removed by close()


def test_keys_command(tmp_path):
    proc = tokworker("keys", str(tmp_path / "k"), "--client", "api1", "--client", "api2")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    names = sorted(p.name for p in (tmp_path / "k").iterdir())
    assert names == ["api1.key", "api1.key_secret", "api2.key", "api2.key_secret", "authorized_clients",
                     "server.key", "server.key_secret"]


def test_demo_serves_http_says_the_reply_is_scripted_and_reads_it_with_the_openai_sdk():
    started = time.monotonic()
    proc = tokworker("demo")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "SCRIPTED, not generated" in out and "engine: replay" in out
    count = next(line for line in out.splitlines() if line.endswith("prompt tokens ==="))
    assert int(count.split()[-4]) > 100
    chunks = [json.loads(line) for line in out.splitlines() if line.startswith('{"id": ')]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    deltas = [choice["delta"] for c in chunks for choice in c["choices"]]
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    assert reasoning.startswith("The user wants the current weather in Paris")
    calls = [call for d in deltas for call in d.get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "get_weather" and calls[0]["id"].startswith("call_")
    arguments = "".join(call["function"].get("arguments", "") for call in calls)
    assert json.loads(arguments) == {"city": "Paris", "unit": "celsius"}
    assert [choice["finish_reason"] for choice in chunks[-1]["choices"]] == ["tool_calls"]
    assert "data: [DONE]" in out.splitlines()
    assert out.splitlines()[-1] == '=== tool call: get_weather({"city": "Paris", "unit": "celsius"})'
    assert time.monotonic() - started < 120
