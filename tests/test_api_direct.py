"""Direct streaming (`--direct-streaming`) where it differs from forwarded bodies: the worker holds the client's
socket, so a client that stops reading is cut by the worker (past --sink-bytes) and its engine request is
aborted; a worker killed mid-stream ends its direct stream (the client sees the body cut short, no [DONE])
and the next request is served by its replacement; n > 1 falls back to forwarded bodies. The SDK suite
(test_api_sdk.py) runs every route in both modes."""

from __future__ import annotations

import json
import os
import signal
import socket
import time

import openai
import pytest
import requests

from api_server import running
from tokworker.protocol.endpoints import sinks_path
from tokworker.api.options import ApiOptions

pytestmark = pytest.mark.slow  # the front door on worker processes

MODEL = "tokworker-test"
LONG = [{"role": "user", "content": "scenario:long"}]


def options() -> ApiOptions:
    return ApiOptions(served_model_name=[MODEL], direct_streaming=True)


def test_a_client_that_stops_reading_is_cut_by_the_worker():
    with running(step_interval=0.001, options=options(), workers=1, sink_bytes=16384) as server:
        body = json.dumps({"model": MODEL, "stream": True, "max_tokens": 4000, "ignore_eos": True,
                           "messages": LONG}).encode()
        with socket.create_connection(("127.0.0.1", server.port)) as stalled:
            stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            stalled.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            server.settled(30)                   # it never reads: the worker gives up on it
            assert server.api.serving.exchanges == 0
        reply = requests.post(server.url + "/v1/chat/completions", json={
            "model": MODEL, "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}).json()
        assert reply["usage"]["completion_tokens"] == 3


def test_a_killed_worker_ends_its_direct_stream_and_the_next_request_is_served():
    with running(step_interval=0.02, options=options(), workers=1) as server:
        with requests.post(server.url + "/v1/chat/completions", stream=True, timeout=30, json={
                "model": MODEL, "stream": True, "messages": LONG}) as response:
            assert response.headers["Connection"] == "close"
            lines = response.iter_lines()
            for _ in range(4):
                next(lines)
            os.kill(server.pool.links[0].info.pid, signal.SIGKILL)
            rest = []
            with pytest.raises(requests.exceptions.ChunkedEncodingError):
                for line in lines:
                    rest.append(line)
            assert b"data: [DONE]" not in rest
        server.settled(30)
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        deadline = time.monotonic() + 60
        while True:                                      # the launcher restarts the worker with backoff
            try:
                chunks = list(client.chat.completions.create(model=MODEL, stream=True, max_tokens=4, messages=[
                    {"role": "user", "content": "hi"}]))
                break
            except openai.APIError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert chunks[-1].choices[0].finish_reason == "length"


def test_several_choices_are_forwarded():
    with running(options=options(), workers=1) as server:
        with requests.post(server.url + "/v1/chat/completions", stream=True, timeout=30, json={
                "model": MODEL, "stream": True, "n": 2, "max_tokens": 3,
                "messages": [{"role": "user", "content": "hi"}]}) as response:
            assert response.headers.get("Connection") != "close"
            events = [line for line in response.iter_lines() if line.startswith(b"data: ")]
        assert events[-1] == b"data: [DONE]"
        assert {json.loads(e[6:])["choices"][0]["index"] for e in events[:-1]} == {0, 1}


def test_a_worker_that_cannot_take_the_socket_gets_its_response_forwarded():
    """The worker's hand-over socket is gone (unlinked): the API process cannot hand the client's socket over,
    so it forwards the response itself, whole and well-formed, and counts it (pool.handover_fallbacks)."""
    with running(options=options(), workers=1) as server:
        os.unlink(sinks_path(server.pool.links[0].endpoint))
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        ask = {"model": MODEL, "max_tokens": 12, "messages": [{"role": "user", "content": "hi"}]}
        chunks = list(client.chat.completions.create(stream=True, **ask))
        whole = client.chat.completions.create(**ask)
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole.choices[0].message.content
        assert chunks[0].choices[0].delta.role == "assistant"
        assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason == "length"
        assert server.pool.handover_fallbacks == 1
