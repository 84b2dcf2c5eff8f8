"""What the HTTP engine adapters' tests share (tests/test_engine_vllm.py, tests/test_engine_sglang.py): an
engine server (vLLM's own, or a stand-in) and `tokworker api` in front of it, each a process on a free
loopback port, waited for over HTTP and stopped at the end; the ids a stand-in engine generates; what the
stand-ins recorded (GET /standin/requests, /standin/aborted); and the checks both adapters must pass through
the front door with the `openai` SDK (the test_ functions: a test module imports them with the fixtures,
gives the fixture `engine`, its engine server's URL, and names ENGINE, the --engine it is, and ENGINE_ID and
ENGINE_PROMPT, the fields of a request its stand-in recorded that hold the id the engine knows it by and the
prompt's ids)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

import pytest
import requests

from realdata import vocabulary
from tokworker import Tokenizer
from tools.llama_server import free_port, stop, wait_healthy

ANSWER = "Hello there, 日本語 🧑‍🚀 naïve café. Answer: 42. END and then"
SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
KNOBS = dict(temperature=0.3, top_p=0.9, seed=7, presence_penalty=0.5, frequency_penalty=0.25,
             extra_body={"top_k": 5, "min_p": 0.1, "repetition_penalty": 1.2, "min_tokens": 2,
                         "stop_token_ids": [11]})


@pytest.fixture(scope="module")
def model_dir():
    """The Qwen3 vocabulary: the front door's model folder and the engine's."""
    return vocabulary("qwen3_dir")


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    return Tokenizer.from_dir(model_dir)


@pytest.fixture(scope="module")
def script(tokenizer) -> list[int]:
    """What the stand-in engines generate: ANSWER, 150 more words (more than the longest max_tokens asked), then
    <|im_end|> (Qwen3's eos)."""
    text = ANSWER + "".join(f" word{i}" for i in range(150))
    return tokenizer.encode(text) + [tokenizer.token_to_id("<|im_end|>")]


@pytest.fixture(scope="module")
def front(request, engine, model_dir, tmp_path_factory):
    """`tokworker api --engine ENGINE --engine-url ...` in front of the module's `engine`: its base URL."""
    with front_door(model_dir, request.module.ENGINE, engine, tmp_path_factory.mktemp("front") / "api.log") as url:
        yield url


@pytest.fixture(scope="module")
def client(front):
    """The openai SDK on the module's `front` (the front door's base URL)."""
    import openai

    return openai.OpenAI(base_url=front + "/v1", api_key="unused", max_retries=0)


@contextlib.contextmanager
def process(command: list[str], ready_url: str, timeout: float, log_path):
    """Run `command` until the block ends; wait until `ready_url` answers 200 (RuntimeError with the
    process's log when it dies or takes longer than `timeout`)."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        try:
            wait_healthy(ready_url, proc, timeout)
        except RuntimeError as error:
            tail = open(log_path, "rb").read()[-3000:].decode("utf-8", "replace")
            raise RuntimeError(f"{command[:3]}: {error}:\n{tail}") from None
        yield proc
    finally:
        stop(proc, 30)


@contextlib.contextmanager
def front_door(model_dir, engine: str, engine_url: str, log_path):
    """`tokworker api --engine ENGINE --engine-url URL` on a free port; yields its base URL."""
    port = free_port()
    command = [sys.executable, "-m", "tokworker.cli", "api", "--model-dir", str(model_dir), "--engine", engine,
               "--engine-url", engine_url, "--port", str(port), "--workers", "1", "--served-model-name", "m",
               "--tool-call-parser", "hermes"]
    with process(command, f"http://127.0.0.1:{port}/health", 120, log_path):
        yield f"http://127.0.0.1:{port}"


def seen(engine_url: str) -> list[dict]:
    """The requests the stand-in engine was asked, oldest first."""
    return requests.get(engine_url + "/standin/requests").json()


def wait_aborted(engine_url: str, engine_id: str, timeout: float = 10) -> bool:
    """Whether the engine's abort route got `engine_id` within `timeout` seconds (the adapter also closes
    the request's connection, which the engine may or may not notice first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if engine_id in requests.get(engine_url + "/standin/aborted").json()["posted"]:
            return True
        time.sleep(0.05)
    return False


def ask(text: str = "Say hello.") -> list[dict]:
    return [{"role": "user", "content": text}]


def test_whole_and_streamed_replies_are_the_engines_ids_decoded(request, client, front, engine, tokenizer, script):
    """Whole and streamed replies are the engine's ids decoded, cut at max_tokens ("length"), with usage; the
    engine got the front door's own render of the prompt."""
    whole = client.chat.completions.create(model="m", messages=ask(), max_tokens=12)
    assert whole.choices[0].message.content == tokenizer.decode(script[:12])
    assert whole.choices[0].finish_reason == "length"
    prompt = requests.post(front + "/tokenize", json={"messages": ask()}).json()["tokens"]
    assert seen(engine)[-1][request.module.ENGINE_PROMPT] == prompt
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens) == (len(prompt), 12)
    chunks = list(client.chat.completions.create(model="m", messages=ask(), max_tokens=12, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == tokenizer.decode(script[:12])
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    assert seen(engine)[-1][request.module.ENGINE_PROMPT] == prompt     # (the worker packed it for the API process)


def test_the_engines_eos_ends_the_reply_with_stop(client, tokenizer, script):
    """The script ends with <|im_end|>: the engine finishes "stop" there and the text leaves it out."""
    reply = client.completions.create(model="m", prompt="Once", max_tokens=len(script) + 5)
    assert reply.choices[0].finish_reason == "stop"
    assert reply.choices[0].text == tokenizer.decode(script[:-1])


def test_a_stop_string_ends_the_reply_and_aborts_the_engines_request(request, client, engine):
    """A stop string (found by the text side) ends the reply there and aborts the engine's request."""
    reply = client.chat.completions.create(model="m", messages=ask(), max_tokens=200, stop=["END"])
    assert reply.choices[0].message.content == ANSWER.split("END")[0]
    assert reply.choices[0].finish_reason == "stop"
    assert wait_aborted(engine, seen(engine)[-1][request.module.ENGINE_ID])


def test_a_client_that_goes_away_aborts_the_engines_request(request, client, engine):
    before = len(seen(engine))
    stream = client.chat.completions.create(model="m", messages=ask(), max_tokens=250, stream=True)
    for _, _chunk in zip(range(3), stream):
        pass
    stream.close()
    assert wait_aborted(engine, seen(engine)[before][request.module.ENGINE_ID])


def test_logprobs_come_from_the_engine(client, tokenizer, script):
    """The stand-ins give each id -0.5 and its runner-up (id + 1) -1.5: whole and streamed, the front door
    reports those with the tokens' text."""
    whole = client.chat.completions.create(model="m", messages=ask(), max_tokens=4, logprobs=True, top_logprobs=2)
    stream = client.chat.completions.create(model="m", messages=ask(), max_tokens=4, logprobs=True,
                                            top_logprobs=2, stream=True)
    streamed = [entry for chunk in stream if chunk.choices and chunk.choices[0].logprobs
                for entry in chunk.choices[0].logprobs.content]
    for content in (whole.choices[0].logprobs.content, streamed):
        assert [entry.token for entry in content] == [tokenizer.decode([token]) for token in script[:4]]
        assert [entry.logprob for entry in content] == [-0.5] * 4
        assert [[alt.logprob for alt in entry.top_logprobs] for entry in content] == [[-0.5, -1.5]] * 4
        assert [alt.token for alt in content[0].top_logprobs] == [tokenizer.decode([script[0]]),
                                                                tokenizer.decode([script[0] + 1])]


def check_guides(client, engine_url: str) -> list[dict]:
    """A response_format schema and a forced tool call reach the engine: returns the two requests it saw."""
    client.chat.completions.create(model="m", messages=ask(), max_tokens=3, response_format={
        "type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}})
    client.chat.completions.create(model="m", messages=ask("Weather in Paris?"), max_tokens=3, tools=TOOLS,
                                   tool_choice="required")
    return seen(engine_url)[-2:]


async def collect(engine, request_id: str) -> list:
    """An engine's outputs for one request, up to its finish."""
    outputs = []
    while not outputs or outputs[-1].finish is None:
        outputs += [out for out in await engine.outputs() if out.request_id == request_id]
    return outputs
