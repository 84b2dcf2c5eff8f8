"""Bad requests, table-driven, over real sockets against the front door: each gets its status, OpenAI's error
body (Anthropic's on /v1/messages) naming the offending field, and no effect on a request in flight beside
them: a long streamed reply that started before the first bad request ends whole and unchanged, on the same
workers.
Covers tokworker.api.errors."""

from __future__ import annotations

import json
import threading

import pytest
import requests

from api_server import SCENARIOS, TOOLS, running
from tokworker.api.options import ApiOptions

pytestmark = pytest.mark.slow  # the front door on worker processes

USER = [{"role": "user", "content": "hi"}]
MAX_BODY = 256 * 1024
CHAT, COMPLETIONS, RESPONSES, MESSAGES = "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages"


def chat(**fields):
    return {"messages": USER, **fields}


BAD_SCHEMA = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {
    "a": {"type": "frobnicate"}}}}}

# (route, body: dict, or bytes sent as they are; status; the param the error names; a word its message has)
CASES = [
    (CHAT, b'{"messages": [', 400, None, "JSON"),
    (CHAT, b"[]", 400, None, "object"),
    (CHAT, {}, 400, "messages", "messages"),
    (CHAT, chat(messages=[]), 400, "messages", "length"),
    (CHAT, chat(messages=[{"role": "robot", "content": "hi"}]), 400, "messages[0].role", "robot"),
    (CHAT, chat(messages=[{"role": "user", "content": 5}]), 400, "messages[0].content", "int"),
    (CHAT, chat(messages=[{"role": "user", "content": [{"type": "video"}]}]), 400, "messages[0].content[0].type",
     "video"),
    (CHAT, chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]), 400,
     "messages[0].content[0].type", "image_url"),
    (CHAT, chat(tools=[{"type": "function"}]), 400, "tools[0].function", "function"),
    (CHAT, chat(tools=[{"type": "retrieval", "function": {"name": "f"}}]), 400, "tools[0].type", "retrieval"),
    (CHAT, chat(tools=[{"type": "function", "function": {"name": ""}}]), 400, "tools[0].function.name", "length"),
    (CHAT, chat(max_tokens=0), 400, "max_tokens", ">= 1"),
    (CHAT, chat(max_tokens=-1), 400, "max_tokens", ">= 1"),
    (CHAT, chat(max_tokens="10"), 400, "max_tokens", "str"),
    (CHAT, chat(max_completion_tokens=0), 400, "max_completion_tokens", ">= 1"),
    (CHAT, chat(max_tokens=5000), 400, "max_tokens", "context"),
    (CHAT, chat(logprobs=True, top_logprobs=21), 400, "top_logprobs", "<= 20"),
    (CHAT, chat(top_logprobs=2), 400, "top_logprobs", "logprobs"),
    (CHAT, chat(logprobs="yes"), 400, "logprobs", "str"),
    (CHAT, chat(n=0), 400, "n", ">= 1"),
    (CHAT, chat(n=129), 400, "n", "<= 128"),
    (CHAT, chat(temperature=-1), 400, "temperature", ">= 0"),
    (CHAT, chat(temperature=2.5), 400, "temperature", "<= 2"),
    (CHAT, chat(temperature="hot"), 400, "temperature", "str"),
    (CHAT, chat(top_p=0), 400, "top_p", "> 0"),
    (CHAT, chat(top_p=1.5), 400, "top_p", "<= 1"),
    (CHAT, chat(presence_penalty=3), 400, "presence_penalty", "<= 2"),
    (CHAT, chat(frequency_penalty=-3), 400, "frequency_penalty", ">= -2"),
    (CHAT, chat(repetition_penalty=0), 400, "repetition_penalty", "> 0"),
    (CHAT, chat(top_k=-2), 400, "top_k", ">= -1"),
    (CHAT, chat(min_p=2), 400, "min_p", "<= 1"),
    (CHAT, chat(seed="x"), 400, "seed", "str"),
    (CHAT, chat(stop=5), 400, "stop", "int"),
    (CHAT, chat(stop=["ok", 5]), 400, "stop[1]", "int"),
    (CHAT, chat(stop_token_ids=[-1]), 400, "stop_token_ids[0]", ">= 0"),
    (CHAT, chat(min_tokens=-1), 400, "min_tokens", ">= 0"),
    (CHAT, chat(logit_bias={"x": 1}), 400, "logit_bias", "int"),
    (CHAT, chat(logit_bias={"5": 200}), 400, "logit_bias[...]", "<= 100"),
    (CHAT, chat(stream="yes"), 400, "stream", "str"),
    (CHAT, chat(stream_options={"include_usage": True}), 400, "stream_options", "stream"),
    (CHAT, chat(tool_choice="sometimes"), 400, "tool_choice", "sometimes"),
    (CHAT, chat(tool_choice="required"), 400, "tool_choice", "tools"),
    (CHAT, chat(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}), 400, "tool_choice",
     "nope"),
    (CHAT, chat(tools=TOOLS, tool_choice="required", response_format={"type": "json_object"}), 400,
     "response_format", "both"),
    (CHAT, chat(response_format={"type": "xml"}), 400, "response_format.type", "xml"),
    (CHAT, chat(response_format=BAD_SCHEMA), 400, "response_format", "frobnicate"),
    (CHAT, chat(continue_final_message=True), 400, "continue_final_message", "add_generation_prompt"),
    (CHAT, chat(chat_template="{{ 'x' }}"), 403, None, "template"),
    (CHAT, chat(model="gpt-9"), 404, "model", "gpt-9"),
    (CHAT, chat(messages=[{"role": "user", "content": "word " * 5000}]), 400, "messages", "context"),   # OpenAI: context_length_exceeded
    (CHAT, chat(messages=[{"role": "user", "content": "x" * MAX_BODY}]), 413, None, "bytes"),
    (COMPLETIONS, {}, 400, "prompt", "prompt"),
    (COMPLETIONS, {"prompt": 5}, 400, "prompt", "int"),
    (COMPLETIONS, {"prompt": []}, 400, "prompt", "prompt"),
    (COMPLETIONS, {"prompt": ["a", [1, 2]]}, 400, "prompt", "prompt"),
    (COMPLETIONS, {"prompt": [10**9]}, 400, "prompt", "vocabulary"),
    (COMPLETIONS, {"prompt": "a", "suffix": "b"}, 400, "suffix", "suffix"),
    (COMPLETIONS, {"prompt": "a", "logprobs": 21}, 400, "logprobs", "<= 20"),
    (COMPLETIONS, {"prompt": "a", "echo": "x"}, 400, "echo", "str"),
    (COMPLETIONS, {"prompt": "a", "best_of": 3}, 400, "best_of", "best_of"),
    (RESPONSES, {}, 400, "input", "input"),
    (RESPONSES, {"input": 5}, 400, "input", "int"),
    (RESPONSES, {"input": [{"type": "message", "role": "robot", "content": "x"}]}, 400, "input[0].role", "robot"),
    (RESPONSES, {"input": [{"type": "image", "image_url": "x"}]}, 400, "input[0].type", "image"),
    (RESPONSES, {"input": [{"type": "function_call", "name": "f"}]}, 400, "input[0].call_id", "call_id"),
    (RESPONSES, {"input": "hi", "previous_response_id": "resp_1"}, 400, "previous_response_id", "store"),
    (RESPONSES, {"input": "hi", "max_output_tokens": 0}, 400, "max_output_tokens", ">= 1"),
    (MESSAGES, {"messages": USER}, 400, "max_tokens", "max_tokens"),
    (MESSAGES, {"max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}, 400, "messages[0].role", "system"),
    (MESSAGES, {"max_tokens": 5, "messages": USER, "temperature": 1.5}, 400, "temperature", "<= 1"),
    (MESSAGES, {"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
     400, "messages[0].content[0].type", "image"),
    (MESSAGES, {"max_tokens": 5, "messages": USER, "model": "claude-9"}, 404, "model", "claude-9"),
    ("/tokenize", {}, 400, "prompt", "prompt"),
    ("/detokenize", {"tokens": [10**9]}, 400, "tokens", "vocabulary"),
    ("/v1/embeddings", {"input": "x"}, 404, None, "Not Found"),
]


@pytest.fixture(scope="module")
def server():
    with running(step_interval=0.01, options=ApiOptions(served_model_name=["tokworker-test"],
                                                        max_request_bytes=MAX_BODY)) as server:
        yield server


def test_every_bad_request_is_refused_by_name_and_the_request_in_flight_is_untouched(server):
    pids = [link.info.pid for link in server.pool.links]
    streamed: dict = {}

    def long_request():
        text = []
        with requests.post(server.url + CHAT, stream=True, timeout=60, json={
                "stream": True, "messages": [{"role": "user", "content": "scenario:long"}]}) as response:
            for line in response.iter_lines():
                if line.startswith(b"data: {"):
                    text += [c["delta"].get("content") or "" for c in json.loads(line[6:])["choices"]]
                if line:
                    streamed["last"] = line
        streamed["text"] = "".join(text)

    beside = threading.Thread(target=long_request)
    beside.start()
    failures = []
    for route, body, status, param, word in CASES:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        response = requests.post(server.url + route, data=data, headers={"Content-Type": "application/json"})
        error = response.json()
        if route == MESSAGES:
            got = (response.status_code, error["type"], None)
            message = error["error"]["message"]
            if got[:2] != (status, "error") or word not in message:
                failures.append((route, body, got, message))
            continue
        message = error["error"]["message"]
        got = (response.status_code, error["error"]["param"])
        if got != (status, param) or word not in message or set(error["error"]) != {"message", "type", "param", "code"}:
            failures.append((route, str(body)[:80], got, message))
    assert not failures, "\n".join(map(str, failures))
    beside.join(60)
    assert streamed["text"] == SCENARIOS["long"] and streamed["last"] == b"data: [DONE]"
    assert [link.info.pid for link in server.pool.links] == pids


def test_wrong_method_and_unknown_route_get_openai_bodies(server):
    response = requests.get(server.url + CHAT)
    assert response.status_code == 405 and response.json()["error"]["type"] == "invalid_request_error"
    response = requests.post(server.url + "/v1/nothing", json={})
    assert response.status_code == 404 and "not found" in response.json()["error"]["message"].lower()
