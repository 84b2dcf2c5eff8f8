"""The daemon's lifecycle as an operator meets it, with real `tokworker serve` processes: one daemon per
endpoint (a second one exits 1 at once naming the first one's pid, which keeps serving); a client finds
out at once that an ipc endpoint has no socket; what would fail every request (no chat template, one that
does not compile, a parser that does not fit the vocabulary) is refused at start in one line, by `serve`,
`api` and `demo` alike."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import uvloop

from tests.daemons import ENV, REPO, tokworker, wait_held
from tokworker.frontend import NoSuchSocket, TokenizerPool, WorkerLost
from tokworker.tokenizer import Tokenizer
from tokworker.worker.endpoint_lock import hold_endpoints, holder, lock_path
from tokworker.worker.preflight import UnservableModel, check_model
from tests.realdata import vocabulary

pytestmark = pytest.mark.slow  # daemons

MODEL = REPO / "tokworker" / "data" / "default"


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
    first = tokworker("serve", "--model-dir", str(MODEL), "--workers", "2", "--bind", bind)
    try:
        assert wait_held(first, bind) == first.pid
        assert encode_on(bind, "before ü") == Tokenizer.from_dir(MODEL).encode("before ü")
        started = time.monotonic()
        second = tokworker("serve", "--model-dir", str(MODEL), "--bind", bind)
        _, err = second.communicate(timeout=60)
        elapsed = time.monotonic() - started
        assert second.returncode == 1, err
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert f"{bind} is in use by pid {first.pid}" in lines[0]
        assert elapsed < 10                                   # at once: no worker was started
        status = tokworker("status", "--endpoint", bind)
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
    first = tokworker("serve", "--model-dir", str(MODEL), "--workers", "2", "--bind", bind)
    try:
        wait_held(first, bind)
        second = tokworker("serve", "--model-dir", str(MODEL), "--bind", bind + ".1")
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
    first = tokworker("serve", "--model-dir", str(MODEL), "--bind", bind, "--curve-keys", str(keys), env=env)
    try:
        deadline = time.monotonic() + 60
        while not any(tmp_path.glob("tokworker/tcp-*.lock")):
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        second = tokworker("serve", "--model-dir", str(MODEL), "--bind", bind, "--curve-keys", str(keys), env=env)
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
    assert elapsed < 5                                         # not the 30 s connect timeout


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


@pytest.fixture
def bare(tmp_path):
    """The bundled tokenizer without its chat template: what a base model's folder looks like."""
    folder = tmp_path / "bare"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(MODEL / name, folder / name)
    return folder


def refused(*args) -> str:
    """Run a command that must refuse at start: exit status 1, one line on stderr, no traceback."""
    started = time.monotonic()
    proc = tokworker(*args)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert time.monotonic() - started < 30                    # no worker started, nothing waited for
    return lines[0]


def test_serve_refuses_a_model_without_a_chat_template_in_one_line(bare, run_dir):
    line = refused("serve", "--model-dir", str(bare), "--bind", f"ipc://{run_dir}/w")
    assert line.endswith(f"cannot serve {bare}: it ships no chat template (no chat_template in "
                         "tokenizer_config.json, no chat_template.jinja): give one with --chat-template FILE, or "
                         "--chat-template chatml")
    assert not list(run_dir.iterdir())                        # the endpoint's lock was let go


def test_serve_refuses_a_template_that_does_not_compile_and_a_parser_that_does_not_fit(tmp_path, run_dir):
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for message in messages %}{{ message.content }}")
    line = refused("serve", "--model-dir", str(MODEL), "--bind", f"ipc://{run_dir}/w", "--chat-template", str(broken))
    assert f"cannot serve {MODEL}: --chat-template {broken} does not compile: " in line
    line = refused("serve", "--model-dir", str(MODEL), "--bind", f"ipc://{run_dir}/w", "--tool-call-parser", "kimi_k2")
    assert line.endswith("--tool-call-parser kimi_k2 does not fit its vocabulary: none of its control tokens "
                         "<|tool_calls_section_begin|>, <|tool_call_begin|>, <|tool_calls_section_end|>, "
                         "<|tool_call_argument_begin|>, <|tool_call_end|> is in it")


def test_the_traceback_of_a_refusal_shows_at_log_level_debug(bare, run_dir):
    proc = tokworker("serve", "--model-dir", str(bare), "--bind", f"ipc://{run_dir}/w", "--log-level", "DEBUG")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "Traceback" in err
    assert "it ships no chat template" in err


def test_api_and_demo_refuse_a_model_without_a_chat_template_in_one_line(bare):
    assert refused("api", "--model-dir", str(bare), "--port", "0") == \
        f"tokworker api: cannot serve {bare}: it ships no chat template (no chat_template in tokenizer_config.json, " \
        "no chat_template.jinja): give one with --chat-template FILE, or --chat-template chatml"
    assert refused("demo", "--model-dir", str(bare)).startswith(f"tokworker demo: cannot serve {bare}: it ships no "
                                                                "chat template")
    assert refused("api", "--tool-call-parser", "hermess", "--port", "0").startswith(
        f"tokworker api: cannot serve {MODEL}: unknown tool parser 'hermess'; known: apertus, ")


def test_demo_takes_the_chat_template_its_refusal_names(bare):
    proc = tokworker("demo", "--model-dir", str(bare), "--chat-template", "chatml")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out.splitlines()[-1] == '=== tool call: get_weather({"city": "Paris", "unit": "celsius"})'


def test_parsers_fit_the_vocabularies_they_were_made_for():
    """On real vocabularies: a format whose openers are all control tokens needs one of them; a format that
    can open on text fits any vocabulary."""
    def verdict(model, **parsers):
        try:
            check_model(str(model), "chatml", **parsers)
        except UnservableModel as refusal:
            return refusal.message.split(": ", 1)[1]
        return "fits"

    qwen, tekken = vocabulary("qwen3_dir"), vocabulary("mistral_tekken")
    for parser in ("hermes", "qwen3_coder", "pythonic", "llama3_json", "openai"):
        assert verdict(qwen, tool_parser=parser) == "fits"
    assert verdict(qwen, reasoning_parser="qwen3") == "fits"
    assert verdict(qwen, tool_parser="mistral") == ("--tool-call-parser mistral does not fit its vocabulary: its "
                                                    "control token [TOOL_CALLS] is not in it")
    assert verdict(tekken, tool_parser="mistral") == "fits"    # [TOOL_CALLS] without v11's [ARGS]: still mistral
    assert verdict(tekken, reasoning_parser="mistral") == ("--reasoning-parser mistral does not fit its vocabulary: "
                                                           "its control token [/THINK] is not in it")   # not Magistral
    assert verdict(qwen, reasoning_parser="gemma4").startswith("--reasoning-parser gemma4 does not fit")


def test_an_idle_launcher_never_wakes_and_still_restarts_a_killed_worker(run_dir):
    """The watcher sleeps on the children's pidfds and ready pipes: over an idle second its thread is not
    scheduled at all (it used to wake 50 times a second), and a kill -9 still wakes it to restart."""
    import threading
    from tokworker.worker.launcher import Launcher
    from tokworker.worker.options import WorkerOptions

    def slices(thread) -> int:
        return int(Path(f"/proc/self/task/{thread.native_id}/schedstat").read_text().split()[2])

    launcher = Launcher([WorkerOptions(model_dir=str(MODEL), bind=f"ipc://{run_dir}/w", log_level="WARNING")]).start()
    try:
        assert launcher.wait_ready(60)
        watcher = next(t for t in threading.enumerate() if t.name == "tokworker-launcher")
        time.sleep(0.5)                 # the watcher finishes the turn that saw the worker ready
        before = slices(watcher)
        time.sleep(1.0)
        assert slices(watcher) - before == 0
        os.kill(launcher.pids[0], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while launcher.restarts == 0 or not launcher.all_ready:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert launcher.exits[-1][2] == -signal.SIGKILL and launcher.failure is None
    finally:
        launcher.stop()
