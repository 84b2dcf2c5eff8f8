"""The `sglang` engine adapter against a stand-in for SGLang's server, driven through `tokworker api --engine
sglang --engine-url ...` with the `openai` SDK, in both of SGLang's streaming modes (every id so far in each
event, its default; only the new ones, --incremental-streaming-output).

Real: the adapter, the pool and `tokworker api` in processes of their own, HTTP over loopback. Standing in:
SGLang's server (tests/sglang_generate_server.py, an aiohttp app): SGLang's HTTP server needs its GPU
scheduler and model-runner processes, so the stand-in serves the request and event shapes read from SGLang
0.5.23's code (GenerateReqInput, SamplingParams' names, the skip_tokenizer_init event dicts, the finish
reasons, /abort_request) and generates a fixed list of ids (engine_servers.script).
Covers tokworker.engines.sglang and tokworker.engines.http (the HTTP-streaming base)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from engine_servers import KNOBS, SCHEMA, check_guides, collect, free_port, process, seen
from engine_servers import client, front, model_dir, script, tokenizer  # noqa: F401,F811 (fixtures)
from engine_servers import (test_a_client_that_goes_away_aborts_the_engines_request,  # noqa: F401 (shared tests)
                            test_a_stop_string_ends_the_reply_and_aborts_the_engines_request,
                            test_logprobs_come_from_the_engine, test_the_engines_eos_ends_the_reply_with_stop,
                            test_whole_and_streamed_replies_are_the_engines_ids_decoded)
from tokworker.api.run import engine_for
from tokworker.engines.base import EngineError, SamplingParams
from tokworker.engines.sglang import SglangEngine
from tokworker.protocol.messages import ErrorCode

pytestmark = pytest.mark.slow  # engine servers and the front door

SERVER = Path(__file__).with_name("sglang_generate_server.py")
ENGINE, ENGINE_ID, ENGINE_PROMPT = "sglang", "rid", "input_ids"                 # what engine_servers reads


@pytest.fixture(scope="module", params=["cumulative", "incremental"])
def engine(request, script, tmp_path_factory):
    folder = tmp_path_factory.mktemp("sglang")
    (folder / "script.json").write_text(json.dumps(script))
    port = free_port()
    command = [sys.executable, str(SERVER), "--port", str(port), "--script", str(folder / "script.json"),
               "--step-s", "0.01"] + (["--incremental"] if request.param == "incremental" else [])
    with process(command, f"http://127.0.0.1:{port}/health", 60, folder / "sglang.log"):
        yield f"http://127.0.0.1:{port}"


def test_sampling_parameters_and_guides_arrive_under_sglangs_names(client, engine):
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=3,
                                   **{**KNOBS, "extra_body": {**KNOBS["extra_body"], "ignore_eos": True}})
    params = seen(engine)[-1]["sampling_params"]
    assert params == {"max_new_tokens": 3, "temperature": 0.3, "top_p": 0.9, "top_k": 5, "min_p": 0.1,
                      "sampling_seed": 7, "presence_penalty": 0.5, "frequency_penalty": 0.25,
                      "repetition_penalty": 1.2, "stop_token_ids": params["stop_token_ids"], "ignore_eos": True,
                      "min_new_tokens": 2}
    assert 11 in params["stop_token_ids"]
    schema, tool = (asked["sampling_params"] for asked in check_guides(client, engine))
    assert json.loads(schema["json_schema"]) == SCHEMA
    assert "<tool_call>" in tool["regex"] and "get_weather" in tool["regex"]


def test_the_cli_names_the_sglang_engine():
    assert isinstance(engine_for("sglang", "http://127.0.0.1:1"), SglangEngine)


def test_the_adapter_maps_sglangs_answers(engine, script):
    """Straight to the adapter: a prompt past the context (SGLang's error event after its 200) ends the request
    with finish "error", code invalid; ids and logprobs arrive once whichever way SGLang streams them; an
    unservable request is add()'s EngineError; the context length is SGLang's."""
    async def run():
        adapter = SglangEngine(engine)
        await adapter.start(None)
        try:
            assert adapter.max_model_len == 4096
            await adapter.add("long", [1] * 4000, SamplingParams(max_tokens=200))
            outputs = await collect(adapter, "long")
            assert outputs[-1].finish == "error" and outputs[-1].error.code == ErrorCode.INVALID
            assert "context" in str(outputs[-1].error)
            await adapter.add("whole", [1, 2, 3], SamplingParams(max_tokens=30, logprobs=0))
            outputs = await collect(adapter, "whole")
            assert [i for out in outputs for i in out.ids] == script[:30]
            assert [lp for out in outputs for lp in out.logprobs] == [(-0.5, [(t, -0.5)]) for t in script[:30]]
            assert outputs[-1].finish == "length"
            with pytest.raises(EngineError) as refused:
                await adapter.add("empty", [], SamplingParams(max_tokens=4))
            assert refused.value.code == ErrorCode.INVALID
            await asyncio.gather(*adapter.tasks.values())
            assert adapter.running() == 0
        finally:
            await adapter.close()

    asyncio.run(run())


def test_an_event_past_max_event_bytes_ends_the_request(request, engine, script):
    """Events are bounded in bytes: with logprobs, SGLang's default events (every id and logprob so far) pass
    2 KiB within a few dozen ids and end the request with "engine_error" (502: the engine's answer, not the
    client's request, was too large); incremental ones stay small."""
    async def run():
        adapter = SglangEngine(engine, max_event_bytes=2048)
        await adapter.start(None)
        try:
            await adapter.add("big", [1, 2, 3], SamplingParams(max_tokens=100, logprobs=5))
            return await collect(adapter, "big")
        finally:
            await adapter.close()

    outputs = asyncio.run(run())
    ids = [i for out in outputs for i in out.ids]
    if request.node.callspec.params["engine"] == "cumulative":
        assert outputs[-1].finish == "error" and outputs[-1].error.code == ErrorCode.ENGINE_ERROR
        assert ids == script[:len(ids)] and 5 < len(ids) < 100
    else:
        assert outputs[-1].finish == "length" and ids == script[:100]
