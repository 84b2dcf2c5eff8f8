"""One home per wire format (tokworker.wire): a whole body says what the streamed events say, by
construction, and every error comes out in its API's own shape wherever it happens.

The property: one TextStream's updates feed a format's streamed writer and its whole gatherer at once (as
the worker does for whichever the request asked), grouped into engine steps however hypothesis likes; the
events, joined as a client joins them, and the whole body agree on the text, the reasoning, every tool call
with its id, the logprob tokens, the usage and the finish. Then a real front door (tests/api_server.py,
worker processes, real sockets) answers errors in each API's shape: a prompt over the context, an engine
failure mid-stream (a replay engine that fails after a few tokens: a stand-in for an engine's own
failure), and the same routes mounted under a prefix.
Covers tokworker.wire, tokworker.api.generation and tokworker.api.serving."""

from __future__ import annotations

import json

import anthropic
from anthropic.types import ErrorResponse
import openai
import pytest
import requests
from aiohttp import web
from hypothesis import example, given, settings, strategies as st

from api_server import TOOLS, running, script as scenario_script
from tests.test_wire_formats import SCRIPTS, TOKENIZER, events, logprobs_for
from tokworker.api.options import ApiOptions
from tokworker.engines.base import EngineError, EngineOutput
from tokworker.engines.replay import ReplayEngine
from tokworker.protocol.deltas import ChunkFormat, StreamParams
from tokworker.protocol.messages import ErrorCode
from tokworker.stream.state import TextStream
from tokworker.wire import APIS, home

MODEL = "tokworker-test"


def both(api: str, script: int, sizes: list[int], *, eos: bool = True, max_tokens=None, logprobs: bool = True):
    """(the streamed events' bytes, the whole body) of one stream's updates, written both ways at once."""
    text, extra = SCRIPTS[script]
    ids = TOKENIZER.encode(text) + ([TOKENIZER.eos_token_ids[0]] if eos else [])
    params = StreamParams(**extra, logprobs=2 if logprobs else None, include_usage=True, max_tokens=max_tokens)
    stream = TextStream(TOKENIZER, params, prompt_ids=[1, 2, 3], prompt_text="<|im_start|>assistant\n")
    fmt = ChunkFormat(id=home(api).id_prefix + "1", model="m", created=1700000000, api=api, token_ids=True)
    writer = home(api).writer(fmt, params, [1, 2, 3], TOKENIZER)
    whole = home(api).whole(fmt, params, [1, 2, 3], TOKENIZER)
    lps = logprobs_for(ids)
    out, at, k = [], 0, 0
    usage = None
    while not stream.done:
        size = sizes[k % len(sizes)]
        k += 1
        if at < len(ids):
            step = ids[at:at + size]
            update = stream.push(step, lps[at:at + size] if logprobs else None)
            at += size
        else:
            step, update = [], stream.finish()
        out.append(writer.sse(update))
        whole.add(update, step)
        usage = update.usage or usage
    body = home(api).body(fmt, [whole.fragment()], [usage], 3, None)
    return b"".join(out), json.loads(body)


def said_streamed(api: str, raw: bytes) -> dict:
    """What a client joins from the events: text, reasoning, calls [id, name, arguments], tokens, usage, finish."""
    text, reasoning, calls, tokens, usage, finish = "", "", {}, [], None, None
    for name, data in events(api, raw):
        if api in ("chat", "completions"):
            if not data["choices"]:
                usage = data["usage"]
                continue
            choice = data["choices"][0]
            finish = choice["finish_reason"] or finish
            if api == "completions":
                text += choice["text"]
                tokens += (choice["logprobs"] or {}).get("tokens", [])
                continue
            delta = choice["delta"]
            text += delta.get("content") or ""
            reasoning += delta.get("reasoning_content") or ""
            for call in delta.get("tool_calls") or ():
                entry = calls.setdefault(call["index"], [None, "", ""])
                entry[0] = entry[0] or call.get("id")
                entry[1] += call["function"].get("name") or ""
                entry[2] += call["function"].get("arguments") or ""
            tokens += [e["token"] for e in (choice["logprobs"] or {}).get("content") or ()]
        elif api == "responses":
            if name == "response.output_text.delta":
                text += data["delta"]
                tokens += [e["token"] for e in data["logprobs"]]
            elif name == "response.reasoning_text.delta":
                reasoning += data["delta"]
            elif name == "response.output_item.added" and data["item"]["type"] == "function_call":
                calls[len(calls)] = [(data["item"]["id"], data["item"]["call_id"]), data["item"]["name"], ""]
            elif name == "response.function_call_arguments.delta":
                calls[len(calls) - 1][2] += data["delta"]
            elif name == "response.completed":
                usage, finish = data["response"]["usage"], data["response"]["status"]
        else:
            if name == "message_start":
                usage = data["message"]["usage"]
            elif name == "content_block_start" and data["content_block"]["type"] == "tool_use":
                calls[len(calls)] = [data["content_block"]["id"], data["content_block"]["name"], ""]
            elif name == "content_block_delta":
                delta = data["delta"]
                text += delta.get("text", "")
                reasoning += delta.get("thinking", "")
                if delta["type"] == "input_json_delta":
                    calls[len(calls) - 1][2] += delta["partial_json"]
            elif name == "message_delta":
                usage = {**usage, **data["usage"]}
                finish = data["delta"]["stop_reason"]
    return {"text": text, "reasoning": reasoning, "calls": list(calls.values()), "tokens": tokens, "usage": usage,
            "finish": finish}


def said_whole(api: str, body: dict) -> dict:
    """The same facts read from a whole body."""
    if api == "chat":
        choice = body["choices"][0]
        message = choice["message"]
        assert message.get("tool_calls") != []                   # OpenAI refuses an empty list sent back
        return {"text": message["content"] or "", "reasoning": message.get("reasoning_content") or "",
                "calls": [[c["id"], c["function"]["name"], c["function"]["arguments"]]
                          for c in message.get("tool_calls", ())],
                "tokens": [e["token"] for e in choice["logprobs"]["content"]], "usage": body["usage"],
                "finish": choice["finish_reason"]}
    if api == "completions":
        choice = body["choices"][0]
        return {"text": choice["text"], "reasoning": "", "calls": [], "tokens": choice["logprobs"]["tokens"],
                "usage": body["usage"], "finish": choice["finish_reason"]}
    if api == "responses":
        kinds = {kind: [item for item in body["output"] if item["type"] == kind]
                 for kind in ("message", "reasoning", "function_call")}
        return {"text": "".join(m["content"][0]["text"] for m in kinds["message"]),
                "reasoning": "".join(r["content"][0]["text"] for r in kinds["reasoning"]),
                "calls": [[(c["id"], c["call_id"]), c["name"], c["arguments"]] for c in kinds["function_call"]],
                "tokens": [e["token"] for m in kinds["message"] for e in m["content"][0]["logprobs"]],
                "usage": body["usage"], "finish": body["status"]}
    blocks = body["content"]
    return {"text": "".join(b["text"] for b in blocks if b["type"] == "text"),
            "reasoning": "".join(b["thinking"] for b in blocks if b["type"] == "thinking"),
            "calls": [[b["id"], b["name"], json.dumps(b["input"], ensure_ascii=False)] for b in blocks
                      if b["type"] == "tool_use"],
            "tokens": [], "usage": body["usage"], "finish": body["stop_reason"]}


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(APIS), st.sampled_from(range(len(SCRIPTS))), st.lists(st.integers(1, 9), min_size=1, max_size=5),
       st.booleans(), st.sampled_from([None, 6, 40]))
@example("anthropic", 2, [1], True, None)      # tool_use ids and input, one token a step
@example("chat", 2, [3], False, 40)            # a call cut by max_tokens: "length", never an empty tool_calls
def test_whole_says_what_the_stream_says(api, script, sizes, eos, max_tokens):
    raw, body = both(api, script, sizes, eos=eos, max_tokens=max_tokens)
    streamed, whole = said_streamed(api, raw), said_whole(api, body)
    if api == "anthropic":             # the whole body's input is parsed JSON; the stream sends its text
        for call in streamed["calls"]:
            try:
                call[2] = json.dumps(json.loads(call[2]), ensure_ascii=False)
            except json.JSONDecodeError:
                call[2] = "{}"
    assert whole == streamed
    for call in whole["calls"]:
        if api == "anthropic":
            assert call[0].startswith("toolu_")
        elif api == "chat":
            assert call[0].startswith("call_")


@pytest.mark.parametrize("api", APIS)
def test_each_format_writes_its_own_error(api):
    fmt = ChunkFormat(id=home(api).id_prefix + "9", model="m", created=1, api=api)
    body = json.loads(home(api).error_body(503, ErrorCode.WORKER_LOST, "its worker died", None))
    event = home(api).error_event(fmt, 503, ErrorCode.WORKER_LOST, "its worker died", None, 4)
    if api == "anthropic":
        assert body == {"type": "error", "error": {"type": "overloaded_error", "message": "its worker died"}}
        assert event == b"event: error\ndata: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"
        ErrorResponse.model_validate(body)          # the SDK's own type for it (it raises this event)
        return
    assert body == {"error": {"message": "its worker died", "type": "server_error", "param": None,
                              "code": "worker_lost"}}
    if api == "responses":
        (n1, error), (n2, failed) = [(n, d) for n, d in events(api, event)]
        assert (n1, error["code"], error["message"], error["sequence_number"]) == \
            ("error", "worker_lost", "its worker died", 4)
        assert n2 == "response.failed" and failed["sequence_number"] == 5
        assert failed["response"]["status"] == "failed" and failed["response"]["id"] == fmt.id
        return
    assert event == b"data: " + home(api).error_body(503, ErrorCode.WORKER_LOST, "its worker died") + \
        b"\n\ndata: [DONE]\n\n"


# ---------------------------------------------------------------- through a real front door

class FailingEngine(ReplayEngine):
    """The replay engine, except that a prompt naming scenario:fail gets a few tokens, then the engine's
    own failure (what an engine reports when its request dies mid-generation)."""

    failing: set = set()

    def step(self, batch):
        outputs = super().step(batch)
        done = {r.request_id: len(r.output_ids) for r in batch}
        for i, out in enumerate(outputs):
            if out.request_id in self.failing and done[out.request_id] >= 3:
                self.failing.discard(out.request_id)
                outputs[i] = EngineOutput(out.request_id, [], finish="error",
                                          error=EngineError(ErrorCode.UNAVAILABLE, "the engine lost this request"))
        return outputs

    async def prepare(self, running):
        prompt = await self.pool.decode(running.prompt_ids)
        if "scenario:fail" in prompt.rsplit("<|im_start|>user", 1)[-1]:
            self.failing.add(running.request_id)
        await super().prepare(running)


@pytest.fixture(scope="module", params=["direct", "forwarded"])
def server(request):
    """Streamed bodies written by the workers (the default: a failure's event is the worker's to write,
    at the API process's word) or forwarded by the API process (which writes it itself)."""
    with running(engine=FailingEngine(scenario_script, step_interval=0.002, max_model_len=4096),
                 options=ApiOptions(served_model_name=[MODEL], direct_streaming=request.param == "direct")) as server:
        yield server


def ask(scenario: str) -> list[dict]:
    return [{"role": "user", "content": f"Please answer. scenario:{scenario}"}]


@pytest.mark.slow  # the front door on worker processes
def test_whole_and_streamed_agree_through_the_server(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    whole = client.chat.completions.create(model=MODEL, messages=ask("tools"), tools=TOOLS, n=3, logprobs=True,
                                           top_logprobs=2)
    assert [c.index for c in whole.choices] == [0, 1, 2]
    calls = [[(t.function.name, json.loads(t.function.arguments)) for t in c.message.tool_calls]
             for c in whole.choices]
    assert calls == [[("get_weather", {"city": "Zürich", "unit": "celsius"})]] * 3
    assert all(c.finish_reason == "tool_calls" and c.logprobs.content for c in whole.choices)
    plain = client.chat.completions.create(model=MODEL, messages=ask("plain"))
    assert plain.choices[0].message.tool_calls is None           # no "tool_calls": [] to send back
    raw = requests.post(server.url + "/v1/chat/completions", json={"model": MODEL, "messages": ask("plain")}).json()
    assert "tool_calls" not in raw["choices"][0]["message"]
    streamed = list(client.chat.completions.create(model=MODEL, messages=ask("plain"), stream=True))
    assert streamed[0].choices[0].delta.role == "assistant" and streamed[0].choices[0].delta.content == ""
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == plain.choices[0].message.content

    claude = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)
    message = claude.messages.create(model=MODEL, max_tokens=200, messages=ask("tools"),
                                     tools=[{"name": "get_weather", "input_schema": TOOLS[0]["function"]["parameters"]}])
    use = [b for b in message.content if b.type == "tool_use"]
    assert use[0].id.startswith("toolu_") and use[0].input == {"city": "Zürich", "unit": "celsius"}
    assert message.usage.cache_read_input_tokens == 0 and message.usage.cache_creation_input_tokens == 0
    with claude.messages.stream(model=MODEL, max_tokens=200, messages=ask("tools"),
                                tools=[{"name": "get_weather",
                                        "input_schema": TOOLS[0]["function"]["parameters"]}]) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == [b.type for b in message.content]
    assert [b for b in final.content if b.type == "tool_use"][0].id.startswith("toolu_")


@pytest.mark.slow
def test_a_prompt_over_the_context_is_openais_context_length_exceeded(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "word " * 5000}])
    assert refused.value.code == "context_length_exceeded" and refused.value.param == "messages"


@pytest.mark.slow
def test_an_engine_failure_mid_stream_ends_each_stream_in_its_own_shape(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.APIError) as failed:
        for _ in client.chat.completions.create(model=MODEL, messages=ask("fail"), stream=True):
            pass
    assert "the engine lost this request" in str(failed.value)
    raw = requests.post(server.url + "/v1/chat/completions", stream=True,
                        json={"model": MODEL, "messages": ask("fail"), "stream": True}).content
    assert raw.endswith(b"data: [DONE]\n\n") and b'"code":"unavailable"' in raw

    raw = requests.post(server.url + "/v1/responses", json={"model": MODEL, "input": "Please answer. scenario:fail",
                                                            "stream": True}).content
    named = events("responses", raw)[-2:]
    assert [n for n, _ in named] == ["error", "response.failed"]
    numbers = [d["sequence_number"] for _, d in events("responses", raw)]
    assert numbers == list(range(len(numbers)))             # the error events number themselves after the rest

    claude = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as lost:
        with claude.messages.stream(model=MODEL, max_tokens=100, messages=ask("fail")) as stream:
            for _ in stream:
                pass
    assert "the engine lost this request" in str(lost.value)
    # whole: the error body of each API before any byte of the response
    response = requests.post(server.url + "/v1/messages", json={"model": MODEL, "max_tokens": 100,
                                                                "messages": ask("fail")})
    assert response.status_code in (501, 502, 503) and response.json()["type"] == "error"
    # whole with several choices: the API's own status, headers and body (written by their worker, direct)
    response = requests.post(server.url + "/v1/chat/completions", json={"model": MODEL, "n": 3,
                                                                        "messages": ask("fail")})
    assert response.status_code == 501 and response.headers["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == "unavailable" and response.json()["error"]["type"] == "server_error"
    assert "the engine lost this request" in response.json()["error"]["message"]
    assert (response.headers.get("Connection") == "close") == server.api.options.direct_streaming
    server.settled()


@pytest.mark.slow
def test_a_mounted_app_answers_each_api_in_its_own_error_shape():
    """The Api's app under a prefix of another aiohttp app: /v1/messages still answers Anthropic's shape."""
    with running(options=ApiOptions(served_model_name=[MODEL])) as plain:
        root = web.Application()
        root.add_subapp("/llm", plain.api.app())

        async def serve():
            runner = web.AppRunner(root)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            return runner, site._server.sockets[0].getsockname()[1]

        runner, port = plain.call(serve())
        try:
            base = f"http://127.0.0.1:{port}/llm"
            bad = {"model": "no-such-model", "max_tokens": 10, "messages": ask("plain")}
            claude = requests.post(base + "/v1/messages", json=bad)
            assert claude.status_code == 404 and claude.json() == {
                "type": "error", "error": {"type": "not_found_error", "message": claude.json()["error"]["message"]}}
            chat = requests.post(base + "/v1/chat/completions", json=bad)
            assert chat.status_code == 404 and set(chat.json()["error"]) == {"message", "type", "param", "code"}
            good = requests.post(base + "/v1/messages", json={**bad, "model": MODEL})
            assert good.status_code == 200 and good.json()["type"] == "message"
        finally:
            plain.call(runner.cleanup())
