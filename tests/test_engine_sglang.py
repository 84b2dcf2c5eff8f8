"""The `sglang` engine adapter against a stand-in for SGLang's server, driven through `tokworker api --engine
sglang --engine-url ...` with the `openai` SDK, in both of SGLang's streaming modes (every id so far in each
event, its default; only the new ones, --incremental-streaming-output).

Real: the adapter, the pool and `tokworker api` in processes of their own, HTTP over loopback. Standing in:
SGLang's server (tests/sglang_generate_server.py, an aiohttp app): SGLang's HTTP server needs its GPU
scheduler and model-runner processes, so the stand-in serves the request and event shapes read from SGLang
0.5.23's code (GenerateReqInput, SamplingParams' names, the skip_tokenizer_init event dicts, the finish
reasons, /abort_request) and generates a fixed list of ids (tests/engine_servers.script_ids)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import openai
import pytest
import requests

from engine_servers import ANSWER, front_door, free_port, process, script_ids
from realdata import vocabulary
from tokworker import Tokenizer
from tokworker.api.run import engine_for
from tokworker.engines.base import EngineError, SamplingParams
from tokworker.engines.sglang import SglangEngine
from tokworker.protocol.messages import ErrorCode

SERVER = Path(__file__).with_name("sglang_generate_server.py")
SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.fixture(scope="module")
def model_dir():
    return vocabulary("qwen3_dir")


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    return Tokenizer.from_dir(model_dir)


@pytest.fixture(scope="module")
def script(tokenizer):
    return script_ids(tokenizer)


@pytest.fixture(scope="module", params=["cumulative", "incremental"])
def sglang(request, script, tmp_path_factory):
    folder = tmp_path_factory.mktemp("sglang")
    (folder / "script.json").write_text(json.dumps(script))
    port = free_port()
    command = [sys.executable, str(SERVER), "--port", str(port), "--script", str(folder / "script.json"),
               "--step-s", "0.02"] + (["--incremental"] if request.param == "incremental" else [])
    with process(command, f"http://127.0.0.1:{port}/health", 60, folder / "sglang.log"):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def front(sglang, model_dir, tmp_path_factory):
    with front_door(model_dir, "sglang", sglang, tmp_path_factory.mktemp("front") / "api.log") as url:
        yield url


@pytest.fixture(scope="module")
def client(front):
    return openai.OpenAI(base_url=front + "/v1", api_key="unused", max_retries=0)


def seen(sglang) -> list[dict]:
    return requests.get(sglang + "/standin/requests").json()


def aborted(sglang) -> list[str]:
    return requests.get(sglang + "/standin/aborted").json()


def wait_aborted(sglang, rid: str) -> bool:
    deadline = time.monotonic() + 10
    while rid not in aborted(sglang) and time.monotonic() < deadline:
        time.sleep(0.05)
    return rid in aborted(sglang)


def ask(text: str = "Say hello.") -> list[dict]:
    return [{"role": "user", "content": text}]


def test_whole_and_streamed_replies_are_the_engines_ids_decoded(client, front, sglang, tokenizer, script):
    whole = client.chat.completions.create(model="m", messages=ask(), max_tokens=12)
    assert whole.choices[0].message.content == tokenizer.decode(script[:12])
    assert whole.choices[0].finish_reason == "length"
    asked = seen(sglang)[-1]
    assert asked["input_ids"] == requests.post(front + "/tokenize", json={"messages": ask()}).json()["tokens"]
    assert asked["sampling_params"] == {"max_new_tokens": 12} and asked["stream"] is True
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens) == (len(asked["input_ids"]), 12)

    chunks = list(client.chat.completions.create(model="m", messages=ask(), max_tokens=12, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == tokenizer.decode(script[:12])
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]


def test_the_engines_eos_ends_the_reply_with_stop(client, tokenizer, script):
    reply = client.completions.create(model="m", prompt="Once", max_tokens=len(script) + 5)
    assert reply.choices[0].finish_reason == "stop"
    assert reply.choices[0].text == tokenizer.decode(script[:-1])


def test_a_stop_string_ends_the_reply_and_aborts_the_engines_request(client, sglang):
    reply = client.chat.completions.create(model="m", messages=ask(), max_tokens=200, stop=["END"])
    assert reply.choices[0].message.content == ANSWER.split("END")[0]
    assert reply.choices[0].finish_reason == "stop"
    assert wait_aborted(sglang, seen(sglang)[-1]["rid"])


def test_sampling_parameters_and_guides_arrive_under_sglangs_names(client, sglang):
    client.chat.completions.create(model="m", messages=ask(), max_tokens=3, temperature=0.3, top_p=0.9, seed=7,
                                   presence_penalty=0.5, frequency_penalty=0.25,
                                   extra_body={"top_k": 5, "min_p": 0.1, "repetition_penalty": 1.2,
                                               "min_tokens": 2, "stop_token_ids": [11], "ignore_eos": True})
    params = seen(sglang)[-1]["sampling_params"]
    assert params == {"max_new_tokens": 3, "temperature": 0.3, "top_p": 0.9, "top_k": 5, "min_p": 0.1,
                      "sampling_seed": 7, "presence_penalty": 0.5, "frequency_penalty": 0.25,
                      "repetition_penalty": 1.2, "stop_token_ids": params["stop_token_ids"], "ignore_eos": True,
                      "min_new_tokens": 2}
    assert 11 in params["stop_token_ids"]
    client.chat.completions.create(model="m", messages=ask(), max_tokens=3, response_format={
        "type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}})
    assert json.loads(seen(sglang)[-1]["sampling_params"]["json_schema"]) == SCHEMA
    client.chat.completions.create(model="m", messages=ask("Weather in Paris?"), max_tokens=3, tools=TOOLS,
                                   tool_choice="required")
    regex = seen(sglang)[-1]["sampling_params"]["regex"]
    assert "<tool_call>" in regex and "get_weather" in regex


def test_logprobs_come_from_the_engine(client, tokenizer, script):
    stream = client.chat.completions.create(model="m", messages=ask(), max_tokens=4, logprobs=True,
                                            top_logprobs=2, stream=True)
    content = [entry for chunk in stream if chunk.choices and chunk.choices[0].logprobs
               for entry in chunk.choices[0].logprobs.content]
    assert [entry.token for entry in content] == [tokenizer.decode([token]) for token in script[:4]]
    assert [entry.logprob for entry in content] == [-0.5] * 4
    assert [[alt.logprob for alt in entry.top_logprobs] for entry in content] == [[-0.5, -1.5]] * 4


def test_a_client_that_goes_away_aborts_the_engines_request(client, sglang):
    before = len(seen(sglang))
    stream = client.chat.completions.create(model="m", messages=ask(), max_tokens=250, stream=True)
    for _, _chunk in zip(range(3), stream):
        pass
    stream.close()
    assert wait_aborted(sglang, seen(sglang)[before]["rid"])


def test_the_cli_names_the_sglang_engine():
    assert isinstance(engine_for("sglang", "http://127.0.0.1:1"), SglangEngine)


async def _collect(engine, request_id: str) -> list:
    outputs = []
    while not outputs or outputs[-1].finish is None:
        outputs += [out for out in await engine.outputs() if out.request_id == request_id]
    return outputs


def test_the_adapter_maps_sglangs_answers(sglang, script):
    """Straight to the adapter: a prompt past the context (SGLang's error event after its 200) ends the request
    with finish "error", code invalid; /abort_request ends it with "abort"; ids arrive once whichever way
    SGLang streams them; the context length is SGLang's."""
    async def run():
        engine = SglangEngine(sglang)
        await engine.start(None)
        try:
            assert engine.max_model_len == 4096
            await engine.add("long", [1] * 4000, SamplingParams(max_tokens=200))
            outputs = await _collect(engine, "long")
            assert outputs[-1].finish == "error" and outputs[-1].error.code == ErrorCode.INVALID
            assert "context" in str(outputs[-1].error)
            await engine.add("whole", [1, 2, 3], SamplingParams(max_tokens=30, logprobs=0))
            outputs = await _collect(engine, "whole")
            assert [i for out in outputs for i in out.ids] == script[:30]
            assert [lp for out in outputs for lp in out.logprobs] == [(-0.5, [(t, -0.5)]) for t in script[:30]]
            assert outputs[-1].finish == "length"
            with pytest.raises(EngineError) as refused:
                await engine.add("empty", [], SamplingParams(max_tokens=4))
            assert refused.value.code == ErrorCode.INVALID
            await asyncio.gather(*engine.tasks.values())
            assert engine.running() == 0
        finally:
            await engine.close()

    asyncio.run(run())
