"""vLLM's render tier routes on the front door (tokworker/api/render.py and derender.py), without vLLM: a
real pool behind a real server (tests/api_server.py), driven over HTTP. Render gives the ids the front
door's own /tokenize gives; errors are vLLM's body; a streamed derender across many calls says what the
front door's own chat completion says; the kept streams are bounded in bytes and in idle time.
tests/test_beside_vllm_render.py holds the same routes beside vLLM's own render server.
Covers tokworker.api.render and tokworker.api.derender."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
import requests

from api_server import SCENARIOS, TOOLS, running
from tokworker.api.derender import ID_COST, STREAM_COST
from tokworker.api.options import ApiOptions

pytestmark = pytest.mark.slow  # a pool and the front door

MODEL = "tokworker-test"
CONVERSATION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Zürich?"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
                    "name": "get_weather", "arguments": '{"city": "Zürich"}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "12 °C"},
                {"role": "user", "content": "And in Bern?"}]


@pytest.fixture(scope="module")
def server():
    with running(options=ApiOptions(served_model_name=[MODEL], derender_state_bytes=4 * STREAM_COST + 4096,
                                    derender_idle_s=2.0)) as server:
        yield server


def post(server, path: str, body) -> tuple[int, object]:
    response = requests.post(server.url + path, json=body, timeout=30)
    return response.status_code, response.json()


def tokenized(server, **body) -> list[int]:
    status, reply = post(server, "/tokenize", {"model": MODEL, **body})
    assert status == 200, reply
    return reply["tokens"]


def test_chat_render_is_the_prompt_with_vllms_fields(server):
    status, rendered = post(server, "/v1/chat/completions/render", {
        "model": MODEL, "messages": CONVERSATION, "tools": TOOLS, "max_tokens": 64, "temperature": 0.5,
        "stop": ["END"], "stream": True, "stream_options": {"include_usage": True}, "cache_salt": "s" * 43,
        "chat_template_kwargs": {"enable_thinking": False}})
    assert status == 200, rendered
    assert rendered["token_ids"] == tokenized(server, messages=CONVERSATION, tools=TOOLS,
                                              chat_template_kwargs={"enable_thinking": False})
    assert rendered["request_id"].startswith("chatcmpl-")
    assert rendered["sampling_params"] == {"temperature": 0.5, "max_tokens": 64, "stop": ["END"], "output_kind": 1}
    assert rendered["stream"] is True and rendered["stream_options"] == {"include_usage": True}
    assert rendered["cache_salt"] == "s" * 43 and rendered["output_mode"] == "tokens"
    context = rendered["parse_context"]
    assert context["tools"] == TOOLS and context["tool_choice"] == "auto" and context["history_tool_call_cnt"] == 1
    assert context["chat_template_kwargs"]["enable_thinking"] is False


def test_chat_render_resolves_max_tokens_and_constraints(server):
    status, rendered = post(server, "/v1/chat/completions/render", {
        "model": MODEL, "messages": CONVERSATION[:2], "tools": TOOLS,
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})
    assert status == 200, rendered
    sampling = rendered["sampling_params"]
    assert sampling["max_tokens"] == 4096 - len(rendered["token_ids"])        # what the context leaves
    assert sampling["structured_outputs"] == {"json": TOOLS[0]["function"]["parameters"]}
    status, rendered = post(server, "/v1/chat/completions/render", {
        "model": MODEL, "messages": CONVERSATION[:2], "response_format": {"type": "json_object"}})
    assert rendered["sampling_params"]["structured_outputs"] == {"json": {"type": "object"}}


def test_completions_render_gives_one_request_per_prompt(server):
    status, rendered = post(server, "/v1/completions/render", {"model": MODEL, "prompt": ["hello world", "hi"],
                                                               "max_tokens": 5, "n": 2, "request_id": "abc"})
    assert status == 200, rendered
    assert [r["token_ids"] for r in rendered] == [tokenized(server, prompt="hello world"),
                                                 tokenized(server, prompt="hi")]
    assert [r["request_id"] for r in rendered] == ["cmpl-abc-0", "cmpl-abc-1"]
    assert rendered[0]["sampling_params"] == {"n": 2, "max_tokens": 5, "output_kind": 2}


def test_messages_and_responses_render_as_their_chat(server):
    status, messages = post(server, "/v1/messages/render", {
        "model": MODEL, "max_tokens": 32, "system": "Be brief.",
        "messages": [{"role": "user", "content": "Weather in Zürich?"}]})
    assert status == 200, messages
    assert messages["token_ids"] == tokenized(server, messages=CONVERSATION[:2])
    assert messages["sampling_params"]["max_tokens"] == 32
    status, responses = post(server, "/v1/responses/render", {
        "model": MODEL, "instructions": "Be brief.", "input": "Weather in Zürich?", "max_output_tokens": 9})
    assert status == 200, responses
    assert responses["token_ids"] == messages["token_ids"] and responses["request_id"].startswith("resp_")


@pytest.mark.parametrize("path, body, param", [
    ("/v1/chat/completions/render", {"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ("/v1/chat/completions/render", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
     "max_tokens"),
    ("/v1/completions/render", {"prompt": "x", "max_tokens": "five"}, "max_tokens"),
    ("/v1/completions/render", {"prompt": [[10 ** 9]]}, "prompt"),
    ("/v1/responses/render", {"input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
    ("/v1/messages/render", {"messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
    ("/v1/chat/completions/derender", {"generate_response": {"request_id": "r", "choices": [
        {"index": 0, "token_ids": [-1]}]}}, "generate_response.choices[0].token_ids[0]"),
    ("/v1/chat/completions/derender", {"stream": True}, "generate_chunk"),
    ("/v1/completions/derender", {"generate_responses": []}, "generate_responses"),
    ("/v1/completions/derender", {"stream": True, "prompt_token_ids": [[1]]}, "prompt_token_ids"),
    ("/v1/chat/completions/derender", {"stream": True, "generate_chunk": {"request_id": "r", "choices": [
        {"index": 0, "token_ids": [1]}]}, "stream_state": {"role_sent": True}}, "stream_state"),
])
def test_bad_bodies_get_vllms_error_body(server, path, body, param):
    status, reply = post(server, path, {"model": MODEL, **body})
    assert status == 400, reply
    assert reply["error"]["type"] == "BadRequestError" and reply["error"]["code"] == 400
    assert reply["error"]["param"] == param, reply


def test_unknown_model_and_malformed_json(server):
    status, reply = post(server, "/v1/chat/completions/render", {"model": "nope", "messages": CONVERSATION})
    assert status == 404 and reply["error"]["type"] == "NotFoundError" and reply["error"]["param"] == "model"
    response = requests.post(server.url + "/v1/completions/render", data=b'{"prompt": ', timeout=30)
    assert response.status_code == 400 and response.json()["error"]["code"] == 400


def generated(server, scenario: str) -> tuple[list[int], list[int]]:
    """A scenario's reply as the engine would generate it (its ids, then the end of turn), and its prompt."""
    prompt = tokenized(server, messages=[{"role": "user", "content": f"Please answer. scenario:{scenario}"}],
                       tools=TOOLS)
    ids = tokenized(server, prompt=SCENARIOS[scenario], add_special_tokens=False)
    return ids + tokenized(server, prompt="<|im_end|>", add_special_tokens=False), prompt


def derender_stream(server, request_id: str, ids: list[int], prompt: list[int], sizes=(1, 3, 2), api="chat",
                    **request) -> list[dict]:
    """One call per chunk, each carrying the state the last call returned; the chunks' choices."""
    state, chunks, at, turn = None, [], 0, 0
    key = "chat_request" if api == "chat" else "completion_request"
    while at < len(ids):
        size = sizes[turn % len(sizes)]
        part, at, turn = ids[at:at + size], at + size, turn + 1
        status, reply = post(server, f"/v1/{'chat/' if api == 'chat' else ''}completions/derender", {
            "model": MODEL, "stream": True, "stream_state": state, "prompt_token_ids": prompt,
            "generate_chunk": {"request_id": request_id, "choices": [
                {"index": 0, "token_ids": part, "finish_reason": "stop" if at >= len(ids) else None}]},
            key: request})
        assert status == 200, reply
        state = reply["stream_state"]
        chunks += reply["chunk"]["choices"]
    return chunks


def streamed_chat(server, request: dict) -> list[dict]:
    """The front door's own streamed chat of a request (the replay engine plays its scenario): its choices,
    with tokworker's `reasoning_content` under vLLM 0.33's name, as derender writes it."""
    response = requests.post(server.url + "/v1/chat/completions", json={"model": MODEL, "stream": True, **request},
                             stream=True, timeout=30)
    choices = []
    for line in response.iter_lines():
        if line.startswith(b"data: {"):
            for choice in json.loads(line[6:])["choices"]:
                if "reasoning_content" in choice["delta"]:
                    choice["delta"]["reasoning"] = choice["delta"].pop("reasoning_content")
                choices.append(choice)
    return choices


def joined(chunks: list[dict]) -> dict:
    calls: dict[int, dict] = {}
    for chunk in chunks:
        for call in chunk["delta"].get("tool_calls", ()):
            entry = calls.setdefault(call["index"], {"name": "", "arguments": ""})
            entry["name"] += call["function"].get("name", "")
            entry["arguments"] += call["function"]["arguments"]
    return {"content": "".join(c["delta"].get("content", "") for c in chunks) or None,
            "reasoning": "".join(c["delta"].get("reasoning", "") for c in chunks) or None,
            "calls": [calls[i] for i in sorted(calls)], "finish": chunks[-1]["finish_reason"]}


@pytest.mark.parametrize("scenario", ["plain", "reasoning", "tools"])
def test_streamed_derender_says_what_the_front_door_says(server, scenario):
    ids, prompt = generated(server, scenario)
    request = {"messages": [{"role": "user", "content": f"Please answer. scenario:{scenario}"}], "tools": TOOLS}
    chunks = derender_stream(server, f"same-{scenario}", ids, prompt, **request)
    assert chunks[0]["delta"]["role"] == "assistant"
    assert joined(chunks) == joined(streamed_chat(server, request))
    status, whole = post(server, "/v1/chat/completions", {"model": MODEL, **request})
    assert status == 200, whole
    message = whole["choices"][0]["message"]
    assert joined(chunks) == {"content": message["content"], "reasoning": message.get("reasoning_content"),
                              "calls": [c["function"] for c in message.get("tool_calls", [])],
                              "finish": whole["choices"][0]["finish_reason"]}
    status, derendered = post(server, "/v1/chat/completions/derender", {
        "model": MODEL, "prompt_token_ids": prompt, "prompt_tokens": len(prompt), "chat_request": request,
        "generate_response": {"request_id": "whole", "choices": [{"index": 0, "token_ids": ids}]}})
    assert status == 200, derendered
    assert derendered["choices"][0]["message"]["content"] == message["content"]
    assert derendered["usage"] == whole["usage"]


def test_a_streamed_sequence_outlives_its_worker(server):
    """Its worker killed between two calls, the sequence goes on in the replacement (its ids replayed through
    the format's writer): the chunks still join to the whole call's message, the role said once."""
    ids, prompt = generated(server, "tools")
    request = {"messages": [{"role": "user", "content": "Please answer. scenario:tools"}], "tools": TOOLS}
    state, chunks, killed = None, [], set()
    assert len(ids) > 12
    for at in range(0, len(ids), 3):
        if at == 9:
            for link in server.pool.links:
                killed.add(link.info.pid)
                os.kill(link.info.pid, signal.SIGKILL)
        status, reply = post(server, "/v1/chat/completions/derender", {
            "model": MODEL, "stream": True, "stream_state": state, "prompt_token_ids": prompt, "chat_request": request,
            "generate_chunk": {"request_id": "outlives", "choices": [
                {"index": 0, "token_ids": ids[at:at + 3], "finish_reason": "stop" if at + 3 >= len(ids) else None}]}})
        assert status == 200, reply
        state = reply["stream_state"]
        chunks += reply["chunk"]["choices"]
    deadline = time.monotonic() + 15       # a link its sequence did not use reconnects in its own time
    while not killed.isdisjoint(link.info.pid for link in server.pool.links) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert killed.isdisjoint(link.info.pid for link in server.pool.links)
    assert [c["delta"].get("role") for c in chunks].count("assistant") == 1
    status, derendered = post(server, "/v1/chat/completions/derender", {
        "model": MODEL, "prompt_token_ids": prompt, "chat_request": request,
        "generate_response": {"request_id": "whole", "choices": [{"index": 0, "token_ids": ids}]}})
    message = derendered["choices"][0]["message"]
    assert joined(chunks) == {"content": message["content"], "reasoning": message.get("reasoning"),
                              "calls": [c["function"] for c in message.get("tool_calls", [])],
                              "finish": derendered["choices"][0]["finish_reason"]}


def test_streamed_derender_cuts_stop_strings_and_keeps_logprobs(server):
    ids, prompt = generated(server, "stop")
    entries = [{"token_id": i, "logprob": -0.5, "top_logprobs": [{"token_id": i, "logprob": -0.5}]} for i in ids]
    state, text, logprobs, finishes = None, "", [], []
    for at in range(0, len(ids), 4):
        part = slice(at, at + 4)
        status, reply = post(server, "/v1/completions/derender", {
            "model": MODEL, "stream": True, "stream_state": state, "prompt_token_ids": prompt,
            "completion_request": {"prompt": "x", "stop": ["END"], "logprobs": 1},
            "generate_chunk": {"request_id": "stops", "choices": [
                {"index": 0, "token_ids": ids[part], "logprobs": {"content": entries[part]}}]}})
        assert status == 200, reply
        state = reply["stream_state"]
        for choice in reply["chunk"]["choices"]:
            text += choice["text"]
            logprobs += (choice["logprobs"] or {}).get("tokens", [])
            if choice["finish_reason"] is not None:
                finishes.append((choice["finish_reason"], choice["stop_reason"]))
    assert finishes == [("stop", "END")]
    assert text == SCENARIOS["stop"].split("END")[0]
    assert "".join(logprobs).startswith(text)


def test_a_streamed_chunks_usage_is_the_engines_with_the_clients_prompt_count(server):
    """As vLLM's derender: the generate chunk's counts, the prompt's as the client names it; the usage-only
    chunk that ends a stream has no choices."""
    for route, prompt_tokens in (("/v1/chat/completions/derender", 3), ("/v1/completions/derender", None)):
        status, reply = post(server, route, {
            "model": MODEL, "stream": True, "prompt_tokens": prompt_tokens, "generate_chunk": {
                "request_id": "usage", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 5}}})
        assert status == 200, reply
        assert reply["chunk"]["choices"] == [] and reply["chunk"]["model"] == MODEL
        assert reply["chunk"]["usage"] == {"prompt_tokens": prompt_tokens or 7,
                                           "total_tokens": (prompt_tokens or 7) + 5, "completion_tokens": 5}
    status, reply = post(server, "/v1/chat/completions/derender", {"stream": True, "generate_chunk": {
        "request_id": "usage", "choices": [], "usage": {"prompt_tokens": -1}}})
    assert status == 400 and reply["error"]["type"] == "BadRequestError", reply


def test_kept_streams_are_bounded_in_bytes_and_time(server):
    """Past the byte bound the least recently used stream is closed; so is one idle too long; their next
    call says so, and the pool keeps no more streams than the bound allows."""
    def first_chunk(request_id: str, state=None):
        return post(server, "/v1/chat/completions/derender", {
            "model": MODEL, "stream": True, "stream_state": state, "prompt_token_ids": [1, 2, 3],
            "generate_chunk": {"request_id": request_id, "choices": [{"index": 0, "token_ids": [40]}]}})

    opened = server.pool.open_streams
    for n in range(8):
        status, reply = first_chunk(f"bound-{n}")
        assert status == 200, reply
    assert server.pool.open_streams - opened <= (4 * STREAM_COST + 4096) // (STREAM_COST + 4 * ID_COST)
    status, reply = first_chunk("bound-0", state={"role_sent": True})
    assert status == 400 and "under" in reply["error"]["message"] and "stream_state null" in reply["error"]["message"]
    status, reply = first_chunk("bound-7", state={"role_sent": True})
    assert status == 200, reply
    time.sleep(2.5)
    status, reply = first_chunk("idle", None)                       # a call sweeps the idle ones
    status, reply = first_chunk("bound-7", state={"role_sent": True})
    assert status == 400 and "idle" in reply["error"]["message"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 9), min_size=1, max_size=6), scenario=st.sampled_from(["reasoning", "tools"]))
def test_any_chunking_derenders_as_one_whole_call(server, sizes, scenario):
    """However the engine's ids are cut into chunks, the streamed derender joins to the whole one."""
    ids, prompt = generated(server, scenario)
    request = {"messages": [{"role": "user", "content": f"Please answer. scenario:{scenario}"}], "tools": TOOLS}
    chunks = derender_stream(server, f"any-{scenario}-{'-'.join(map(str, sizes))}", ids, prompt, sizes, **request)
    status, derendered = post(server, "/v1/chat/completions/derender", {
        "model": MODEL, "prompt_token_ids": prompt, "chat_request": request,
        "generate_response": {"request_id": "whole", "choices": [{"index": 0, "token_ids": ids}]}})
    message = derendered["choices"][0]["message"]
    assert joined(chunks) == {"content": message["content"], "reasoning": message.get("reasoning"),
                              "calls": [c["function"] for c in message.get("tool_calls", [])],
                              "finish": derendered["choices"][0]["finish_reason"]}
