"""The front door driven by the real `openai` and `anthropic` SDKs over real sockets, on a real pool and the
replay engine (tests/api_server.py): every route streamed and whole, tools with tool_choice auto, required
and named, response_format, logprobs with top_logprobs, n=3 with include_usage, stop strings, max_tokens,
and a client that disconnects mid-stream. What the SDKs assemble is checked against the scripted reply.
Covers tokworker.api.requests, tokworker.api.plan, tokworker.api.generation, tokworker.api.serving,
tokworker.api.whole and tokworker.api.metrics."""

from __future__ import annotations

import json
import time

import anthropic
import requests
import jsonschema
import openai
import pytest

from api_server import SCENARIOS, TOOLS, running
from tests.realdata import CHAT_TEMPLATES
from tokworker.api.options import ApiOptions
from tokworker.engines.replay import REPLY

pytestmark = pytest.mark.slow  # the front door on worker processes

MODEL = "tokworker-test"
WEATHER_SCHEMA = TOOLS[0]["function"]["parameters"]


@pytest.fixture(scope="module", params=["forwarded", "direct"])
def server(request):
    """Streamed bodies forwarded by the API process, or written by the workers themselves (direct)."""
    with running(options=ApiOptions(served_model_name=[MODEL], direct_streaming=request.param == "direct")) as server:
        yield server


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def ask(scenario: str) -> list[dict]:
    return [{"role": "user", "content": f"Please answer. scenario:{scenario}"}]


def stream_chat(client, **kwargs):
    """A streamed chat assembled per choice: content, reasoning, tool calls, finish, logprob entries; and usage."""
    choices: dict[int, dict] = {}
    usage = None
    for chunk in client.chat.completions.create(model=MODEL, stream=True, **kwargs):
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            got = choices.setdefault(choice.index, {"content": "", "reasoning": "", "calls": {}, "finish": None,
                                                    "entries": []})
            delta = choice.delta
            got["content"] += delta.content or ""
            got["reasoning"] += getattr(delta, "reasoning_content", None) or ""
            for call in delta.tool_calls or ():
                entry = got["calls"].setdefault(call.index, {"id": None, "name": "", "arguments": ""})
                entry["id"] = entry["id"] or call.id
                entry["name"] += call.function.name or ""
                entry["arguments"] += call.function.arguments or ""
            if choice.logprobs is not None and choice.logprobs.content:
                got["entries"] += choice.logprobs.content
            if choice.finish_reason is not None:
                got["finish"] = choice.finish_reason
    return choices, usage


# ---------------------------------------------------------------- chat completions

def test_chat_whole_and_streamed_agree_on_plain_text(client, tokenizer):
    whole = client.chat.completions.create(model=MODEL, messages=ask("plain"))
    assert whole.choices[0].message.content == SCENARIOS["plain"]
    assert whole.choices[0].finish_reason == "stop"
    reply_tokens = len(tokenizer.encode(SCENARIOS["plain"])) + 1          # the eos counts, as in vLLM
    assert whole.usage.completion_tokens == reply_tokens
    assert whole.usage.prompt_tokens == len(tokenizer.apply_chat_template(ask("plain"), add_generation_prompt=True))
    streamed, _ = stream_chat(client, messages=ask("plain"))
    assert streamed[0]["content"] == SCENARIOS["plain"] and streamed[0]["finish"] == "stop"


def test_reasoning_and_tool_call_with_tool_choice_auto(client):
    whole = client.chat.completions.create(model=MODEL, messages=ask("tools"), tools=TOOLS)
    message = whole.choices[0].message
    assert whole.choices[0].finish_reason == "tool_calls"
    assert message.content == "Checking."
    assert message.reasoning_content == "They want the weather: I call the tool."
    (call,) = message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Zürich", "unit": "celsius"}
    streamed, _ = stream_chat(client, messages=ask("tools"), tools=TOOLS)
    got = streamed[0]
    assert (got["content"], got["reasoning"], got["finish"]) == ("Checking.", message.reasoning_content, "tool_calls")
    assert [(c["name"], json.loads(c["arguments"])) for c in got["calls"].values()] == \
        [("get_weather", {"city": "Zürich", "unit": "celsius"})]


def test_tool_choice_none_leaves_the_call_as_text(client):
    whole = client.chat.completions.create(model=MODEL, messages=ask("tools"), tools=TOOLS, tool_choice="none")
    assert whole.choices[0].message.tool_calls in (None, [])
    assert "<tool_call>" in whole.choices[0].message.content


@pytest.mark.parametrize("stream", [False, True])
def test_tool_choice_required_forces_a_valid_call(client, stream):
    """The replay engine plays the shortest text the constraint's token masks allow: a call that the hermes
    parser returns and whose arguments validate against the tool's schema."""
    kwargs = dict(messages=ask("plain"), tools=TOOLS, tool_choice="required")
    if stream:
        calls = list(stream_chat(client, **kwargs)[0][0]["calls"].values())
    else:
        message = client.chat.completions.create(model=MODEL, **kwargs).choices[0].message
        calls = [{"name": c.function.name, "arguments": c.function.arguments} for c in message.tool_calls]
    assert len(calls) == 1
    schema = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == calls[0]["name"])
    jsonschema.validate(json.loads(calls[0]["arguments"]), schema)


def test_tool_choice_named_calls_that_tool(client):
    message = client.chat.completions.create(
        model=MODEL, messages=ask("plain"), tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_time"}}).choices[0].message
    (call,) = message.tool_calls
    assert call.function.name == "get_time"
    jsonschema.validate(json.loads(call.function.arguments), TOOLS[1]["function"]["parameters"])


def test_response_format_json_schema(client):
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}, "why": {"type": "string"},
                                               "sure": {"type": "boolean"}}, "required": ["answer", "why", "sure"]}
    whole = client.chat.completions.create(model=MODEL, messages=ask("plain"), response_format={
        "type": "json_schema", "json_schema": {"name": "answer", "schema": schema}})
    jsonschema.validate(json.loads(whole.choices[0].message.content), schema)
    streamed, _ = stream_chat(client, messages=ask("plain"), response_format={"type": "json_object"})
    assert isinstance(json.loads(streamed[0]["content"]), dict)


def test_logprobs_with_top_logprobs(client, tokenizer):
    whole = client.chat.completions.create(model=MODEL, messages=ask("plain"), logprobs=True, top_logprobs=3)
    entries = whole.choices[0].logprobs.content
    assert len(entries) == whole.usage.completion_tokens
    assert all(len(e.top_logprobs) == 3 and e.top_logprobs[0].token == e.token for e in entries)
    assert b"".join(bytes(e.bytes) for e in entries[:-1]).decode() == SCENARIOS["plain"]
    streamed, _ = stream_chat(client, messages=ask("plain"), logprobs=True, top_logprobs=3)
    assert [(e.token, e.logprob) for e in streamed[0]["entries"]] == [(e.token, e.logprob) for e in entries]


def test_n_3_streamed_with_usage(client, tokenizer):
    choices, usage = stream_chat(client, messages=ask("reasoning"), n=3, stream_options={"include_usage": True})
    assert sorted(choices) == [0, 1, 2]
    for got in choices.values():
        assert got["content"] == "Hello there, 日本語 🧑‍🚀 naïve café."
        assert got["reasoning"] == "The user greets me; 東京 is far."
    assert usage.completion_tokens == 3 * (len(tokenizer.encode(SCENARIOS["reasoning"])) + 1)
    whole = client.chat.completions.create(model=MODEL, messages=ask("plain"), n=3)
    assert [c.index for c in whole.choices] == [0, 1, 2]
    assert {c.message.content for c in whole.choices} == {SCENARIOS["plain"]}


def test_stop_string_ends_the_request_in_the_engine(client, server):
    for stream in (False, True):
        if stream:
            got, _ = stream_chat(client, messages=ask("stop"), stop=["END"])
            content, finish = got[0]["content"], got[0]["finish"]
        else:
            choice = client.chat.completions.create(model=MODEL, messages=ask("stop"), stop="END").choices[0]
            content, finish = choice.message.content, choice.finish_reason
        assert (content, finish) == ("Answer: 42. ", "stop")
        server.settled()


def test_max_tokens(client):
    whole = client.chat.completions.create(model=MODEL, messages=ask("long"), max_tokens=7)
    assert (whole.choices[0].finish_reason, whole.usage.completion_tokens) == ("length", 7)
    got, usage = stream_chat(client, messages=ask("long"), max_completion_tokens=5,
                             stream_options={"include_usage": True})
    assert (got[0]["finish"], usage.completion_tokens) == ("length", 5)


def test_unscripted_reply_says_it_is_scripted(client):
    assert client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}]) \
        .choices[0].message.content == REPLY


# ---------------------------------------------------------------- completions, responses, messages

def test_completions_whole_streamed_echo_and_logprobs(client, tokenizer):
    prompt = "Once upon a time"
    whole = client.completions.create(model=MODEL, prompt=prompt, max_tokens=6, logprobs=2, echo=True)
    choice = whole.choices[0]
    assert choice.text.startswith(prompt) and choice.finish_reason == "length"
    assert len(choice.logprobs.tokens) == 6
    assert whole.usage.prompt_tokens == len(tokenizer.encode(prompt))
    text = "".join(c.choices[0].text for c in client.completions.create(model=MODEL, prompt=prompt, max_tokens=6,
                                                                          stream=True))
    assert text == REPLY[:len(text)] and len(text) > 6
    batch = client.completions.create(model=MODEL, prompt=["a b", "c"], max_tokens=3, n=2)
    assert [c.index for c in batch.choices] == [0, 1, 2, 3]
    assert batch.usage.prompt_tokens == len(tokenizer.encode("a b")) + len(tokenizer.encode("c"))
    ids = client.completions.create(model=MODEL, prompt=[[2599, 364], [2599]], max_tokens=2)
    assert ids.usage.prompt_tokens == 3 and len(ids.choices) == 2


def test_responses_whole_and_streamed(client):
    response = client.responses.create(model=MODEL, input="Hi. scenario:tools", tools=[
        {"type": "function", **TOOLS[0]["function"]}])
    kinds = [item.type for item in response.output]
    assert kinds == ["reasoning", "message", "function_call"]
    assert response.output_text == "Checking."
    call = response.output[2]
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Zürich", "unit": "celsius"})
    with client.responses.stream(model=MODEL, input="Hi. scenario:plain") as stream:
        final = stream.get_final_response()
    assert final.output_text == SCENARIOS["plain"] and final.status == "completed"
    assert final.usage.output_tokens > 0


def test_anthropic_messages_whole_and_streamed(server):
    client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)
    tools = [{"name": "get_weather", "input_schema": WEATHER_SCHEMA}]
    message = client.messages.create(model=MODEL, max_tokens=200, tools=tools, messages=[
        {"role": "user", "content": "Weather? scenario:tools"}])
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use"]
    assert message.content[2].input == {"city": "Zürich", "unit": "celsius"}
    assert message.stop_reason == "tool_use"
    with client.messages.stream(model=MODEL, max_tokens=200, messages=[
            {"role": "user", "content": "Hi scenario:plain"}]) as stream:
        final = stream.get_final_message()
    assert final.content[0].text == SCENARIOS["plain"] and final.stop_reason == "end_turn"
    short = client.messages.create(model=MODEL, max_tokens=3, messages=[{"role": "user", "content": "hi"}])
    assert (short.stop_reason, short.usage.output_tokens) == ("max_tokens", 3)


# ---------------------------------------------------------------- a client that goes away

@pytest.mark.parametrize("direct", [False, True])
def test_disconnect_aborts_the_engine_request_and_closes_the_stream(direct):
    with running(step_interval=0.05, options=ApiOptions(served_model_name=[MODEL], direct_streaming=direct)) as server:
        with requests.Session() as http:
            with http.post(server.url + "/v1/chat/completions", stream=True, timeout=30, json={
                    "model": MODEL, "stream": True, "messages": ask("long")}) as response:
                lines = response.iter_lines()
                for _ in range(6):
                    next(lines)
                (name,) = list(server.api.serving.choices)
                assert server.engine.running() == 1
            server.settled(0.2)             # the response is closed, the connection with it: 4 steps
            stream = server.pool.streams.get(name)
            assert stream is None or stream.finished
            assert server.pool.open_streams == 0


# ---------------------------------------------------------------- the small routes

def test_models_tokenize_detokenize_health_metrics(server, client, tokenizer):
    assert [m.id for m in client.models.list().data] == [MODEL]
    url = server.url
    tokens = requests.post(url + "/tokenize", json={"prompt": "Hello world"}).json()
    assert tokens["tokens"] == tokenizer.encode("Hello world", add_special_tokens=True)
    assert tokens["count"] == len(tokens["tokens"]) and tokens["max_model_len"] == 4096
    strs = requests.post(url + "/tokenize", json={"prompt": "Hello world", "return_token_strs": True}).json()
    assert strs["token_strs"] == [tokenizer.decode([i]) for i in tokens["tokens"]] and "".join(strs["token_strs"])
    empty = requests.post(url + "/tokenize", json={"prompt": "", "add_special_tokens": False,
                                                   "return_token_strs": True}).json()
    assert empty["tokens"] == [] and empty["token_strs"] == []
    chat = requests.post(url + "/tokenize", json={"messages": ask("plain")}).json()
    assert chat["tokens"] == tokenizer.apply_chat_template(ask("plain"), add_generation_prompt=True)
    # the tools reach the template as sent: no optional field the client left out comes back as null
    with_tools = requests.post(url + "/tokenize", json={"messages": ask("plain"), "tools": TOOLS}).json()
    assert with_tools["tokens"] == tokenizer.apply_chat_template(ask("plain"), tools=TOOLS, add_generation_prompt=True)
    assert requests.post(url + "/detokenize", json={"tokens": tokens["tokens"]}).json() == {"prompt": "Hello world"}
    assert requests.get(url + "/health").status_code == 200
    client.chat.completions.create(model=MODEL, messages=ask("plain"), max_tokens=2)
    # a direct response's worker wrote it before its step reply reached the API process, which then ends
    # the exchange: the metrics settle a moment after the client has its bytes
    deadline = time.monotonic() + 5
    while "tokworker_streams_open 0" not in (metrics := requests.get(url + "/metrics").text):
        assert time.monotonic() < deadline, metrics[-2000:]
        time.sleep(0.02)
    assert 'tokworker_http_requests_total{route="/v1/chat/completions",code="200"}' in metrics
    assert "tokworker_time_to_first_token_seconds_count" in metrics


def test_a_forced_call_is_a_call_where_the_prompt_opens_a_think_block():
    """QwQ's template ends its generation prompt with "<think>\\n": the answer would start as reasoning, but a
    forced output (the call, a JSON value) is none of it, so the reasoning parser is off for it."""
    template = CHAT_TEMPLATES / "Qwen-QwQ-32B.jinja"
    if not template.is_file():
        pytest.skip("../shared/fixtures/chat_templates is not present")
    with running(workers=1, chat_template=str(template)) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        choice = client.chat.completions.create(model=MODEL, messages=ask("plain"), tools=TOOLS,
                                                tool_choice="required").choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.tool_calls[0].function.name in (
            "get_weather", "get_time")
        assert not getattr(choice.message, "reasoning_content", None)
