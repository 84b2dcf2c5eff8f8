"""The `vllm` engine adapter against vLLM 0.33's own tokens-only server, driven through `tokworker api
--engine vllm --engine-url ...` with the `openai` SDK.

Real: vLLM's FastAPI app and scale-out routers (POST /inference/v1/generate, /inference/v1/abort_requests),
its GenerateRequest / SamplingParams validation, ServingTokens (its request ids, SSE chunk and logprob
shapes, error responses), the ASGI server (uvicorn), vLLM's /v1/models; on our side the adapter, the pool
and `tokworker api` in processes of their own. Standing in: the engine, a scripted EngineClient in
tests/vllm_generate_server.py that generates a fixed list of ids (tests/engine_servers.script_ids) one per
step and records what it was asked (prompt ids, vLLM's parsed SamplingParams) and what was aborted.

vLLM lives in a venv of its own (it pins transformers and needs torch): the tests skip unless it is at
$TOKWORKER_VLLM_PYTHON or /work/venv/vllm/bin/python (bench/README.md says how to make it; this server also
needs uvicorn, orjson, llguidance, blake3, lm-format-enforcer, outlines_core, prometheus-fastapi-instrumentator,
anthropic, model-hosting-container-standards, python-json-logger, setproctitle, watchfiles and einops)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import openai
import pytest
import requests

from engine_servers import ANSWER, front_door, free_port, process, script_ids
from realdata import vocabulary
from tokworker import Tokenizer
from tokworker.api.run import engine_for
from tokworker.engines.base import EngineError, Guide, SamplingParams
from tokworker.engines.vllm import VllmEngine
from tokworker.protocol.messages import ErrorCode

VLLM_PYTHON = Path(os.environ.get("TOKWORKER_VLLM_PYTHON", "/work/venv/vllm/bin/python"))
SERVER = Path(__file__).with_name("vllm_generate_server.py")
FAIL_SEED = 666                               # the stand-in fails a request with this seed after two ids
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


@pytest.fixture(scope="module")
def vllm(model_dir, script, tmp_path_factory):
    """vLLM's tokens-only server with the stand-in engine (0.02 s a step); yields its base URL."""
    if not VLLM_PYTHON.exists():
        pytest.skip(f"no vLLM venv at {VLLM_PYTHON} (set TOKWORKER_VLLM_PYTHON; bench/README.md makes one)")
    folder = tmp_path_factory.mktemp("vllm")
    (folder / "script.json").write_text(json.dumps(script))
    port = free_port()
    command = [str(VLLM_PYTHON), str(SERVER), "--model", str(model_dir), "--host", "127.0.0.1", "--port",
               str(port), "--script", str(folder / "script.json"), "--step-s", "0.02", "--max-model-len", "4096"]
    with process(command, f"http://127.0.0.1:{port}/v1/models", 300, folder / "vllm.log"):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def front(vllm, model_dir, tmp_path_factory):
    with front_door(model_dir, "vllm", vllm, tmp_path_factory.mktemp("front") / "api.log") as url:
        yield url


@pytest.fixture(scope="module")
def client(front):
    return openai.OpenAI(base_url=front + "/v1", api_key="unused", max_retries=0)


def seen(vllm) -> list[dict]:
    """What the stand-in engine was asked, oldest first."""
    return requests.get(vllm + "/standin/requests").json()


def aborted(vllm) -> list[str]:
    return requests.get(vllm + "/standin/aborted").json()


def ask(text: str = "Say hello.") -> list[dict]:
    return [{"role": "user", "content": text}]


def test_whole_and_streamed_replies_are_the_engines_ids_decoded(client, vllm, tokenizer, script):
    whole = client.chat.completions.create(model="m", messages=ask(), max_tokens=12)
    assert whole.choices[0].message.content == tokenizer.decode(script[:12])
    assert whole.choices[0].finish_reason == "length"
    asked = seen(vllm)[-1]
    assert asked["sampling_params"]["max_tokens"] == 12 and asked["sampling_params"]["detokenize"] is False
    rendered = requests.post(client.base_url.scheme + "://" + client.base_url.netloc.decode() + "/tokenize",
                             json={"messages": ask()}).json()["tokens"]
    assert asked["prompt_token_ids"] == rendered
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens) == (len(rendered), 12)

    chunks = list(client.chat.completions.create(model="m", messages=ask(), max_tokens=12, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == tokenizer.decode(script[:12])
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]


def test_the_engines_eos_ends_the_reply_with_stop(client, tokenizer, script):
    """The whole script ends with <|im_end|>: the stand-in finishes "stop" there, as vLLM does on eos."""
    reply = client.completions.create(model="m", prompt="Once", max_tokens=len(script) + 5)
    assert reply.choices[0].finish_reason == "stop"
    assert reply.choices[0].text == tokenizer.decode(script[:-1])


def test_a_stop_string_ends_the_reply_and_aborts_the_engines_request(client, vllm):
    reply = client.chat.completions.create(model="m", messages=ask(), max_tokens=200, stop=["END"])
    assert reply.choices[0].message.content == ANSWER.split("END")[0]
    assert reply.choices[0].finish_reason == "stop"
    engine_id = seen(vllm)[-1]["request_id"]
    deadline = time.monotonic() + 10
    while engine_id not in aborted(vllm) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine_id in aborted(vllm)


def test_sampling_parameters_arrive_under_vllms_names(client, vllm):
    client.chat.completions.create(model="m", messages=ask(), max_tokens=3, temperature=0.3, top_p=0.9, seed=7,
                                   presence_penalty=0.5, frequency_penalty=0.25,
                                   extra_body={"top_k": 5, "min_p": 0.1, "repetition_penalty": 1.2,
                                               "min_tokens": 2, "stop_token_ids": [11]})
    params = seen(vllm)[-1]["sampling_params"]
    assert {k: params[k] for k in ("temperature", "top_p", "seed", "presence_penalty", "frequency_penalty",
                                   "top_k", "min_p", "repetition_penalty", "min_tokens", "max_tokens")} == \
        {"temperature": 0.3, "top_p": 0.9, "seed": 7, "presence_penalty": 0.5, "frequency_penalty": 0.25,
         "top_k": 5, "min_p": 0.1, "repetition_penalty": 1.2, "min_tokens": 2, "max_tokens": 3}
    assert 11 in params["stop_token_ids"]
    client.chat.completions.create(model="m", messages=ask(), max_tokens=3)
    params = seen(vllm)[-1]["sampling_params"]             # unset knobs: vLLM's own defaults
    assert (params["temperature"], params["top_p"], params["top_k"], params["seed"]) == (1.0, 1.0, 0, None)


def test_logprobs_come_from_the_engine(client, tokenizer, script):
    reply = client.chat.completions.create(model="m", messages=ask(), max_tokens=4, logprobs=True, top_logprobs=2)
    content = reply.choices[0].logprobs.content
    assert [entry.token for entry in content] == [tokenizer.decode([token]) for token in script[:4]]
    assert [entry.logprob for entry in content] == [-0.5] * 4
    assert [[alt.logprob for alt in entry.top_logprobs] for entry in content] == [[-0.5, -1.5]] * 4
    assert [alt.token for alt in content[0].top_logprobs] == [tokenizer.decode([script[0]]),
                                                            tokenizer.decode([script[0] + 1])]


def test_guides_become_vllms_structured_outputs(client, vllm):
    client.chat.completions.create(model="m", messages=ask(), max_tokens=3, response_format={
        "type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}})
    assert seen(vllm)[-1]["sampling_params"]["structured_outputs"] == {"json": SCHEMA}
    client.chat.completions.create(model="m", messages=ask("Weather in Paris?"), max_tokens=3, tools=TOOLS,
                                   tool_choice="required")
    regex = seen(vllm)[-1]["sampling_params"]["structured_outputs"]["regex"]
    assert "<tool_call>" in regex and "get_weather" in regex


def test_a_client_that_goes_away_aborts_the_engines_request(client, vllm):
    before = len(seen(vllm))
    stream = client.chat.completions.create(model="m", messages=ask(), max_tokens=250, stream=True)
    for _, _chunk in zip(range(3), stream):
        pass
    stream.close()
    engine_id = seen(vllm)[before]["request_id"]
    deadline = time.monotonic() + 10
    while engine_id not in aborted(vllm) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine_id in aborted(vllm)


def test_the_cli_names_the_vllm_engine():
    assert isinstance(engine_for("vllm", "http://127.0.0.1:1"), VllmEngine)
    with pytest.raises(ValueError, match="--engine-url"):
        engine_for("vllm")


async def _collect(engine: VllmEngine, request_id: str) -> list:
    outputs = []
    while not outputs or outputs[-1].finish is None:
        outputs += [out for out in await engine.outputs() if out.request_id == request_id]
    return outputs


def test_the_adapter_maps_vllms_refusals_and_failures_to_engine_errors(vllm, script):
    """Straight to the adapter: vLLM's 400 for an empty prompt is add()'s EngineError (invalid); a request the
    engine fails after two ids ends with finish "error"; the context length is vLLM's."""
    async def run():
        engine = VllmEngine(vllm)
        await engine.start(None)
        try:
            assert engine.max_model_len == 4096
            with pytest.raises(EngineError) as refused:
                await engine.add("empty", [], SamplingParams(max_tokens=4))
            assert refused.value.code == ErrorCode.INVALID and "token_ids" in str(refused.value)
            await engine.add("fails", [1, 2, 3], SamplingParams(max_tokens=10, seed=FAIL_SEED))
            outputs = await _collect(engine, "fails")
            assert outputs[-1].finish == "error" and outputs[-1].error.code == ErrorCode.INTERNAL
            assert [i for out in outputs for i in out.ids] == script[:1]     # the failing step's id never came
            await engine.add("logprobs", [1, 2, 3], SamplingParams(max_tokens=2, logprobs=0))
            outputs = await _collect(engine, "logprobs")
            assert [i for out in outputs for i in out.ids] == script[:2]
            assert [lp for out in outputs for lp in out.logprobs] == [(-0.5, [(t, -0.5)]) for t in script[:2]]
            with pytest.raises(EngineError) as bad_guide:
                engine.body("x", [1], SamplingParams(max_tokens=1, guide=Guide(tools=TOOLS, tool_name="nope")))
            assert bad_guide.value.code == ErrorCode.INVALID
            await asyncio.gather(*engine.tasks.values())      # each request's task ends with its finish
            assert engine.running() == 0
        finally:
            await engine.close()

    asyncio.run(run())
