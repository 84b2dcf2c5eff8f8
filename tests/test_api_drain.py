"""`tokworker api` keeps its word at shutdown: the first SIGTERM or SIGINT drains (new requests get 503,
open streams run until --drain-timeout, then end with finish_reason "abort" and their API's end), the
process exits within a second after that, and a second signal stops it at once. A real `tokworker api`
process with its worker processes and the replay engine, read by real HTTP clients.
Covers tokworker.api.run, tokworker.api.server (drain) and tokworker.api.serving (abort_all)."""

from __future__ import annotations

import json
import signal
import threading
import time

import pytest
import requests

from tests.daemons import tokworker
from tools.llama_server import free_port, wait_healthy

pytestmark = pytest.mark.slow  # the front door's processes

ENDLESS = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": True, "ignore_eos": True,
           "max_tokens": 3000}


def start(drain_timeout: float, **popen):
    port = free_port()
    proc = tokworker("api", "--served-model-name", "m", "--port", str(port), "--drain-timeout", str(drain_timeout),
                     "--replay-step-interval", "0.05", **popen)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url + "/health", proc, 120)
    return proc, url


def read_stream(url: str, body: dict, into: dict, started: threading.Event) -> None:
    """Read a streamed response to its end: its data lines and when it ended."""
    lines = []
    try:
        with requests.post(url + body.pop("path", "/v1/chat/completions"), json=body, stream=True,
                           timeout=60) as response:
            for line in response.iter_lines():
                if line:
                    lines.append(line.decode())
                    started.set()
    except requests.exceptions.ChunkedEncodingError:      # cut: a second signal stops the server at once
        lines.append("(cut)")
    into["lines"], into["ended"] = lines, time.monotonic()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_drain_ends_every_stream_with_abort_and_done_then_exits(sig):
    proc, url = start(drain_timeout=2)
    try:
        chat, messages, choices = {}, {}, {}
        threads = []
        for into, body in ((chat, dict(ENDLESS)),
                           (messages, {"path": "/v1/messages", "model": "m", "max_tokens": 3000, "stream": True,
                                       "messages": [{"role": "user", "content": "Hi"}]}),
                           (choices, {**ENDLESS, "n": 3, "stream_options": {"include_usage": True}})):
            started = threading.Event()
            thread = threading.Thread(target=read_stream, args=(url, body, into, started), daemon=True)
            thread.start()
            assert started.wait(30)
            threads.append(thread)
        whole = {}                                         # a whole response of three choices, in flight

        def ask_whole():
            response = requests.post(url + "/v1/chat/completions", json={**ENDLESS, "stream": False, "n": 3},
                                     timeout=60)
            whole["status"], whole["body"] = response.status_code, response.json()
        threads.append(threading.Thread(target=ask_whole, daemon=True))
        threads[-1].start()
        time.sleep(0.5)
        signalled = time.monotonic()
        proc.send_signal(sig)
        time.sleep(0.3)
        refused = requests.post(url + "/v1/chat/completions", json={**ENDLESS, "stream": False, "max_tokens": 4})
        assert refused.status_code == 503 and refused.json()["error"]["type"] == "server_error"
        for thread in threads:
            thread.join(30)
        assert proc.wait(10) == 0
        exited = time.monotonic()
        last = json.loads(chat["lines"][-2].removeprefix("data: "))
        assert last["choices"][0]["finish_reason"] == "abort" and chat["lines"][-1] == "data: [DONE]"
        assert 1.8 < chat["ended"] - signalled < 4, "the stream ran to the drain timeout, then ended"
        assert messages["lines"][-1] == 'data: {"type":"message_stop"}'
        # several choices (written by one worker): each ends with abort, then the one usage chunk and [DONE]
        assert sum('"finish_reason":"abort"' in line for line in choices["lines"]) == 3
        assert choices["lines"][-1] == "data: [DONE]"
        assert json.loads(choices["lines"][-2].removeprefix("data: "))["usage"]["completion_tokens"] > 3
        assert whole["status"] == 200 and [c["finish_reason"] for c in whole["body"]["choices"]] == ["abort"] * 3
        assert exited - signalled < 4.5, "the process exits within a second or two of the drain's end"
    finally:
        proc.kill()
        proc.wait()


def test_a_second_signal_stops_at_once():
    proc, url = start(drain_timeout=60)
    try:
        into, started = {}, threading.Event()
        thread = threading.Thread(target=read_stream, args=(url, dict(ENDLESS), into, started), daemon=True)
        thread.start()
        assert started.wait(30)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert proc.poll() is None                       # draining, for up to a minute
        signalled = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0
        assert time.monotonic() - signalled < 4
    finally:
        proc.kill()
        proc.wait()


def test_ctrl_c_to_the_whole_group_drains_without_restarting_workers():
    """A terminal's Ctrl-C reaches the API process and its workers alike: the workers ignore it (their owner
    drains), so the open stream ends with abort and [DONE] at the drain timeout, and no worker restarts."""
    import os

    proc, url = start(drain_timeout=2, start_new_session=True)
    try:
        into, started = {}, threading.Event()
        thread = threading.Thread(target=read_stream, args=(url, dict(ENDLESS), into, started), daemon=True)
        thread.start()
        assert started.wait(30)
        os.killpg(proc.pid, signal.SIGINT)
        thread.join(30)
        assert proc.wait(10) == 0
        assert json.loads(into["lines"][-2].removeprefix("data: "))["choices"][0]["finish_reason"] == "abort"
        assert into["lines"][-1] == "data: [DONE]"
        assert "restarting" not in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
