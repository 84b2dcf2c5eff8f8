"""Every bad request is a 4xx, on every route of a real `tokworker api` process (the replay engine, one
worker) over real sockets: a table of malformed requests (the issue's former 500s, then wrong types for every
family of fields, out-of-range numbers, empty and ill-formed structures, bytes that are not JSON or not UTF-8,
a wrong Content-Type, bodies nested 10,000 deep) gets that route's own error body (OpenAI's, Anthropic's on
/v1/messages, vLLM's on the render tier) with a message naming the problem, and no request of it gets a 500.
The process's log holds one line per refusal, rate-limited, and no traceback. vLLM's `documents` reach the
chat template. Derender sequences are the opening client's alone and within budgets of their own: hundreds of
unfinished ones leave the generation routes their streams, and another client naming a request_id gets
`unknown`.
Covers tokworker.api.errorlog, tokworker.api.plan and tokworker.api.requests."""

from __future__ import annotations

import json
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from engine_servers import process
from tools.llama_server import free_port

pytestmark = pytest.mark.slow  # a `tokworker api` process and its worker

MODEL = "tokworker-test"
MAX_BODY = 256 * 1024
WORKER_STREAMS = 64                       # --max-streams: the pool's whole stream capacity (one worker)
USER = [{"role": "user", "content": "hi"}]
DEEP = b"[" * 10_000 + b"]" * 10_000
DOCUMENTS_TEMPLATE = ("{% for d in documents %}[doc {{ d.title }}: {{ d.text }}]{% endfor %}"
                      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

CHAT, COMPLETIONS, RESPONSES, MESSAGES = "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages"
TOKENIZE, DETOKENIZE = "/tokenize", "/detokenize"
RENDERS = {CHAT: CHAT + "/render", COMPLETIONS: COMPLETIONS + "/render", RESPONSES: RESPONSES + "/render",
           MESSAGES: MESSAGES + "/render"}
CHAT_DERENDER, COMPLETIONS_DERENDER = CHAT + "/derender", COMPLETIONS + "/derender"

VALID = {
    CHAT: {"model": MODEL, "messages": USER, "max_tokens": 5},
    COMPLETIONS: {"model": MODEL, "prompt": "hi", "max_tokens": 5},
    RESPONSES: {"model": MODEL, "input": "hi", "max_output_tokens": 5},
    MESSAGES: {"model": MODEL, "messages": USER, "max_tokens": 5},
    TOKENIZE: {"model": MODEL, "prompt": "hi"},
    DETOKENIZE: {"model": MODEL, "tokens": [40, 41]},
    CHAT_DERENDER: {"model": MODEL, "generate_response": {"request_id": "r", "choices": [
        {"index": 0, "token_ids": [40]}]}},
    COMPLETIONS_DERENDER: {"model": MODEL, "generate_responses": [{"request_id": "r", "choices": [
        {"index": 0, "token_ids": [40]}]}]},
}
VALID.update({render: VALID[route] for route, render in RENDERS.items()})


def shape(route: str) -> str:
    if route == MESSAGES:
        return "anthropic"
    return "vllm" if route.endswith("render") else "openai"


def edit(route: str, **fields) -> dict:
    """The route's valid body with `fields` set (None: removed)."""
    body = dict(VALID[route], **fields)
    return {name: value for name, value in body.items() if value is not None}


def extra(route: str, text: str) -> tuple[bytes, str]:
    """The route's valid body with `text` (JSON members as written, numbers json.dumps cannot write) added."""
    return json.dumps(VALID[route])[:-1].encode() + b", " + text.encode() + b"}", "application/json"


# ---------------------------------------------------------------- the table
# (route, body: a dict sent as JSON, or (bytes, Content-Type); status; a word the message has)

def every_route() -> list:
    """What no route may answer with a 500: bytes that are not a JSON object, a body nested 10,000 deep (the
    issue's, before decoding and inside an ignored field), a wrong Content-Type, an unknown model, a body
    over --max-request-bytes."""
    cases = []
    for route in VALID:
        json_type = "application/json"
        cases += [
            (route, (b'{"model": ', json_type), 400, "JSON"),
            (route, (b"", json_type), 400, "JSON"),
            (route, (b"\xff\xfe\x00{", json_type), 400, "JSON"),
            (route, (b"[]", json_type), 400, "object"),
            (route, (b"null", json_type), 400, "object"),
            (route, (b'"text"', json_type), 400, "object"),
            (route, (DEEP, json_type), 400, "128 levels"),
            (route, (b'{"x": ' + DEEP + b"}", json_type), 400, "128 levels"),
            (route, (b'{"model": "' + MODEL.encode() + b'", "x": {"a": ' + DEEP + b"}}", json_type), 400,
             "128 levels"),
            (route, (json.dumps(VALID[route]).encode(), "text/plain"), 400, "Content-Type"),
            (route, (json.dumps(VALID[route]).encode(), "application/x-www-form-urlencoded"), 400, "Content-Type"),
            (route, edit(route, model="gpt-9"), 404, "gpt-9"),
            (route, edit(route, model=5), 400, "model"),
            (route, (b'{"x": "' + b"a" * MAX_BODY + b'"}', json_type), 413, "bytes"),
        ]
    return cases


def chat_like(route: str) -> list:
    """Chat Completions' fields, family by family (its render route takes the same)."""
    body = lambda **fields: edit(route, **fields)                       # noqa: E731
    reserved = [(route, body(chat_template_kwargs={name: value}), 400, f"`{name}`")
                for name, value in (("add_generation_prompt", False), ("tools", []), ("messages", []),
                                    ("chat_template", "chatml"), ("tokenizer", "x"), ("timeout", "soon"),
                                    ("timeout", 0.001), ("documents", []), ("return_text", True))]
    return reserved + [
        (route, body(messages=None), 400, "messages"),
        (route, body(messages=[]), 400, "length"),
        (route, body(messages="hi"), 400, "array"),
        (route, body(messages=[5]), 400, "object"),
        (route, body(messages=[{"content": "hi"}]), 400, "role"),
        (route, body(messages=[{"role": "robot", "content": "hi"}]), 400, "robot"),
        (route, body(messages=[{"role": 1, "content": "hi"}]), 400, "int"),
        (route, body(messages=[{"role": "user", "content": 5}]), 400, "int"),
        (route, body(messages=[{"role": "user", "content": {"text": "x"}}]), 400, "object"),
        (route, body(messages=[{"role": "user", "content": [{"text": "x"}]}]), 400, "type"),
        (route, body(messages=[{"role": "user", "content": [{"type": "video", "video": 1}]}]), 400, "video"),
        (route, body(messages=[{"role": "user", "content": [{"type": "text", "text": 5}]}]), 400, "int"),
        (route, body(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
         400, "image_url"),
        (route, body(messages=[{"role": "assistant", "tool_calls": [{"function": {"name": ""}}]}]), 400, "length"),
        (route, body(messages=[{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 5}}]}]),
         400, "int"),
        (route, body(messages=[{"role": "assistant", "tool_calls": "call"}]), 400, "str"),
        (route, body(tools={"type": "function"}), 400, "object"),
        (route, body(tools=[{"type": "function"}]), 400, "function"),
        (route, body(tools=[{"type": "retrieval", "function": {"name": "f"}}]), 400, "retrieval"),
        (route, body(tools=[{"type": "function", "function": {"name": ""}}]), 400, "length"),
        (route, body(tools=[{"type": "function", "function": {"name": "f", "parameters": "object"}}]), 400, "str"),
        (route, body(tool_choice="sometimes"), 400, "sometimes"),
        (route, body(tool_choice="required"), 400, "tools"),
        (route, body(tool_choice={"type": "function"}), 400, "function"),
        (route, body(response_format={"type": "xml"}), 400, "xml"),
        (route, body(response_format={"type": "json_schema"}), 400, "json_schema"),
        (route, body(response_format={"type": "json_schema", "json_schema": {"schema": []}}), 400, "array"),
        (route, body(n=0), 400, ">= 1"),
        (route, body(n=-1), 400, ">= 1"),
        (route, body(n=10**6), 400, "<= 128"),
        (route, body(n="2"), 400, "str"),
        (route, body(max_tokens=0), 400, ">= 1"),
        (route, body(max_tokens=-5), 400, ">= 1"),
        (route, body(max_tokens=10**30), 400, "context"),
        (route, body(max_tokens=1.5), 400, "float"),
        (route, body(max_tokens=10**6), 400, "context"),
        (route, extra(route, '"temperature": 1e400'), 400, "temperature"),
        (route, extra(route, '"temperature": NaN'), 400, "JSON"),
        (route, extra(route, '"max_tokens": 5, "max_tokens": "x"'), 400, "max_tokens"),
        (route, body(temperature=-0.1), 400, ">= 0"),
        (route, body(temperature=[1]), 400, "array"),
        (route, body(top_p=0), 400, "> 0"),
        (route, body(top_k=-2), 400, ">= -1"),
        (route, body(top_k=10**30), 400, "<= 9223372036854775807"),
        (route, body(min_p=1.5), 400, "<= 1"),
        (route, body(repetition_penalty=0), 400, "> 0"),
        (route, body(presence_penalty=9), 400, "<= 2"),
        (route, body(seed=10**30), 400, "seed"),
        (route, body(seed="x"), 400, "str"),
        (route, body(priority=10**30), 400, "priority"),
        (route, body(stop=5), 400, "int"),
        (route, body(stop=[None]), 400, "null"),
        (route, body(stop_token_ids=[-1]), 400, ">= 0"),
        (route, body(stop_token_ids="1"), 400, "str"),
        (route, body(logit_bias=[1]), 400, "array"),
        (route, body(logit_bias={"x": 1}), 400, "int"),
        (route, body(logit_bias={"5": 101}), 400, "<= 100"),
        (route, body(logit_bias={"99999999": 1}), 400, "vocabulary"),
        (route, body(logit_bias={"-1": 1}), 400, "vocabulary"),
        (route, body(logprobs=True, top_logprobs=-1), 400, ">= 0"),
        (route, body(top_logprobs=3), 400, "logprobs"),
        (route, body(stream="yes"), 400, "str"),
        (route, body(stream_options={"include_usage": True}), 400, "stream"),
        (route, body(stream=True, stream_options=[]), 400, "array"),
        (route, body(continue_final_message=True), 400, "add_generation_prompt"),
        (route, body(chat_template_kwargs=[]), 400, "array"),
        (route, body(chat_template_kwargs={"x": 10**30}), 400, "ints"),
        (route, body(documents={"title": "a"}), 400, "object"),
        (route, body(documents=["a"]), 400, "str"),
        (route, body(reasoning_effort="max"), 400, "max"),
        (route, body(chat_template=5), 400, "int"),
        (route, body(echo=True), 400, "echo"),
    ]


def completions_like(route: str) -> list:
    body = lambda **fields: edit(route, **fields)                       # noqa: E731
    return [
        (route, body(prompt=None), 400, "prompt"),
        (route, body(prompt=5), 400, "int"),
        (route, body(prompt=[]), 400, "prompt"),
        (route, body(prompt=""), 400, "empty"),
        (route, body(prompt=[[]]), 400, "empty"),
        (route, body(prompt=["a", [1]]), 400, "prompt"),
        (route, body(prompt=[1, "a"]), 400, "prompt"),
        (route, body(prompt=[{"text": "a"}]), 400, "object"),
        (route, body(prompt=[-1]), 400, "vocabulary"),
        (route, body(prompt=[10**9]), 400, "vocabulary"),
        (route, body(prompt=[10**30]), 400, "vocabulary"),
        (route, body(prompt=[1.5]), 400, "float"),
        (route, body(max_tokens=0), 400, ">= 1"),
        (route, body(max_tokens=None, prompt="hi", n=-3), 400, ">= 1"),
        (route, body(logprobs=21), 400, "<= 20"),
        (route, body(logprobs=True), 400, "bool"),
        (route, body(suffix="x"), 400, "suffix"),
        (route, body(best_of=0), 400, ">= 1"),
        (route, body(best_of=3), 400, "best_of"),
        (route, body(echo="x"), 400, "str"),
        (route, body(add_special_tokens="no"), 400, "str"),
        (route, body(logit_bias={"99999999": 1}), 400, "vocabulary"),
        (route, body(stream_options={"include_usage": True}), 400, "stream"),
        (route, body(response_format={"type": "json_schema", "json_schema": 5}), 400, "int"),
    ]


def responses_like(route: str) -> list:
    body = lambda **fields: edit(route, **fields)                       # noqa: E731
    message = {"type": "message", "role": "user", "content": "hi"}
    return [
        (route, body(input=None), 400, "input"),
        (route, body(input=5), 400, "int"),
        (route, body(input=[]), 400, "length"),
        (route, body(input=["hi"]), 400, "object"),
        # the issue's: a reasoning item whose summary is not a list
        (route, body(input=[{"type": "reasoning", "summary": "x"}, message]), 400, "summary"),
        (route, body(input=[{"type": "reasoning", "summary": 5}, message]), 400, "summary"),
        (route, body(input=[{"type": "reasoning", "summary": [1]}, message]), 400, "summary[0]"),
        (route, body(input=[{"type": "reasoning", "summary": [{"type": "summary_text"}]}, message]), 400, "text"),
        (route, body(input=[{"type": "reasoning", "content": 5, "summary": []}, message]), 400, "content"),
        (route, body(input=[{"type": 5}]), 400, "type"),
        (route, body(input=[{"type": "image", "image_url": "x"}]), 400, "image"),
        (route, body(input=[{"type": "message", "role": "robot", "content": "x"}]), 400, "robot"),
        (route, body(input=[{"role": "user"}]), 400, "content"),
        (route, body(input=[{"role": "user", "content": 5}]), 400, "int"),
        (route, body(input=[{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]), 400,
         "input_image"),
        (route, body(input=[{"role": "user", "content": [{"type": "input_text"}]}]), 400, "text"),
        (route, body(input=[{"role": "user", "content": [{"type": "input_text", "text": 5}]}]), 400, "int"),
        (route, body(input=[{"type": "function_call", "name": "f"}]), 400, "call_id"),
        (route, body(input=[{"type": "function_call", "call_id": 5, "name": "f"}]), 400, "int"),
        (route, body(input=[{"type": "function_call", "call_id": "c", "name": "f", "arguments": 5}]), 400, "int"),
        (route, body(input=[{"type": "function_call_output", "call_id": "c"}]), 400, "output"),
        (route, body(input=[{"type": "function_call_output", "call_id": "c", "output": None}]), 400, "null"),
        (route, body(instructions=5), 400, "int"),
        (route, body(max_output_tokens=0), 400, ">= 1"),
        (route, body(max_output_tokens=10**30), 400, "context"),
        (route, body(temperature=3), 400, "<= 2"),
        (route, body(top_logprobs=21), 400, "<= 20"),
        (route, body(include="all"), 400, "str"),
        (route, body(tools=[{"type": "function"}]), 400, "name"),
        (route, body(tools=[{"type": "web_search", "name": "w"}]), 400, "web_search"),
        (route, body(tool_choice="required"), 400, "tools"),
        (route, body(text={"format": {"type": "yaml"}}), 400, "yaml"),
        (route, body(reasoning={"effort": "max"}), 400, "max"),
        (route, body(previous_response_id="resp_1"), 400, "previous_response_id"),
    ]


def messages_like(route: str) -> list:
    body = lambda **fields: edit(route, **fields)                       # noqa: E731
    return [
        (route, body(max_tokens=None), 400, "max_tokens"),
        (route, body(max_tokens=0), 400, ">= 1"),
        (route, body(max_tokens=10**30), 400, "context"),
        (route, body(messages=[]), 400, "length"),
        (route, body(messages=[{"role": "system", "content": "x"}]), 400, "system"),
        (route, body(messages=[{"role": "user"}]), 400, "content"),
        (route, body(messages=[{"role": "user", "content": 5}]), 400, "int"),
        (route, body(messages=[{"role": "user", "content": [{"type": "video"}]}]), 400, "video"),
        (route, body(messages=[{"role": "user", "content": [{"type": "text"}]}]), 400, "text"),
        (route, body(messages=[{"role": "user", "content": [{"type": "image", "source": {}}]}]), 400, "image"),
        (route, body(messages=[{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f",
                                                                  "input": "x"}]}]), 400, "str"),
        (route, body(messages=[{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f",
                                                             "input": {}}]}]), 400, "tool_use"),
        (route, body(system=5), 400, "int"),
        (route, body(system=[{"type": "image"}]), 400, "image"),
        (route, body(temperature=1.5), 400, "<= 1"),
        (route, body(top_k=-1), 400, ">= 0"),
        (route, body(top_k=10**30), 400, "<= 9223372036854775807"),
        (route, body(stop_sequences="END"), 400, "str"),
        (route, body(tools=[{"name": "f"}]), 400, "input_schema"),
        (route, body(tools=[{"name": "f", "input_schema": []}]), 400, "array"),
        (route, body(tool_choice={"type": "sometimes"}), 400, "sometimes"),
        (route, body(tool_choice={"type": "tool"}), 400, "name"),
        (route, body(tool_choice={"type": "any"}), 400, "tools"),
        (route, body(thinking={"type": "enabled", "budget_tokens": -1}), 400, ">= 0"),
        (route, body(thinking={"type": "maybe"}), 400, "maybe"),
        (route, body(metadata=[]), 400, "array"),
        (route, body(priority=10**30), 400, "priority") if route != MESSAGES else (route, body(top_k=1.5), 400, "float"),
    ]


def others() -> list:
    derender = lambda route, **fields: edit(route, **fields)           # noqa: E731
    chunk = {"request_id": "r", "choices": [{"index": 0, "token_ids": [40]}]}
    return [
        (TOKENIZE, {"model": MODEL}, 400, "prompt"),
        (TOKENIZE, {"model": MODEL, "prompt": "a", "messages": USER}, 400, "prompt"),
        (TOKENIZE, {"model": MODEL, "prompt": 5}, 400, "int"),
        (TOKENIZE, {"model": MODEL, "messages": [{"role": "robot", "content": "x"}]}, 400, "robot"),
        (TOKENIZE, {"model": MODEL, "messages": USER, "chat_template_kwargs": {"tools": []}}, 400, "`tools`"),
        (TOKENIZE, {"model": MODEL, "messages": USER, "chat_template_kwargs": {"timeout": "x"}}, 400, "`timeout`"),
        (TOKENIZE, {"model": MODEL, "messages": USER, "chat_template_kwargs": {"tokenizer": 1}}, 400,
         "`tokenizer`"),
        (TOKENIZE, {"model": MODEL, "prompt": "a", "return_token_strs": "yes"}, 400, "str"),
        (DETOKENIZE, {"model": MODEL}, 400, "tokens"),
        (DETOKENIZE, {"model": MODEL, "tokens": "abc"}, 400, "str"),
        (DETOKENIZE, {"model": MODEL, "tokens": [-1]}, 400, ">= 0"),
        (DETOKENIZE, {"model": MODEL, "tokens": [10**9]}, 400, "vocabulary"),
        (DETOKENIZE, {"model": MODEL, "tokens": [10**30]}, 400, "<= 9223372036854775807"),
        (DETOKENIZE, {"model": MODEL, "tokens": [[1]]}, 400, "array"),
        (CHAT_DERENDER, derender(CHAT_DERENDER, generate_response=None), 400, "generate_response"),
        (CHAT_DERENDER, derender(CHAT_DERENDER, generate_response={"choices": []}), 400, "request_id"),
        (CHAT_DERENDER, derender(CHAT_DERENDER, generate_response={"request_id": "r", "choices": [
            {"index": 0, "token_ids": [10**9]}]}), 400, "vocabulary"),
        (CHAT_DERENDER, derender(CHAT_DERENDER, generate_response={"request_id": "r", "choices": [
            {"index": -1, "token_ids": [1]}]}), 400, ">= 0"),
        (CHAT_DERENDER, derender(CHAT_DERENDER, generate_response={"request_id": "r", "choices": [
            {"index": 0, "token_ids": [1]}] * 129}), 400, "<= 128"),
        (CHAT_DERENDER, derender(CHAT_DERENDER, prompt_token_ids=[10**9]), 400, "vocabulary"),
        (CHAT_DERENDER, derender(CHAT_DERENDER, chat_request={"messages": []}), 400, "length"),
        (CHAT_DERENDER, derender(CHAT_DERENDER, chat_request={"messages": USER, "chat_template_kwargs": {
            "timeout": 1}}), 400, "`timeout`"),
        (CHAT_DERENDER, derender(CHAT_DERENDER, chat_request={"messages": USER, "logprobs": True}), 400, "logprobs"),
        (CHAT_DERENDER, derender(CHAT_DERENDER, chat_request={"messages": USER, "logprobs": True, "top_logprobs": 1},
                                 generate_response={"request_id": "r", "choices": [{"index": 0, "token_ids": [40],
                                                    "logprobs": {"content": [{"token_id": 40, "logprob": -0.1,
                                                    "top_logprobs": [{"token_id": 10**9, "logprob": -1}]}]}}]}),
         400, "vocabulary"),
        (CHAT_DERENDER, {"model": MODEL, "stream": True}, 400, "generate_chunk"),
        (CHAT_DERENDER, {"model": MODEL, "stream": True, "generate_chunk": chunk, "stream_state": "x"}, 400, "str"),
        (CHAT_DERENDER, {"model": MODEL, "stream": True, "generate_chunk": {"request_id": "r", "choices": [
            {"index": 0}, {"index": 1}]}}, 400, "at most one"),
        (CHAT_DERENDER, {"model": MODEL, "stream": True, "generate_chunk": chunk,
                         "stream_state": {"role_sent": True}}, 400, "unknown"),
        (COMPLETIONS_DERENDER, derender(COMPLETIONS_DERENDER, generate_responses=[]), 400, "generate_responses"),
        (COMPLETIONS_DERENDER, derender(COMPLETIONS_DERENDER, generate_responses={"request_id": "r"}), 400,
         "object"),
        (COMPLETIONS_DERENDER, derender(COMPLETIONS_DERENDER, prompt_tokens=[1, 2]), 400, "prompt_tokens"),
        (COMPLETIONS_DERENDER, derender(COMPLETIONS_DERENDER, prompt_token_ids=[1]), 400, "prompt_token_ids"),
        (COMPLETIONS_DERENDER, derender(COMPLETIONS_DERENDER, completion_request={"prompt": 5}), 400, "int"),
        (COMPLETIONS_DERENDER, {"model": MODEL, "stream": True, "prompt_token_ids": [[1]]}, 400,
         "prompt_token_ids"),
    ]


CASES = (every_route() + chat_like(CHAT) + chat_like(RENDERS[CHAT]) + completions_like(COMPLETIONS)
         + completions_like(RENDERS[COMPLETIONS]) + responses_like(RESPONSES) + responses_like(RENDERS[RESPONSES])
         + messages_like(MESSAGES) + messages_like(RENDERS[MESSAGES]) + others())


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`tokworker api` with the replay engine: one worker of WORKER_STREAMS streams, request templates allowed
    (the documents test sends one), its log in a file the tests read."""
    port, log = free_port(), tmp_path_factory.mktemp("api") / "api.log"
    command = [sys.executable, "-m", "tokworker.cli", "api", "--engine", "replay", "--port", str(port),
               "--workers", "1", "--served-model-name", MODEL, "--max-request-bytes", str(MAX_BODY),
               "--max-streams", str(WORKER_STREAMS), "--allow-request-templates", "--log-level", "INFO",
               "--replay-step-interval", "0.002", "--max-model-len", "4096"]
    with process(command, f"http://127.0.0.1:{port}/health", 120, log):
        yield f"http://127.0.0.1:{port}", log


def post(url: str, route: str, body, headers: dict | None = None) -> requests.Response:
    if isinstance(body, tuple):
        data, content_type = body
        return requests.post(url + route, data=data, headers={"Content-Type": content_type, **(headers or {})},
                             timeout=60)
    return requests.post(url + route, json=body, headers=headers, timeout=60)


def problem(route: str, response: requests.Response, status: int, word: str) -> str | None:
    """What is wrong with a refusal: its status, its body's shape, or a message that does not name it."""
    try:
        body = response.json()
    except ValueError:
        return f"{response.status_code}, not JSON: {response.text[:200]!r}"
    kind = shape(route)
    if kind == "anthropic":
        ok = body.get("type") == "error" and set(body.get("error", {})) == {"type", "message"}
    else:
        error = body.get("error") if isinstance(body.get("error"), dict) else {}
        ok = set(error) == {"message", "type", "param", "code"} \
            and isinstance(error["code"], int if kind == "vllm" else str)
        ok = ok and (kind == "openai" or error["code"] == response.status_code)
    message = (body.get("error") or {}).get("message", "") if isinstance(body, dict) else ""
    if response.status_code != status or not ok or word not in message:
        return f"{response.status_code} {kind}: {json.dumps(body)[:300]}"
    return None


def test_every_malformed_request_gets_its_routes_4xx_naming_the_problem_and_none_a_500(server):
    url, log = server
    began = time.monotonic()
    failures, statuses = [], []
    for route, body, status, word in CASES:
        response = post(url, route, body)
        statuses.append(response.status_code)
        wrong = problem(route, response, status, word)
        if wrong is not None:
            failures.append(f"{route} {str(body)[:120]} (want {status} with {word!r}): {wrong}")
    elapsed = time.monotonic() - began
    assert not failures, f"{len(failures)} of {len(CASES)}:\n" + "\n".join(failures)
    assert all(400 <= status < 500 for status in statuses)
    assert requests.post(url + CHAT, json=VALID[CHAT], timeout=60).status_code == 200
    # the log: no traceback, one line per refusal, and no more than the rate allows (the rest counted)
    text = log.read_text(errors="replace")
    assert "Traceback" not in text and "internal error" not in text
    refusals = re.findall(r"(?m)^.*POST /\S+ from 127\.0\.0\.1: 4\d\d .*$", text)
    assert 20 <= len(refusals) <= 20 + 5 * elapsed + 2, (len(refusals), elapsed)
    assert "more not logged" in text


def test_documents_reach_the_chat_template_as_vllm_passes_them(server):
    url, _ = server
    documents = [{"title": "Zürich", "text": "12 °C"}, {"title": "Bern", "text": "9 °C"}]
    rendered = post(url, RENDERS[CHAT], edit(RENDERS[CHAT], documents=documents, chat_template=DOCUMENTS_TEMPLATE))
    assert rendered.status_code == 200, rendered.text
    text = post(url, DETOKENIZE, {"tokens": rendered.json()["token_ids"]}).json()["prompt"]
    assert text.startswith("[doc Zürich: 12 °C][doc Bern: 9 °C]<|im_start|>user\nhi<|im_end|>\n")
    answered = post(url, CHAT, edit(CHAT, documents=documents, chat_template=DOCUMENTS_TEMPLATE))
    assert answered.status_code == 200, answered.text
    assert answered.json()["usage"]["prompt_tokens"] == len(rendered.json()["token_ids"])


def first_chunk(url: str, request_id: str, authorization: str | None, state=None) -> requests.Response:
    headers = {"Authorization": authorization} if authorization else None
    return post(url, CHAT_DERENDER, {"model": MODEL, "stream": True, "stream_state": state, "prompt_token_ids": [1],
                                     "generate_chunk": {"request_id": request_id, "choices": [
                                         {"index": 0, "token_ids": [40]}]}}, headers)


def gauge(url: str, name: str) -> float:
    text = requests.get(url + "/metrics", timeout=30).text
    return float(re.search(rf"(?m)^{name} (\S+)$", text).group(1))


def test_a_sequence_is_its_clients_alone(server):
    """Another client (another key, or none) naming a request_id finds nothing, and opening its own sequence
    under that id leaves the first client's as it was."""
    url, _ = server
    assert first_chunk(url, "mine", "Bearer alice").status_code == 200
    for stranger in ("Bearer mallory", None):
        response = first_chunk(url, "mine", stranger, state={"role_sent": True})
        assert response.status_code == 400 and "unknown" in response.json()["error"]["message"], response.text
    assert first_chunk(url, "mine", "Bearer mallory").status_code == 200
    response = first_chunk(url, "mine", "Bearer alice", state={"role_sent": True})
    assert response.status_code == 200, response.text
    chunk = response.json()["chunk"]
    assert chunk["id"] == "mine" and "role" not in chunk["choices"][0]["delta"]       # alice's, continued


def test_unfinished_derender_sequences_leave_the_generation_routes_their_streams(server):
    """The issue's 9,000 unfinished derender calls, scaled to a pool of WORKER_STREAMS streams: ten times as
    many sequences as the pool has streams, from several clients at once, keep at most half of them; a chat
    of n choices is served beside them, and so is a whole derender call."""
    url, _ = server
    calls = 10 * WORKER_STREAMS

    def unfinished(i: int) -> int:
        return first_chunk(url, f"never-ends-{i}", f"Bearer client-{i % 4}").status_code

    with ThreadPoolExecutor(8) as threads:
        statuses = list(threads.map(unfinished, range(calls)))
    assert statuses == [200] * calls
    assert gauge(url, "tokworker_streams_open") <= WORKER_STREAMS // 2
    chat = post(url, CHAT, edit(CHAT, n=WORKER_STREAMS // 2 - 1))
    assert chat.status_code == 200, chat.text
    assert len(chat.json()["choices"]) == WORKER_STREAMS // 2 - 1
    whole = post(url, CHAT_DERENDER, VALID[CHAT_DERENDER])
    assert whole.status_code == 200, whole.text
    # the newest sequence of each client is still kept; one of the first is not
    assert first_chunk(url, f"never-ends-{calls - 1}", f"Bearer client-{(calls - 1) % 4}",
                       state={"role_sent": True}).status_code == 200
    assert first_chunk(url, "never-ends-0", "Bearer client-0", state={"role_sent": True}).status_code == 400


def test_an_unknown_field_is_ignored_as_vllm_ignores_it_and_logged_once(server):
    url, log = server
    for _ in range(3):
        response = requests.post(url + CHAT, json={**VALID[CHAT], "top_kk": 3, "max_tokens": 2}, timeout=60)
        assert response.status_code == 200
    deadline = time.monotonic() + 5
    while "'top_kk'" not in log.read_text(errors="replace") and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = [line for line in log.read_text(errors="replace").splitlines() if "'top_kk'" in line]
    assert len(lines) == 1 and "ChatCompletionRequest" in lines[0] and "ignored" in lines[0]
