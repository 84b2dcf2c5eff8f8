"""API keys and CORS as `vllm serve` has them, on a real `tokworker api` process (the replay engine, the bundled
tokenizer) driven by the real `openai` and `anthropic` SDKs and by plain HTTP: every API answers 401 in its
own error body without one of the --api-key keys and 200 with one (OpenAI's SDK sends it as a Bearer token,
Anthropic's as x-api-key), /v1/messages/count_tokens counts what /v1/messages would, /health stays open,
/metrics is behind the key; a CORS preflight from an allowed origin is answered without a key, one from
another origin is refused, and responses (streamed ones too) carry the allowed origin. Covers
tokworker.api.access and tokworker.api.count_tokens."""

from __future__ import annotations

import json
import sys

import anthropic
import openai
import pytest
import requests

from api_server import running
from engine_servers import process
from tokworker.api.options import ApiOptions
from tools.llama_server import free_port

pytestmark = pytest.mark.slow  # a `tokworker api` process and its pool

KEYS = ("sk-first-key", "sk-second-key")
ORIGIN = "https://app.example"
ASK = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    port = free_port()
    command = [sys.executable, "-m", "tokworker.cli", "api", "--port", str(port), "--workers", "1",
               "--served-model-name", "m", "--api-key", KEYS[0], "--api-key", KEYS[1],
               "--allowed-origins", json.dumps([ORIGIN])]
    with process(command, f"http://127.0.0.1:{port}/health", 120, tmp_path_factory.mktemp("api") / "api.log"):
        yield f"http://127.0.0.1:{port}"


def test_openai_routes_answer_401_without_a_key_and_200_with_one(url):
    wrong = openai.OpenAI(base_url=url + "/v1", api_key="sk-wrong", max_retries=0)
    for call in (lambda c: c.chat.completions.create(model="m", messages=ASK, max_tokens=3),
                 lambda c: c.completions.create(model="m", prompt="Once", max_tokens=3),
                 lambda c: c.responses.create(model="m", input="Hi", max_output_tokens=3),
                 lambda c: c.models.list()):
        with pytest.raises(openai.AuthenticationError) as refused:
            call(wrong)
        assert refused.value.status_code == 401
        assert refused.value.body["code"] == "invalid_api_key"
        assert refused.value.body["type"] == "invalid_request_error"
    for key in KEYS:                                  # either key, by the SDK's Bearer header
        right = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)
        assert right.chat.completions.create(model="m", messages=ASK, max_tokens=3).usage.completion_tokens == 3
    right = openai.OpenAI(base_url=url + "/v1", api_key=KEYS[1], max_retries=0)
    assert right.completions.create(model="m", prompt="Once", max_tokens=3).choices[0].finish_reason == "length"
    assert right.responses.create(model="m", input="Hi", max_output_tokens=3).usage.output_tokens == 3
    streamed = list(right.chat.completions.create(model="m", messages=ASK, max_tokens=3, stream=True))
    assert streamed[-1].choices[0].finish_reason == "length"
    assert [m.id for m in right.models.list().data] == ["m"]


def test_anthropic_messages_answer_401_in_anthropics_shape_and_200_with_x_api_key(url):
    wrong = anthropic.Anthropic(base_url=url, api_key="sk-wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as refused:
        wrong.messages.create(model="m", max_tokens=3, messages=ASK)
    assert refused.value.status_code == 401
    assert refused.value.body == {"type": "error", "error": {"type": "authentication_error",
                                                             "message": refused.value.body["error"]["message"]}}
    with pytest.raises(anthropic.AuthenticationError):
        wrong.messages.count_tokens(model="m", messages=ASK)
    right = anthropic.Anthropic(base_url=url, api_key=KEYS[0], max_retries=0)
    message = right.messages.create(model="m", max_tokens=3, messages=ASK)
    assert message.usage.output_tokens == 3
    assert right.messages.count_tokens(model="m", messages=ASK).input_tokens == message.usage.input_tokens
    # count_tokens renders as /v1/messages does: the system turn and the tools count
    rich = dict(model="m", system="You are terse.", messages=[*ASK, {"role": "assistant", "content": "Hello."},
                                                              {"role": "user", "content": "Weather in Bern?"}],
                tools=[{"name": "get_weather", "description": "The weather in a city.", "input_schema": {
                    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}])
    counted = right.messages.count_tokens(**rich).input_tokens
    assert counted == right.messages.create(max_tokens=2, **rich).usage.input_tokens
    assert counted > message.usage.input_tokens + 20
    # Anthropic's route takes a Bearer key too, and OpenAI's an x-api-key
    bearer = requests.post(url + "/v1/messages", headers={"Authorization": f"Bearer {KEYS[1]}"},
                           json={"model": "m", "max_tokens": 2, "messages": ASK}, timeout=30)
    assert bearer.status_code == 200 and bearer.json()["usage"]["output_tokens"] == 2
    crossed = requests.post(url + "/v1/chat/completions", headers={"x-api-key": KEYS[1]},
                            json={"model": "m", "max_tokens": 2, "messages": ASK}, timeout=30)
    assert crossed.status_code == 200


def test_vllms_routes_metrics_and_health(url):
    """vLLM's own routes are behind the key too (their error body is vLLM's on its render tier); /health is
    open; /metrics needs the key (no --metrics-open)."""
    routes = [("/tokenize", {"prompt": "Hello"}), ("/detokenize", {"tokens": [1, 2]}),
              ("/v1/chat/completions/render", {"model": "m", "messages": ASK}),
              ("/v1/messages/render", {"model": "m", "max_tokens": 3, "messages": ASK})]
    for path, body in routes:
        refused = requests.post(url + path, json=body, timeout=30)
        assert refused.status_code == 401, path
        assert refused.headers["Content-Type"] == "application/json"
        assert requests.post(url + path, json=body, headers={"Authorization": f"Bearer {KEYS[0]}"},
                             timeout=30).status_code == 200, path
    assert requests.post(url + "/v1/chat/completions/render", json={}, timeout=30).json()["error"]["code"] == 401
    assert requests.post(url + "/v1/messages/render", json={}, timeout=30).json()["error"]["type"] == "Unauthorized"
    assert requests.get(url + "/health", timeout=10).status_code == 200
    assert requests.get(url + "/metrics", timeout=10).status_code == 401
    with_key = requests.get(url + "/metrics", headers={"Authorization": f"Bearer {KEYS[0]}"}, timeout=10)
    assert with_key.status_code == 200 and "vllm:num_requests_running" in with_key.text
    # a key that is a prefix, or has one more character, is not the key
    for near in (KEYS[0][:-1], KEYS[0] + "x", "", "Bearer"):
        assert requests.get(url + "/v1/models", headers={"Authorization": f"Bearer {near}"},
                            timeout=10).status_code == 401


def test_a_cors_preflight_from_an_allowed_origin_is_answered_without_a_key(url):
    preflight = requests.options(url + "/v1/chat/completions", timeout=10, headers={
        "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert preflight.status_code == 200
    assert preflight.headers["Access-Control-Allow-Origin"] == ORIGIN
    assert "POST" in preflight.headers["Access-Control-Allow-Methods"].split(", ")
    assert preflight.headers["Access-Control-Allow-Headers"] == "authorization, content-type"
    assert preflight.headers["Access-Control-Max-Age"] == "600"
    assert "Origin" in preflight.headers["Vary"]
    elsewhere = requests.options(url + "/v1/chat/completions", timeout=10, headers={
        "Origin": "https://elsewhere.example", "Access-Control-Request-Method": "POST"})
    assert (elsewhere.status_code, elsewhere.text) == (400, "Disallowed CORS origin")


def test_responses_to_an_allowed_origin_carry_it_streamed_and_refused_ones_too(url):
    headers = {"Origin": ORIGIN, "Authorization": f"Bearer {KEYS[0]}"}
    whole = requests.post(url + "/v1/chat/completions", headers=headers, timeout=30,
                          json={"model": "m", "max_tokens": 2, "messages": ASK})
    assert whole.status_code == 200 and whole.headers["Access-Control-Allow-Origin"] == ORIGIN
    with requests.post(url + "/v1/chat/completions", headers=headers, stream=True, timeout=30,
                       json={"model": "m", "max_tokens": 2, "messages": ASK, "stream": True}) as streamed:
        assert streamed.headers["Access-Control-Allow-Origin"] == ORIGIN
        assert [line for line in streamed.iter_lines() if line][-1] == b"data: [DONE]"
    refused = requests.get(url + "/v1/models", headers={"Origin": ORIGIN}, timeout=10)
    assert refused.status_code == 401 and refused.headers["Access-Control-Allow-Origin"] == ORIGIN
    other = requests.get(url + "/v1/models", headers={**headers, "Origin": "https://elsewhere.example"}, timeout=10)
    assert other.status_code == 200 and "Access-Control-Allow-Origin" not in other.headers


def test_listed_methods_and_headers_with_credentials():
    """Any origin with credentials: the origin is mirrored (never "*") with Allow-Credentials; a method or a
    header outside the lists is refused by name; the allowed headers are listed with CORS' safelisted ones."""
    options = ApiOptions(served_model_name=["m"], allow_credentials=True, allowed_methods=["GET", "POST"],
                         allowed_headers=["Authorization"])
    with running(options=options, workers=1) as server:
        asked = {"Origin": "https://any.example", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "Authorization, Content-Type"}
        preflight = requests.options(server.url + "/v1/chat/completions", headers=asked, timeout=10)
        assert preflight.status_code == 200
        assert preflight.headers["Access-Control-Allow-Origin"] == "https://any.example"
        assert preflight.headers["Access-Control-Allow-Credentials"] == "true"
        assert preflight.headers["Access-Control-Allow-Methods"] == "GET, POST"
        assert preflight.headers["Access-Control-Allow-Headers"] == \
            "Accept, Accept-Language, Authorization, Content-Language, Content-Type"
        refused = requests.options(server.url + "/v1/chat/completions", timeout=10, headers={
            **asked, "Access-Control-Request-Method": "PUT", "Access-Control-Request-Headers": "X-Other"})
        assert (refused.status_code, refused.text) == (400, "Disallowed CORS method, headers")
        simple = requests.get(server.url + "/v1/models", headers={"Origin": "https://any.example"}, timeout=10)
        assert simple.status_code == 200 and simple.headers["Access-Control-Allow-Origin"] == "https://any.example"
        assert simple.headers["Access-Control-Allow-Credentials"] == "true" and "Origin" in simple.headers["Vary"]


def test_usage_errors_exit_2_naming_the_flag(capsys, monkeypatch):
    """An empty key (flag or environment) and a CORS list that is not JSON are usage errors, before anything
    starts."""
    from tokworker.cli import main

    assert main(["api", "--api-key", ""]) == 2
    assert "API key is empty" in capsys.readouterr().err
    monkeypatch.setenv("VLLM_API_KEY", "")
    assert main(["api"]) == 2
    with pytest.raises(SystemExit) as exited:
        main(["api", "--allowed-origins", "https://app.example"])
    assert exited.value.code == 2 and "not a JSON list of strings" in capsys.readouterr().err
