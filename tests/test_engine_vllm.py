"""The `vllm` engine adapter against vLLM 0.33's own tokens-only server, driven through `tokworker api
--engine vllm --engine-url ...` with the `openai` SDK.

Real: vLLM's FastAPI app and scale-out routers (POST /inference/v1/generate, /inference/v1/abort_requests),
its GenerateRequest / SamplingParams validation, ServingTokens (its request ids, SSE chunk and logprob
shapes, error responses), vLLM's /v1/models, the ASGI server (uvicorn); on our side the adapter, the pool
and `tokworker api` in processes of their own. Standing in: the engine, a scripted EngineClient in
tests/vllm_generate_server.py that generates a fixed list of ids (engine_servers.script) one per step and
records what it was asked (prompt ids, vLLM's parsed SamplingParams) and what was aborted.

vLLM lives in a venv of its own (it pins transformers and needs torch): these tests skip unless it is at
$TOKWORKER_VLLM_PYTHON or /work/venv/vllm/bin/python. bench/README.md says how to make it; serving also
needs uvicorn orjson 'llguidance>=1.7,<1.8' blake3 lm-format-enforcer==0.11.3 outlines_core==0.2.14
prometheus-fastapi-instrumentator anthropic 'model-hosting-container-standards<1' python-json-logger
setproctitle watchfiles einops in it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from engine_servers import KNOBS, SCHEMA, TOOLS, check_guides, collect, free_port, process, seen
from engine_servers import client, front, model_dir, script, tokenizer  # noqa: F401,F811 (fixtures)
from engine_servers import (test_a_client_that_goes_away_aborts_the_engines_request,  # noqa: F401 (shared tests)
                            test_a_stop_string_ends_the_reply_and_aborts_the_engines_request,
                            test_logprobs_come_from_the_engine, test_the_engines_eos_ends_the_reply_with_stop,
                            test_whole_and_streamed_replies_are_the_engines_ids_decoded)
from tokworker.api.run import engine_for
from tokworker.engines.base import EngineError, Guide, SamplingParams
from tokworker.engines.vllm import VllmEngine
from bench.vllm_render import PYTHON
from tokworker.protocol.messages import ErrorCode

pytestmark = pytest.mark.slow  # vLLM's server and the front door

VLLM_PYTHON = Path(PYTHON)                    # TOKWORKER_VLLM_PYTHON, as the bench reads it
SERVER = Path(__file__).with_name("vllm_generate_server.py")
ENGINE, ENGINE_ID, ENGINE_PROMPT = "vllm", "request_id", "prompt_token_ids"    # what engine_servers reads
FAIL_SEED = 666                               # the stand-in fails a request with this seed after two ids


@pytest.fixture(scope="module")
def engine(model_dir, script, tmp_path_factory):
    """vLLM's tokens-only server with the stand-in engine (0.02 s a step); yields its base URL."""
    if not VLLM_PYTHON.exists():
        pytest.skip(f"no vLLM venv at {VLLM_PYTHON} (set TOKWORKER_VLLM_PYTHON; bench/README.md makes one)")
    folder = tmp_path_factory.mktemp("vllm")
    (folder / "script.json").write_text(json.dumps(script))
    port = free_port()
    command = [str(VLLM_PYTHON), str(SERVER), "--model", str(model_dir), "--host", "127.0.0.1", "--port",
               str(port), "--script", str(folder / "script.json"), "--step-s", "0.01", "--max-model-len", "4096"]
    with process(command, f"http://127.0.0.1:{port}/v1/models", 300, folder / "vllm.log"):
        yield f"http://127.0.0.1:{port}"


def test_sampling_parameters_arrive_under_vllms_names(client, engine):
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=3, **KNOBS)
    params = seen(engine)[-1]["sampling_params"]
    assert {k: params[k] for k in ("temperature", "top_p", "seed", "presence_penalty", "frequency_penalty",
                                   "top_k", "min_p", "repetition_penalty", "min_tokens", "max_tokens")} == \
        {"temperature": 0.3, "top_p": 0.9, "seed": 7, "presence_penalty": 0.5, "frequency_penalty": 0.25,
         "top_k": 5, "min_p": 0.1, "repetition_penalty": 1.2, "min_tokens": 2, "max_tokens": 3}
    assert 11 in params["stop_token_ids"] and params["detokenize"] is False     # tokworker reads the ids
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=3)
    params = seen(engine)[-1]["sampling_params"]             # unset knobs: vLLM's own defaults
    assert (params["temperature"], params["top_p"], params["top_k"], params["seed"]) == (1.0, 1.0, 0, None)


def test_guides_become_vllms_structured_outputs(client, engine):
    schema, tool = (asked["sampling_params"]["structured_outputs"] for asked in check_guides(client, engine))
    assert schema == {"json": SCHEMA}
    assert "<tool_call>" in tool["regex"] and "get_weather" in tool["regex"]


def test_the_cli_names_the_vllm_engine():
    assert isinstance(engine_for("vllm", "http://127.0.0.1:1"), VllmEngine)
    with pytest.raises(ValueError, match="--engine-url"):
        engine_for("vllm")


def test_the_adapter_maps_vllms_refusals_and_failures_to_engine_errors(engine, script):
    """Straight to the adapter: vLLM's 400 for an empty prompt is add()'s EngineError (invalid); a request the
    engine fails after two ids ends with finish "error" (the engine's error, 502); the context length is vLLM's."""
    async def run():
        adapter = VllmEngine(engine)
        await adapter.start(None)
        try:
            assert adapter.max_model_len == 4096
            with pytest.raises(EngineError) as refused:
                await adapter.add("empty", [], SamplingParams(max_tokens=4))
            assert refused.value.code == ErrorCode.INVALID and "token_ids" in str(refused.value)
            await adapter.add("fails", [1, 2, 3], SamplingParams(max_tokens=10, seed=FAIL_SEED))
            outputs = await collect(adapter, "fails")
            assert outputs[-1].finish == "error" and outputs[-1].error.code == ErrorCode.ENGINE_ERROR
            assert [i for out in outputs for i in out.ids] == script[:1]     # the failing step's id never came
            await adapter.add("logprobs", [1, 2, 3], SamplingParams(max_tokens=2, logprobs=0))
            outputs = await collect(adapter, "logprobs")
            assert [i for out in outputs for i in out.ids] == script[:2]
            assert [lp for out in outputs for lp in out.logprobs] == [(-0.5, [(t, -0.5)]) for t in script[:2]]
            with pytest.raises(EngineError) as bad_guide:
                adapter.body("x", [1], SamplingParams(max_tokens=1, guide=Guide(tools=TOOLS, tool_name="nope")))
            assert bad_guide.value.code == ErrorCode.INVALID
            await asyncio.gather(*adapter.tasks.values())      # each request's task ends with its finish
            assert adapter.running() == 0
        finally:
            await adapter.close()

    asyncio.run(run())
