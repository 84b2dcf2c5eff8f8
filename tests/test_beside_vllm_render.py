"""tokworker's render tier beside vLLM's own (`vllm launch render`, vLLM 0.33.0 from the wheel, on CPU in a
subprocess on a free loopback port; bench/vllm_render.py says what it took to start it: a model folder of
Qwen3's tokenizer files and a config.json, VLLM_TARGET_DEVICE=cpu, the server's extra packages,
`--trust-request-chat-template --enable-auto-tool-choice --tool-call-parser hermes --reasoning-parser qwen3`).

Real: both servers, the Qwen3 vocabulary, the 36 fixture chat templates (sent in each request), vLLM's
pydantic models (run by vLLM's python) judging tokworker's bodies. Nothing stands in. Skips with the reason
when vLLM's venv (TOKWORKER_VLLM_PYTHON, TOKWORKER_VLLM_PATH) is not there, as in CI.

One difference is by design: a tool the client sent without a description renders with `"description":
null` on vLLM (its pydantic model adds the field) and without it here; the tools below carry one.
"""

from __future__ import annotations

import pytest

from api_server import running
from bench import vllm_render
from realdata import chat_templates, vocabulary
from tokworker.api.options import ApiOptions

pytestmark = pytest.mark.slow  # vLLM's render server

MODEL = "vllm-render"
PARSERS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather.", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
CALL = {"id": "a1b2c3d4e", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
CONVERSATIONS = {
    "plain": {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there 👋"}]},
    "tools": {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS},
    "multi-turn": {"messages": [
        {"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "a1b2c3d4e", "content": "12 °C"},
        {"role": "assistant", "content": "It is 12 °C."}, {"role": "user", "content": "Thanks!"}], "tools": TOOLS},
    "reasoning": {"messages": [
        {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4", "reasoning_content": "A sum."},
        {"role": "user", "content": "3+3?"}], "chat_template_kwargs": {"enable_thinking": False}},
}
# (template, conversation): why the two disagree on whether it renders at all
DISAGREE = {("deepseek-ai-DeepSeek-V3.1.jinja", "multi-turn"):
            "vLLM hands the template a call's arguments as a dict, and this template concatenates them to a "
            "string (`can only concatenate str (not \"dict\") to str`); tokworker keeps the string the client sent, "
            "as transformers' apply_chat_template does"}

# (template, conversation): why the ids differ; the text of ours with a call's function keys swapped is theirs
KEY_ORDER = ("the template writes a call's function with `tojson`; vLLM rebuilds it in its model's field order "
             "(arguments, then name), tokworker in OpenAI's (name, then arguments: what clients send, and what "
             "transformers renders from it)")
DIFFER = {("mistralai-Mistral-Nemo-Instruct-2407.jinja", "multi-turn"): KEY_ORDER,
          ("vllm-examples-tool_chat_template_mistral_parallel.jinja", "multi-turn"): KEY_ORDER}
SWAP = ('"name": "get_weather", "arguments": {"city": "Paris"}', '"arguments": {"city": "Paris"}, "name": "get_weather"')


@pytest.fixture(scope="module")
def servers():
    reason = vllm_render.unavailable()
    if reason is not None:
        pytest.skip(reason)
    qwen3 = vocabulary("qwen3_dir")
    vllm = vllm_render.RenderServer(qwen3, *PARSERS)
    try:
        with running(options=ApiOptions(served_model_name=[MODEL]), model_dir=qwen3, allow_request_templates=True,
                     tool_parser="hermes", reasoning_parser="qwen3") as ours:
            yield ours, vllm
    finally:
        vllm.stop()


def both(servers, path: str, body) -> tuple[tuple[int, object], tuple[int, object]]:
    ours, vllm = servers
    body = {"model": MODEL, **body}
    return vllm_render.post(ours.url + path, body), vllm.post(path, body)


def detokenized(servers, ids: list[int]) -> str:
    return vllm_render.post(servers[0].url + "/detokenize", {"model": MODEL, "tokens": ids})[1]["prompt"]


TEMPLATES = sorted(chat_templates())


@pytest.mark.skipif(not TEMPLATES, reason="the fixture chat templates (../shared/fixtures) are not here")
@pytest.mark.parametrize("template", TEMPLATES)
def test_chat_render_ids_equal_vllms(servers, template):
    text = chat_templates()[template]["text"]
    for name, conversation in CONVERSATIONS.items():
        (status, ours), (their_status, theirs) = both(servers, "/v1/chat/completions/render",
                                                      {**conversation, "chat_template": text})
        if (template, name) in DISAGREE:
            assert (status, their_status) == (200, 400), (ours, theirs)
            continue
        assert status == their_status, (name, ours, theirs)
        if (template, name) in DIFFER:
            texts = [detokenized(servers, ids) for ids in (ours["token_ids"], theirs["token_ids"])]
            assert texts[0] != texts[1] and texts[0].replace(*SWAP) == texts[1]
        elif status == 200:
            assert ours["token_ids"] == theirs["token_ids"], name
        else:                                   # both refuse: the template itself raised
            assert ours["error"]["type"] == theirs["error"]["type"] == "BadRequestError"


def test_every_render_route_ids_equal_and_vllms_models_take_ours(servers):
    requests = {
        "/v1/chat/completions/render": {**CONVERSATIONS["multi-turn"], "max_tokens": 32, "temperature": 0.2,
                                        "stream": True, "stream_options": {"include_usage": True}},
        "/v1/completions/render": {"prompt": ["Once upon a time", "Paris is"], "max_tokens": 8, "n": 2},
        "/v1/messages/render": {"max_tokens": 16, "system": "Be brief.",
                                "messages": [{"role": "user", "content": "Hi there 👋"}]},
        "/v1/responses/render": {"input": "Weather in Paris?", "instructions": "Be brief.", "max_output_tokens": 5,
                                 "tools": [{"type": "function", **TOOLS[0]["function"]}]},
    }
    judged = []
    for path, body in requests.items():
        (status, ours), (their_status, theirs) = both(servers, path, body)
        assert status == their_status == 200, (path, ours, theirs)
        ids = [r["token_ids"] for r in ours] if isinstance(ours, list) else ours["token_ids"]
        assert ids == ([r["token_ids"] for r in theirs] if isinstance(theirs, list) else theirs["token_ids"]), path
        assert (ours["sampling_params"]["max_tokens"] if isinstance(ours, dict) else
                ours[0]["sampling_params"]["max_tokens"]) == body.get("max_tokens", body.get("max_output_tokens"))
        judged.append(("list[GenerateRequest]" if isinstance(ours, list) else "GenerateRequest", ours))
    assert vllm_render.judge(judged) == [None] * len(judged)


def generated(servers, text: str) -> list[int]:
    ours, _ = servers
    status, reply = vllm_render.post(ours.url + "/tokenize", {"model": MODEL, "prompt": text,
                                                               "add_special_tokens": False})
    return reply["tokens"]


REPLY = ('<think>\nThey want the weather.\n</think>\n\nLet me check.<tool_call>\n{"name": "get_weather", '
         '"arguments": {"city": "Paris"}}\n</tool_call><|im_end|>')


def test_derender_whole_and_streamed_take_vllms_bodies_and_give_its_shapes(servers):
    """The same derender bodies to both servers (vLLM's client shapes, its stream_state carried back to
    each); both answer 200, vLLM's models validate every body of ours, and both read the same call."""
    chat = CONVERSATIONS["tools"]
    (_, rendered), _ = both(servers, "/v1/chat/completions/render", chat)
    prompt, ids = rendered["token_ids"], generated(servers, REPLY)
    judged, calls = [], {}
    whole = {"prompt_token_ids": prompt, "prompt_tokens": len(prompt), "chat_request": chat,
             "generate_response": {"request_id": "r-whole", "choices": [
                 {"index": 0, "token_ids": ids, "finish_reason": "stop"}]}}
    for side, (status, reply) in zip(("ours", "vllm"), both(servers, "/v1/chat/completions/derender", whole)):
        assert status == 200, reply
        message = reply["choices"][0]["message"]
        calls[side] = [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]
        if side == "ours":
            judged.append(("ChatCompletionResponse", reply))
    assert calls["ours"] == calls["vllm"] == [("get_weather", '{"city": "Paris"}')]
    states = {"ours": None, "vllm": None}
    for at in range(0, len(ids), 3):
        last = at + 3 >= len(ids)
        chunk = {"request_id": "r-stream", "choices": [
            {"index": 0, "token_ids": ids[at:at + 3], "finish_reason": "stop" if last else None}]}
        for side, server in zip(("ours", "vllm"), servers):
            body = {"model": MODEL, "stream": True, "generate_chunk": chunk, "stream_state": states[side],
                    "prompt_token_ids": prompt, "chat_request": chat}
            status, reply = vllm_render.post(server.url + "/v1/chat/completions/derender", body)
            assert status == 200, (side, reply)
            states[side] = reply["stream_state"]
            if side == "ours":
                judged.append(("DerenderChatStreamResponse", reply))
    completion = {"prompt": "Paris is", "max_tokens": 8}
    text_ids = generated(servers, " the capital of France.")
    whole = {"completion_request": completion, "prompt_tokens": [3], "generate_responses": [
        {"request_id": "c-whole", "choices": [{"index": 0, "token_ids": text_ids, "finish_reason": "length"}]}]}
    (status, ours), (their_status, theirs) = both(servers, "/v1/completions/derender", whole)
    assert status == their_status == 200, (ours, theirs)
    assert ours["choices"][0]["text"] == theirs["choices"][0]["text"] == " the capital of France."
    judged.append(("CompletionResponse", ours))
    state = None
    for at in range(0, len(text_ids), 2):
        status, reply = vllm_render.post(servers[0].url + "/v1/completions/derender", {
            "model": MODEL, "stream": True, "stream_state": state, "completion_request": completion,
            "prompt_token_ids": [1, 2, 3], "generate_chunk": {"request_id": "c-stream", "choices": [
                {"index": 0, "token_ids": text_ids[at:at + 2]}]}})
        assert status == 200, reply
        state = reply["stream_state"]
        judged.append(("DerenderCompletionStreamResponse", reply))
    assert vllm_render.judge(judged) == [None] * len(judged)
