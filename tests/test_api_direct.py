"""Direct streaming (`--direct-streaming`) where it differs from forwarded bodies: the worker holds the client's
socket, so a client that stops reading is cut by the worker (past --sink-bytes) and its engine request is
aborted; a worker killed mid-stream ends its direct streams with the format's error event (each SDK reads
the API's error), and the next request is served by its replacement, while another worker's responses go
on; the choices of
an n > 1 response share one worker, which writes their events and the tail to the one socket; a whole
response's worker writes the whole HTTP response, and when it dies first the response is replayed and
forwarded.
The SDK suite (test_api_sdk.py) runs every route in both modes. (Covers tokworker.api.sent_bytes.)"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import threading
import time

import anthropic
import openai
import pytest
import requests
from aiohttp.http import SERVER_SOFTWARE

from api_server import TOOLS, running, script
from tokworker.engines.replay import ReplayEngine
from tokworker.protocol.endpoints import sinks_path
from tokworker.api.options import ApiOptions

pytestmark = pytest.mark.slow  # the front door on worker processes

MODEL = "tokworker-test"
LONG = [{"role": "user", "content": "scenario:long"}]


def options() -> ApiOptions:
    return ApiOptions(served_model_name=[MODEL], direct_streaming=True)


def test_a_killed_worker_leaves_its_whole_responses_to_its_replacement():
    """A whole response's worker writes nothing until its end: killed before that, its streams are rebuilt on
    the restarted worker as forwarded ones, and the API process writes the whole response, nothing lost."""
    with running(step_interval=0.02, options=options(), workers=1) as server:
        answer = {}

        def ask():
            answer["response"] = requests.post(server.url + "/v1/chat/completions", timeout=60, json={
                "model": MODEL, "n": 3, "max_tokens": 300, "messages": LONG})
        thread = threading.Thread(target=ask)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.api.serving.choices or server.api.engine.running() < 3:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        time.sleep(0.2)
        os.kill(server.pool.links[0].info.pid, signal.SIGKILL)
        thread.join(60)
        response = answer["response"]
        assert response.status_code == 200 and response.headers.get("Connection") != "close"
        choices = response.json()["choices"]
        assert [c["finish_reason"] for c in choices] == ["length"] * 3
        assert [c["message"]["content"] for c in choices] == [" ".join(f"word{i}" for i in range(400))[:len(
            choices[0]["message"]["content"])]] * 3 and response.json()["usage"]["completion_tokens"] == 900
        server.settled(30)


def _stalled(server) -> socket.socket:
    """A client that asks for a long streamed reply and reads none of it (a small receive buffer)."""
    body = json.dumps({"model": MODEL, "stream": True, "max_tokens": 4000, "ignore_eos": True,
                       "messages": LONG}).encode()
    stalled = socket.create_connection(("127.0.0.1", server.port))
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    return stalled


def test_a_client_that_stops_reading_is_cut_by_the_worker():
    with running(step_interval=0.001, options=options(), workers=1, sink_bytes=16384) as server:
        with _stalled(server):
            server.settled(30)                   # it never reads: the worker gives up on it
            assert server.api.serving.exchanges == 0
        reply = requests.post(server.url + "/v1/chat/completions", json={
            "model": MODEL, "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}).json()
        assert reply["usage"]["completion_tokens"] == 3


def test_a_killed_worker_that_held_bytes_back_leaves_its_body_cut():
    """A client that reads nothing: its worker holds what its socket does not take, and says so
    (StreamUpdate.behind), so when that worker dies the body on the wire may stop mid-chunk, and the API
    process writes no error event after it: the client reads the body cut short, then the connection's end."""
    with running(step_interval=0.001, options=options(), workers=1) as server:
        with _stalled(server) as stalled:
            deadline = time.monotonic() + 30
            while not (exchanges := [c.exchange for c in list(server.api.serving.choices.values())
                                     if c.exchange.transport is not None]):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            fd = exchanges[0].transport.get_extra_info("socket").fileno()
            with socket.socket(fileno=os.dup(fd)) as shared:  # the worker's copy: the same socket
                shared.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            while not exchanges[0].behind:
                assert time.monotonic() < deadline, "the worker never said it held bytes back"
                time.sleep(0.01)
            os.kill(server.pool.links[0].info.pid, signal.SIGKILL)
            stalled.settimeout(30)
            received = b""
            while data := stalled.recv(1 << 16):
                received += data
        assert received.startswith(b"HTTP/1.1 200 OK") and b"data: {" in received
        assert b"worker_lost" not in received and not received.endswith(b"0\r\n\r\n")


class StoppingEngine(ReplayEngine):
    """The replay engine, stopping (SIGSTOP) process `victim` once the next request is in it: that request's
    socket then goes to a worker that never takes it."""

    victim: int | None = None

    async def add(self, *args, **kwargs) -> None:
        await super().add(*args, **kwargs)        # (the replay engine asks the pool for the prompt's text)
        if self.victim is not None:
            os.kill(self.victim, signal.SIGSTOP)  # delivered a moment later: every thread is seen stopped first
            tasks, deadline = f"/proc/{self.victim}/task", time.monotonic() + 5
            while any(open(f"{tasks}/{task}/stat").read().rsplit(")", 1)[1].split()[0] not in "tT"
                      for task in os.listdir(tasks)):
                assert time.monotonic() < deadline, "the worker did not stop"
                await asyncio.sleep(0.001)
            self.victim = None


def test_a_worker_killed_before_it_wrote_anything_leaves_the_answer_to_the_api_process():
    """Its worker stopped as the request enters the engine, then killed: none of the response reached the
    socket, so the API process answers with its own status and error body (503 worker_lost), as for a
    request that failed before its response began, where a closed connection was all the client had."""
    engine = StoppingEngine(script, step_interval=0.02, max_model_len=4096)
    with running(engine=engine, options=options(), workers=1) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)
        list(client.chat.completions.create(model=MODEL, stream=True, max_tokens=2, messages=[    # the hand-over's
            {"role": "user", "content": "hi"}]))                                                  # connection
        pid = engine.victim = server.pool.links[0].info.pid

        def kill_once_stopped():
            deadline = time.monotonic() + 30
            while engine.victim is not None and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.2)                               # the socket is on its way to the stopped worker
            os.kill(pid, signal.SIGKILL)
        killer = threading.Thread(target=kill_once_stopped)
        killer.start()
        try:
            with pytest.raises(openai.InternalServerError) as failed:
                list(client.chat.completions.create(model=MODEL, stream=True, messages=LONG))
        finally:
            killer.join()
        assert failed.value.status_code == 503 and failed.value.body["code"] == "worker_lost", failed.value.body
        server.settled(30)


def _killed_mid_stream(server, api: str) -> list:
    """A long streamed reply in `api`'s format read by its SDK; its worker killed after a few events: what the
    SDK made of the rest (its events, then the exception it raised, if any)."""
    seen = []
    if api == "anthropic":
        claude = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)
        events = claude.messages.create(model=MODEL, max_tokens=400, messages=LONG, stream=True)
    else:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        events = client.chat.completions.create(model=MODEL, stream=True, messages=LONG) if api == "chat" else \
            client.responses.create(model=MODEL, stream=True, input="scenario:long", max_output_tokens=400)
    try:
        for event in events:
            seen.append(event)
            if len(seen) == 4:
                os.kill(server.pool.links[0].info.pid, signal.SIGKILL)
    except (openai.APIError, anthropic.APIError) as error:
        seen.append(error)
    return seen


@pytest.mark.parametrize("api", ["chat", "anthropic", "responses"])
def test_a_killed_worker_ends_its_direct_stream_with_the_formats_error_event(api):
    """The API process still holds the client's socket: the worker's bytes ended at an event's end, so it
    writes the format's error event and the body's end, which each SDK reads as the API's error (not a
    broken connection); the next request is served by the replacement."""
    with running(step_interval=0.02, options=options(), workers=1) as server:
        seen = _killed_mid_stream(server, api)
        assert len(seen) > 4
        last = seen[-1]
        if api == "responses":                              # the SDK yields the failure as an event
            assert last.type == "response.failed" and last.response.status == "failed", last
            message = last.response.error.message
        else:
            assert isinstance(last, openai.APIError if api == "chat" else anthropic.APIStatusError), last
            message = str(last)
        assert "is gone" in message and not isinstance(last, (openai.APIConnectionError, anthropic.APIConnectionError))
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


def stream_choices(server, **ask) -> tuple[dict, object, dict]:
    """A streamed chat read by the openai SDK, assembled per choice (text, reasoning, tool calls with their ids
    aside, finish, logprob entries), its usage and its response headers."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(model=MODEL, stream=True, **ask)
    choices: dict[int, dict] = {}
    usage = None
    for chunk in raw.parse():
        usage = chunk.usage or usage
        for choice in chunk.choices:
            got = choices.setdefault(choice.index, {"content": "", "reasoning": "", "calls": {}, "finish": None,
                                                    "entries": []})
            got["content"] += choice.delta.content or ""
            got["reasoning"] += getattr(choice.delta, "reasoning_content", None) or ""
            for call in choice.delta.tool_calls or ():
                entry = got["calls"].setdefault(call.index, {"ids": 0, "name": "", "arguments": ""})
                entry["ids"] += call.id is not None
                entry["name"] += call.function.name or ""
                entry["arguments"] += call.function.arguments or ""
            if choice.logprobs is not None and choice.logprobs.content:
                got["entries"] += [(e.token, e.logprob, e.bytes, [(t.token, t.logprob) for t in e.top_logprobs])
                                   for e in choice.logprobs.content]
            if choice.finish_reason is not None:
                assert got["finish"] is None
                got["finish"] = choice.finish_reason
    return choices, usage, raw.headers


def raw_events(server, **ask) -> list[bytes]:
    with requests.post(server.url + "/v1/chat/completions", stream=True, timeout=30,
                       json={"model": MODEL, "stream": True, **ask}) as response:
        return [line for line in response.iter_lines() if line.startswith(b"data: ")]


N3 = {"n": 3, "messages": [{"role": "user", "content": "Please answer. scenario:tools"}], "tools": TOOLS,
      "logprobs": True, "top_logprobs": 2, "stream_options": {"include_usage": True}}


def whole_choices(server, **ask) -> tuple[list, object, dict]:
    """A whole chat read by the openai SDK: each choice (tool call ids aside), the usage and the headers."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(model=MODEL, **ask)
    completion = raw.parse()
    choices = []
    for choice in completion.choices:
        message = choice.message
        choices.append((choice.index, message.content, getattr(message, "reasoning_content", None),
                        [(bool(c.id), c.function.name, c.function.arguments) for c in message.tool_calls or ()],
                        choice.finish_reason,
                        [(e.token, e.logprob, e.bytes, [(t.token, t.logprob) for t in e.top_logprobs])
                         for e in choice.logprobs.content] if choice.logprobs else None))
    return choices, completion.usage, raw.headers


def test_several_choices_are_written_by_their_worker_as_the_api_process_forwards_them():
    """n = 3 with reasoning, a tool call and logprobs: all three choices open on one worker of two, which
    writes their interleaved events and the tail (the one usage chunk, [DONE]) to the client's socket; the
    SDK assembles the same response as from the forwarded path (--no-direct-streaming). Whole, the worker
    writes the whole HTTP response (status, headers with Server-Timing, body), equal to the forwarded one."""
    with running(options=options(), workers=2) as direct, \
            running(options=ApiOptions(served_model_name=[MODEL], direct_streaming=False), workers=2) as forwarded:
        got, usage, headers = stream_choices(direct, **N3)
        assert headers["Connection"] == "close"            # the connection ends with the worker's body
        assert direct.pool.handover_fallbacks == 0         # ... the socket went to the worker: it wrote all
        want, want_usage, want_headers = stream_choices(forwarded, **N3)
        assert want_headers.get("Connection") != "close"
        assert sorted(got) == [0, 1, 2]
        assert got == want
        assert got[0]["finish"] == "tool_calls" and got[0]["content"] == "Checking."
        assert [(c["ids"], c["name"], json.loads(c["arguments"])) for c in got[0]["calls"].values()] == \
            [(1, "get_weather", {"city": "Zürich", "unit": "celsius"})]
        assert len(got[0]["entries"]) == usage.completion_tokens // 3 and got[1] == got[2] == got[0]
        assert usage == want_usage and usage.prompt_tokens > 0
        for server in (direct, forwarded):                 # the tail: one usage chunk of the three, then [DONE]
            events = raw_events(server, **N3)
            assert events[-1] == b"data: [DONE]"
            last = json.loads(events[-2][6:])
            assert last["choices"] == [] and last["usage"]["completion_tokens"] == usage.completion_tokens
            assert sum(b'"finish_reason":"tool_calls"' in e for e in events) == 3
        whole_ask = {k: v for k, v in N3.items() if k != "stream_options"}
        got, usage, headers = whole_choices(direct, **whole_ask)
        assert headers["Connection"] == "close" and "engine;dur=" in headers["Server-Timing"]
        assert headers["Content-Type"] == "application/json" and direct.pool.handover_fallbacks == 0
        want, want_usage, want_headers = whole_choices(forwarded, **whole_ask)
        assert want_headers.get("Connection") != "close" and "engine;dur=" in want_headers["Server-Timing"]
        assert got == want and usage == want_usage and [c[0] for c in got] == [0, 1, 2]
        assert got[0][1:5] == ("Checking.", "They want the weather: I call the tool.",
                               [(True, "get_weather", '{"city": "Zürich", "unit": "celsius"}')], "tool_calls")
        assert 3 * len(got[0][5]) == usage.completion_tokens
        with requests.post(direct.url + "/v1/chat/completions", stream=True, timeout=30, json={
                "model": MODEL, "stream": True, "n": 3, "messages": LONG}) as response:
            lines = response.iter_lines()
            for _ in range(8):
                next(lines)
            # the three choices of one response on one worker of the two
            assert sorted(link.open_streams for link in direct.pool.links) == [0, 3]
        direct.settled(5)
        assert direct.pool.handover_fallbacks == 0


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
        assert server.pool.handover_fallbacks == 2              # the streamed response and the whole one
        got, usage, _ = stream_choices(server, **N3)           # several choices: each goes on forwarded
        assert server.pool.handover_fallbacks == 3
        assert sorted(got) == [0, 1, 2] and got[0] == got[1] == got[2] and got[0]["finish"] == "tool_calls"
        assert got[0]["content"] == "Checking." and 3 * len(got[0]["entries"]) == usage.completion_tokens
        events = raw_events(server, **N3)
        assert events[-1] == b"data: [DONE]" and json.loads(events[-2][6:])["choices"] == []


def test_a_killed_worker_ends_only_its_own_responses():
    """Two n = 3 responses written by two workers: killing one worker ends its response with the error event
    (written by the API process); the other's worker writes the rest of its own, tail and all."""
    with running(step_interval=0.005, options=options(), workers=2) as server:
        ask = {"model": MODEL, "stream": True, "n": 3, "messages": LONG, "max_tokens": 300}
        with requests.post(server.url + "/v1/chat/completions", stream=True, timeout=30, json=ask) as doomed, \
                requests.post(server.url + "/v1/chat/completions", stream=True, timeout=30, json=ask) as spared:
            doomed_lines, spared_lines = doomed.iter_lines(), spared.iter_lines()
            first = json.loads(next(line for line in doomed_lines if line.startswith(b"data: "))[6:])
            next(spared_lines)
            link = server.pool.streams[f"{first['id']}-0"].link
            assert link.open_streams == 3 and sorted(k.open_streams for k in server.pool.links) == [3, 3]
            os.kill(link.info.pid, signal.SIGKILL)
            rest = [line for line in doomed_lines if line.startswith(b"data: ")]
            assert b'"code":"worker_lost"' in rest[-2] and rest[-1] == b"data: [DONE]", rest[-3:]
            events = [line for line in spared_lines if line.startswith(b"data: ")]
        assert events[-1] == b"data: [DONE]"
        assert sum(b'"finish_reason":"length"' in e for e in events) == 3
        server.settled(30)


def _raw_head(server, origin: str) -> bytes:
    """A streamed chat's status line and headers as the client's socket receives them."""
    body = json.dumps({"model": MODEL, "stream": True, "max_tokens": 2,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as client:
        client.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nOrigin: %s\r\nContent-Type: "
                       b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (origin.encode(), len(body), body))
        received = b""
        while b"\r\n\r\n" not in received:
            data = client.recv(65536)
            assert data, received
            received += data
        while not received.endswith(b"0\r\n\r\n"):        # the whole body, so the exchange is over
            data = client.recv(65536)
            if not data:
                break
            received += data
    head = received[:received.index(b"\r\n\r\n") + 4]
    return re.sub(rb"(Date|Server-Timing): [^\r]*", rb"\1: -", head)   # the values of each request's own


def test_a_streamed_responses_head_is_the_same_whichever_process_writes_it():
    """A direct stream's worker writes its status line and headers with its first events (the API process
    writes nothing of it); when the worker cannot take the socket, the API process writes them through
    aiohttp: the client gets the same bytes either way (CORS headers included), the per-request values of
    Date and Server-Timing aside."""
    origin = "https://app.example"
    cors = ApiOptions(served_model_name=[MODEL], direct_streaming=True, allowed_origins=[origin])
    with running(options=cors, workers=1) as server:
        by_worker = _raw_head(server, origin)
        assert server.pool.handover_fallbacks == 0
    with running(options=cors, workers=1) as server:
        os.unlink(sinks_path(server.pool.links[0].endpoint))     # before its first hand-over connects
        by_aiohttp = _raw_head(server, origin)
        assert server.pool.handover_fallbacks == 1
    assert by_worker == by_aiohttp == (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nServer-Timing: -\r\n"
        b"Transfer-Encoding: chunked\r\nDate: -\r\nServer: " + SERVER_SOFTWARE.encode() + b"\r\nConnection: close\r\n"
        b"Access-Control-Allow-Origin: https://app.example\r\nVary: Origin\r\n\r\n")
