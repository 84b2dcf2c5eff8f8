"""Workers that cannot start: `tokworker serve` exits non-zero at once with the worker's own error instead
of restarting it forever, a spawned pool raises with that error, and typos in parser names or limits fail
before any process starts, listing what is known."""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import uvloop

from tokworker.frontend import PoolError, TokenizerPool
from tokworker.worker.launcher import Launcher, WorkerStartError
from tokworker.worker.options import WorkerOptions

pytestmark = pytest.mark.slow  # daemons and worker processes

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "tokworker" / "data" / "default"
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def serve(*args, timeout=60, command="serve"):
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "tokworker.cli", command, *args], env=ENV, capture_output=True,
                          text=True, timeout=timeout)
    return proc.returncode, proc.stderr, time.monotonic() - started


@pytest.fixture
def broken(tmp_path):
    """A copy of the default model whose files a test can break."""
    model = tmp_path / "model"
    shutil.copytree(MODEL, model)
    return model


def _run_dir(tmp_path) -> str:
    return f"ipc://{tmp_path / 'run'}/worker"


@pytest.mark.parametrize("file, content, cause", [
    ("tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": ", "tokenizer.json is not valid JSON"),
    ("tokenizer_config.json", "[1, 2", "tokenizer_config.json"),
])
def test_a_broken_model_dir_exits_1_with_the_loading_error(broken, tmp_path, file, content, cause):
    (broken / file).write_text(content)
    status, err, elapsed = serve("--model-dir", str(broken), "--workers", "2", "--bind", _run_dir(tmp_path))
    assert status == 1, err
    failure, = err.strip().splitlines()                         # found before any worker started: one line
    assert f"cannot serve {broken}: its tokenizer does not load: " in failure and cause in failure
    assert elapsed < 30


def test_a_port_in_use_exits_1_naming_it(tmp_path):
    from tokworker.worker.security import generate_keys
    keys = generate_keys(tmp_path / "keys")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        status, err, _ = serve("--model-dir", str(MODEL), "--bind", f"tcp://127.0.0.1:{port}",
                               "--curve-keys", str(keys))
    assert status == 1, err
    failure = next(line for line in err.splitlines() if "cannot serve" in line)
    assert "Address already in use" in failure and str(port) in failure
    assert "Traceback" not in err                               # the worker's one line, not its stack


@pytest.mark.parametrize("args, message", [
    (["--tool-call-parser", "hermess"], "unknown tool parser 'hermess'; known: "),
    (["--reasoning-parser", "qwen"], "unknown reasoning parser 'qwen'; known: "),
    (["--bind", "tcp://127.0.0.1:47999", "--curve-keys", "/nonexistent/keys"], "/nonexistent/keys: no such directory"),
    (["--workers", "0"], "--workers must be at least 1"),
])
def test_bad_options_fail_before_anything_starts(tmp_path, args, message):
    bind = [] if "--bind" in args else ["--bind", _run_dir(tmp_path)]
    status, err, elapsed = serve("--model-dir", str(MODEL), *bind, *args)
    assert status == 2, err
    assert message in err
    if "known: " in message:                                    # the list names every registered parser
        known = err.split("known: ", 1)[1].split()[0].rstrip(",")
        assert known and known[0].isalpha()
        assert (" hermes," in err) if "tool" in message else (" qwen3," in err)
    assert "Traceback" not in err and "ready" not in err        # no worker was started


def test_a_spawned_pool_raises_with_the_workers_own_error(broken):
    (broken / "tokenizer.json").write_text("not json")

    async def main():
        started = time.monotonic()
        with pytest.raises(PoolError) as failed:
            await TokenizerPool.spawn(broken, workers=2)
        return failed.value, time.monotonic() - started

    error, elapsed = uvloop.run(main())
    assert error.code == "worker_failed"
    assert "tokenizer.json is not valid JSON" in error.message and "before it was ready" in error.message
    assert elapsed < 30


def test_a_spawned_pool_refuses_a_parser_typo_before_starting():
    async def main():
        with pytest.raises(ValueError, match="unknown tool parser 'hermess'; known: .*hermes"):
            await TokenizerPool.spawn(MODEL, workers=1, tool_parser="hermess")

    uvloop.run(main())


def test_the_launcher_quotes_stderr_and_restarts_only_once_healthy_workers(tmp_path):
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    options = [WorkerOptions(model_dir=str(tmp_path / "missing"), bind=f"ipc://{run}/w", log_level="WARNING")]
    with pytest.raises(ValueError, match="does not exist"):
        Launcher(options)                                       # checked before a process starts
    (tmp_path / "empty").mkdir()
    options = [WorkerOptions(model_dir=str(tmp_path / "empty"), bind=f"ipc://{run}/w", log_level="WARNING")]
    launcher = Launcher(options).start()
    try:
        with pytest.raises(WorkerStartError) as failed:
            launcher.wait_ready(60)
        assert failed.value.status == 1 and "cannot run" in failed.value.stderr
        assert launcher.restarts == 0 and launcher.crash_looping
    finally:
        launcher.stop()
    good = Launcher([WorkerOptions(model_dir=str(MODEL), bind=f"ipc://{run}/g", log_level="WARNING")]).start()
    try:
        assert good.wait_ready(60) and good.failure is None
        os.kill(good.pids[0], 9)                                # healthy once: restarted
        deadline = time.monotonic() + 30
        while good.restarts == 0 or not good.all_ready:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert good.failure is None
    finally:
        good.stop()


@pytest.fixture
def costly(tmp_path):
    """A legal GGUF vocabulary that costs more than its 2.4 MB: 300,000 empty tokens (llama.cpp names each
    by its index, "[EMPTY_3]"...), about 1 s of CPU and 100 MB of memory to load. Issue 29's file of 10M
    took 209 s before `tokworker api` gave up with "no handshake in 60 s"."""
    def text(data: bytes) -> bytes:
        return struct.pack("<Q", len(data)) + data
    tokens = b"".join(map(text, (b"<unk>", b"<s>", b"</s>"))) + struct.pack("<Q", 0) * 300_000
    path = tmp_path / "costly.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 2) + text(b"tokenizer.ggml.model") + struct.pack("<I", 8)
                     + text(b"llama") + text(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 300_003) + tokens)
    return path


LOAD_BUDGETS = {
    "cpu": (["--load-cpu", "0.2"], "loading its tokenizer used more than its budget of 0.2 s of CPU time (--load-cpu 0.2)"),
    "memory": (["--load-memory-mb", "30"],
               "loading its tokenizer grew resident memory by more than 30 MB (--load-memory-mb 30)"),
}


@pytest.mark.parametrize("command", ["serve", "api"])
@pytest.mark.parametrize("budget", sorted(LOAD_BUDGETS))
def test_a_model_over_its_load_budget_is_refused_in_one_line(costly, tmp_path, command, budget):
    flags, reason = LOAD_BUDGETS[budget]
    where = ["--bind", _run_dir(tmp_path)] if command == "serve" else ["--port", "0"]
    status, err, elapsed = serve("--model-dir", str(costly), *where, *flags, command=command)
    assert status == 1, err
    failure, = err.strip().splitlines()                         # refused before any worker started
    assert failure.endswith(f"cannot serve {costly}: {reason}"), failure
    assert elapsed < 30


def test_a_spawned_worker_over_its_load_budget_names_it(costly):
    async def main():
        with pytest.raises(PoolError) as failed:
            await TokenizerPool.spawn(costly, workers=1, load_cpu_s=0.2)
        return failed.value

    error = uvloop.run(main())
    assert error.code == "worker_failed"
    assert f"cannot serve {costly}: loading its tokenizer used more than its budget of 0.2 s" in error.message
