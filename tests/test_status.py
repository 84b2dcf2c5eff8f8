"""The operator's surface on a real daemon: `tokworker status` (table, JSON, Prometheus) reports every
worker's health and counters over the clients' own endpoint, request errors are logged with their request
ids (bounded), every WorkerOptions setting is a `serve` flag that takes effect, and vLLM's flag names and
`--version` work.
Covers tokworker.status."""

from __future__ import annotations

import json
import re
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import uvloop

from tests.daemons import wait_held
from tokworker.cli import _flag, _parser
from tokworker.frontend import InvalidRequest, TokenizerPool
from tokworker.protocol.messages import ErrorCode
from tokworker.worker.errorlog import RequestErrors
from tokworker.worker.options import WorkerOptions, settings

pytestmark = pytest.mark.slow  # a daemon

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "tokworker" / "data" / "default"
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def cli(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "tokworker.cli", *args], env=ENV, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def daemon():
    run_dir = Path(tempfile.mkdtemp(prefix="tokworker-status-"))
    bind = f"ipc://{run_dir}/worker"
    proc = subprocess.Popen([sys.executable, "-m", "tokworker.cli", "serve", "--model-dir", str(MODEL), "--workers",
                             "2", "--bind", bind, "--max-text-chars", "40", "--drain-timeout", "3"],
                            env=ENV, stderr=subprocess.PIPE, text=True)
    wait_held(proc, bind)
    yield proc, bind
    if proc.poll() is None:
        proc.kill()
    proc.wait(20)


def test_status_reports_every_worker_and_request_errors_are_logged(daemon):
    proc, bind = daemon
    sessions = []

    async def use():
        pool = await TokenizerPool.connect(bind, connect_timeout=30)
        await pool.encode(["short", "texts"])
        with pytest.raises(InvalidRequest) as refused:               # --max-text-chars 40 took effect
            await pool.encode("x" * 41)
        assert refused.value.code == ErrorCode.TOO_LARGE
        await pool.open_stream("open-one")
        sessions.extend(link.session for link in pool.links)
        return pool

    async def main():
        pool = await use()
        try:
            result = cli("status", "--endpoint", bind)
            assert result.returncode == 0, result.stderr
            rows = [json.loads(line) for line in cli("status", "--endpoint", bind, "--json").stdout.splitlines()]
            metrics = cli("status", "--endpoint", bind, "--prometheus").stdout
            proc.send_signal(signal.SIGTERM)                      # a stream is open: the workers drain
            deadline = time.monotonic() + 15
            draining = cli("status", "--endpoint", bind)
            while "draining" not in draining.stdout and time.monotonic() < deadline:
                time.sleep(0.2)
                draining = cli("status", "--endpoint", bind)
            return result.stdout, rows, metrics, draining
        finally:
            await pool.close()

    table, rows, metrics, draining = uvloop.run(main())
    assert [row["index"] for row in rows] == [0, 1] and all(row["up"] and not row["draining"] for row in rows)
    assert {row["endpoint"] for row in rows} == {bind, bind + ".1"}
    assert sum(row["streams_open"] for row in rows) == 1
    assert sum(row["errors_by_code"].get(ErrorCode.TOO_LARGE, 0) for row in rows) == 1
    # two encodes and an open: neither the pool's handshakes nor the status polls before these are counted
    assert sum(row["requests"] for row in rows) == 3 and all(row["dropped"] == 0 for row in rows)
    assert len({row["pid"] for row in rows}) == 2 and len({row["model_fingerprint"] for row in rows}) == 1
    assert "serving" in table and bind in table and "errors: too_large 1" in table
    assert "# TYPE tokworker_requests_total counter" in metrics and "# TYPE tokworker_dropped_total counter" in metrics
    assert f'tokworker_dropped_total{{worker="0",endpoint="{bind}"}} 0' in metrics
    assert f'tokworker_up{{worker="1",endpoint="{bind}.1"}} 1' in metrics
    assert sum(int(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith('tokworker_errors_total{') and 'code="too_large"' in line) == 1
    assert sum(int(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith("tokworker_streams_open{")) == 1
    assert draining.returncode == 1 and "draining" in draining.stdout
    assert proc.wait(30) == 0
    log = proc.stderr.read()
    line = next(line for line in log.splitlines() if "failed: too_large" in line)
    assert re.search(r"request \d+ from connection [0-9a-f]+ failed: too_large: 41 characters", line)  # id, reason
    assert sessions and not any(session in log for session in sessions)    # a session's name proves ownership


def test_status_of_nothing_says_down_and_exits_1(tmp_path):
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    started = time.monotonic()
    result = cli("status", "--endpoint", f"ipc://{run}/worker", "--timeout", "30")
    assert result.returncode == 1 and "down" in result.stdout
    assert f"no such socket: {run}/worker" in result.stdout and time.monotonic() - started < 15   # not the timeout
    result = cli("status", "--endpoint", "127.0.0.1:7000")
    assert result.returncode == 2 and "has no scheme" in result.stderr


def test_error_logs_are_rate_limited_and_bounded():
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger = logging.getLogger("tokworker.test.errors")
    logger.addHandler(Keep())
    logger.setLevel(logging.INFO)
    errors = RequestErrors(logger, per_second=0.0001, burst=3)
    for rid in range(10):
        errors.record(rid, ErrorCode.INVALID, "y" * 10_000, "session-a")
    assert errors.by_code == {ErrorCode.INVALID: 10}
    assert len(records) == 3 and all(len(r) < 400 for r in records)
    assert records[0].startswith("request 0 from session-a failed: invalid: yyy")
    errors._tokens = 1                                              # time passed: the next line says what was held
    errors.record(10, ErrorCode.INTERNAL, "boom", "session-b")
    assert records[-1].endswith("boom (7 more error(s) not logged)")


def test_every_worker_setting_is_a_serve_flag():
    serve = _parser()._subparsers._group_actions[0].choices["serve"]
    flags = serve._option_string_actions
    fields = {field for field, *_ in settings()}
    internal = {"model_dir", "bind", "index", "pool_size", "curve_keys", "log_level"}
    assert fields == set(WorkerOptions.__struct_fields__) - internal
    for field in fields:
        assert flags[_flag(field)].dest == field
    args = serve.parse_args(["--model-dir", "m", "--render-timeout", "30", "--max-text-chars", "9",
                             "--tool-call-parser", "hermes", "--enable-auto-tool-choice", "--drain-timeout", "3"])
    assert (args.budget_s, args.max_text_chars, args.tool_parser, args.drain_timeout_s) == (30.0, 9, "hermes", 3.0)
    defaults = serve.parse_args(["--model-dir", "m"])
    assert {f: getattr(defaults, f) for f in fields} == {f: getattr(WorkerOptions("m", "b"), f) for f in fields}


def test_version_and_bad_limits(tmp_path):
    result = cli("--version")
    assert result.returncode == 0 and result.stdout.startswith("tokworker ")
    result = cli("serve", "--model-dir", str(MODEL), "--bind", f"ipc://{tmp_path}/run/w", "--budget", "0")
    assert result.returncode == 2 and "budget_s: Expected float > 0.0, got 0.0" in result.stderr
