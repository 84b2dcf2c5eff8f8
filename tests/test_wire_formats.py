"""The four writers over real TextStream updates: every event validates as the official SDK's type (strict
pydantic validation of the wire JSON), any grouping of engine steps assembles the same result (the text,
reasoning, calls, logprob entries, usage, finish) and the same event sequence up to how deltas are split;
chat chunks with logprobs are still msgspec.json of `chunks()`; n > 1, stop strings, tool-call finishes
and continuous usage are written as vLLM writes them.
Covers tokworker.wire.completions, tokworker.wire.responses, tokworker.wire.anthropic and tokworker.wire.common."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import msgspec
import pytest
from anthropic.types import RawMessageStreamEvent
from hypothesis import given, settings, strategies as st
from openai.types import Completion
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from tokworker.protocol.deltas import ChunkFormat, StreamParams, Usage
from tokworker.wire import writer_for
from tokworker.wire.chat import ChunkWriter, usage_event
from tokworker.stream.state import TextStream
from tokworker.tokenizer import Tokenizer

MODEL = Path(__file__).resolve().parent.parent / "tokworker" / "data" / "default"
TOKENIZER = Tokenizer.from_dir(MODEL)
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
SCRIPTS = [
    ("Hello 日本語 🧑‍🚀, naïve café. STOP and more", dict(stop=["STOP"])),
    ("<think>\nabout 東京\n</think>\n\nThe answer is 42.", dict(reasoning_parser="qwen3")),
    ("<think>\nA call.\n</think>\n\nOK.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\"}}"
     "\n</tool_call><tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"東京\"}}\n</tool_call>",
     dict(reasoning_parser="qwen3", tool_parser="hermes", tools=TOOLS)),
]
APIS = ["chat", "completions", "responses", "anthropic"]
FORMAT = ChunkFormat(id="c", model="m", created=1)


def by_type(union) -> dict:
    """The event classes of an SDK union by their `type` literal (a readable error names one class)."""
    members = typing.get_args(typing.get_args(union)[0]) if typing.get_origin(union) is typing.Annotated \
        else typing.get_args(union)
    return {typing.get_args(m.model_fields["type"].annotation)[0]: TypeAdapter(m) for m in members}


VALIDATORS = {"chat": TypeAdapter(ChatCompletionChunk), "completions": TypeAdapter(Completion),
              "responses": by_type(ResponseStreamEvent), "anthropic": by_type(RawMessageStreamEvent)}


def logprobs_for(ids, top=2):
    size = TOKENIZER.vocab_size
    return [(-0.5 - i / 100, [((t + j) % size, -1.0 - j) for j in range(top)]) for i, t in enumerate(ids)]


def written(api, script, sizes, *, eos=True, max_tokens=None, index=0, n=1, logprobs=True, continuous=False):
    text, extra = SCRIPTS[script]
    ids = TOKENIZER.encode(text) + ([TOKENIZER.eos_token_ids[0]] if eos else [])
    params = StreamParams(**extra, logprobs=2 if logprobs else None, include_usage=True, max_tokens=max_tokens,
                          continuous_usage_stats=continuous)
    stream = TextStream(TOKENIZER, params, prompt_ids=[1, 2, 3], prompt_text="<|im_start|>assistant\n")
    writer = writer_for(ChunkFormat(id="r-1", model="m", created=1700000000, api=api, index=index, n=n), params,
                        [1, 2, 3], TOKENIZER)
    lps = logprobs_for(ids)
    out, at, k = [], 0, 0
    while at < len(ids) and not stream.done:
        size = sizes[k % len(sizes)]
        k += 1
        out.append(writer.sse(stream.push(ids[at:at + size], lps[at:at + size] if logprobs else None)))
        at += size
    if not stream.done:
        out.append(writer.sse(stream.finish()))
    return b"".join(out)


def events(api, raw: bytes):
    """(event name or None, the parsed JSON) per server-sent event; each validates as the SDK's type."""
    out = []
    for block in raw.decode().split("\n\n"):
        if not block:
            continue
        name, data = None, None
        for line in block.split("\n"):
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            elif field == "data":
                data = json.loads(value)
        assert data is not None
        if name is not None:
            assert data["type"] == name
        checked = data
        if api == "completions" and data["choices"] and data["choices"][0]["finish_reason"] in (None, "tool_calls"):
            # the SDK's Completion is the whole response: its finish_reason is never null (or "tool_calls",
            # which only a tool parser, foreign to this API, makes)
            checked = {**data, "choices": [{**data["choices"][0], "finish_reason": "stop"}]}
        validator = VALIDATORS[api]
        (validator[data["type"]] if isinstance(validator, dict) else validator).validate_python(checked)
        out.append((name, data))
    return out


def assemble(api, raw: bytes):
    """What a client rebuilds: text, reasoning, calls, logprob tokens, usage, finish; plus the event kinds
    in order with repeats of one delta kind collapsed."""
    text, reasoning, calls, tokens, usage, finish, kinds = "", "", {}, [], None, None, []

    def kind(name):
        if not kinds or kinds[-1] != name:
            kinds.append(name)

    for name, data in events(api, raw):
        if api == "chat":
            if not data["choices"]:
                usage = data["usage"]
                kind("usage")
                continue
            choice = data["choices"][0]
            delta = choice["delta"]
            text += delta.get("content") or ""
            reasoning += delta.get("reasoning_content") or ""
            for call in delta.get("tool_calls") or ():
                entry = calls.setdefault(call["index"], ["", ""])
                entry[0] += call["function"].get("name") or ""
                entry[1] += call["function"].get("arguments") or ""
            tokens += [e["token"] for e in (choice["logprobs"] or {}).get("content") or ()]
            finish = choice["finish_reason"] or finish
            if set(delta) - {"role"}:     # where the finish lands (its own empty chunk or not) is the grouping's
                kind("content" if "content" in delta else "reasoning" if "reasoning_content" in delta else "call")
        elif api == "completions":
            if not data["choices"]:
                usage = data["usage"]
                kind("usage")
                continue
            choice = data["choices"][0]
            text += choice["text"]
            tokens += (choice["logprobs"] or {}).get("tokens", [])
            finish = choice["finish_reason"] or finish
            kind("text" if choice["finish_reason"] is None else "finish")
        elif api == "responses":
            kind(name)
            if name == "response.output_text.delta":
                text += data["delta"]
                tokens += [e["token"] for e in data["logprobs"]]
            elif name == "response.reasoning_text.delta":
                reasoning += data["delta"]
            elif name == "response.output_item.added" and data["item"]["type"] == "function_call":
                calls[len(calls)] = [data["item"]["name"], ""]
            elif name == "response.function_call_arguments.delta":
                calls[len(calls) - 1][1] += data["delta"]
            elif name == "response.completed":
                usage, finish = data["response"]["usage"], data["response"]["status"]
        else:
            kind(name)
            if name == "content_block_start" and data["content_block"]["type"] == "tool_use":
                calls[len(calls)] = [data["content_block"]["name"], ""]
            elif name == "content_block_delta":
                delta = data["delta"]
                text += delta.get("text", "")
                reasoning += delta.get("thinking", "")
                if delta["type"] == "input_json_delta":
                    calls[len(calls) - 1][1] += delta["partial_json"]
            elif name == "message_delta":
                usage, finish = data["usage"], data["delta"]["stop_reason"]
    return {"text": text, "reasoning": reasoning, "calls": calls, "tokens": tokens, "usage": usage,
            "finish": finish, "kinds": kinds}


@settings(max_examples=120, deadline=None)
@given(st.sampled_from(APIS), st.sampled_from(range(len(SCRIPTS))), st.lists(st.integers(1, 7), min_size=1, max_size=6),
       st.booleans())
def test_any_grouping_writes_the_same_response(api, script, sizes, eos):
    one_by_one = assemble(api, written(api, script, [1], eos=eos))
    grouped = assemble(api, written(api, script, sizes, eos=eos))
    assert grouped == one_by_one


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("script", range(len(SCRIPTS)))
def test_the_response_says_what_the_whole_text_says(api, script):
    text, extra = SCRIPTS[script]
    ids = TOKENIZER.encode(text) + [TOKENIZER.eos_token_ids[0]]
    whole = TextStream(TOKENIZER, StreamParams(**extra), prompt_text="<|im_start|>assistant\n")
    update = whole.push(ids)
    got = assemble(api, written(api, script, [len(ids)]))
    content = "".join(d.content or "" for d in update.deltas)
    assert got["text"] == content
    if api != "completions":
        assert got["reasoning"] == "".join(d.reasoning_content or "" for d in update.deltas)
    if api in ("chat", "responses", "anthropic"):
        want: dict = {}
        for delta in update.deltas:
            for call in delta.tool_calls or ():
                entry = want.setdefault(call.index, ["", ""])
                entry[0] += call.function.name or ""
                entry[1] += call.function.arguments or ""
        assert list(got["calls"].values()) == list(want.values())
    finish = {"chat": update.finish_reason, "completions": update.finish_reason, "responses": "completed",
              "anthropic": {"stop": "stop_sequence" if isinstance(update.stop_reason, str) else "end_turn",
                            "tool_calls": "tool_use"}[update.finish_reason]}[api]
    assert got["finish"] == finish
    one_by_one = TextStream(TOKENIZER, StreamParams(**extra), prompt_text="<|im_start|>assistant\n")
    for token_id in ids:     # a stop string ends the count at its token (a whole batch counts every id of it)
        one_by_one.push([token_id])
    counted = one_by_one.num_tokens
    if api in ("chat", "completions"):
        assert got["usage"]["completion_tokens"] == counted and got["usage"]["prompt_tokens"] == 3
        assert len(got["tokens"]) == counted   # every accepted token has its entry
    else:
        assert got["usage"]["output_tokens"] == counted


def test_chat_sse_is_the_json_of_its_chunks_with_logprobs_and_usage():
    for script in range(len(SCRIPTS)):
        text, extra = SCRIPTS[script]
        ids = TOKENIZER.encode(text) + [TOKENIZER.eos_token_ids[0]]
        params = StreamParams(**extra, logprobs=1)
        stream = TextStream(TOKENIZER, params)
        sse_writer, dict_writer = ChunkWriter.for_format(FORMAT, params), ChunkWriter.for_format(FORMAT, params)
        sse, dicts = b"", []
        lps = logprobs_for(ids, 1)
        for k in range(0, len(ids), 3):
            update = stream.push(ids[k:k + 3], lps[k:k + 3])
            sse += sse_writer.sse(update)
            dicts += dict_writer.chunks(update)
        assert sse == b"".join(b"data: " + msgspec.json.encode(d) + b"\n\n" for d in dicts)


def test_n_choices_share_one_response_and_one_usage_chunk():
    first = written("chat", 0, [2], index=0, n=2)
    second = written("chat", 1, [3], index=1, n=2)
    assert all(d["choices"][0]["index"] == 0 for _, d in events("chat", first))
    assert all(d["choices"][0]["index"] == 1 for _, d in events("chat", second))
    # like vLLM, each choice's first chunk is its role alone (its first step, even when that step shows no
    # text: the choices' first chunks arrive in index order); no choice writes the usage chunk itself
    for raw in (first, second):
        assert events("chat", raw)[0][1]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [d for _, d in events("chat", first + second) if not d["choices"]] == []
    usage = usage_event("r-1", "m", 1700000000, [Usage(3, 10), Usage(3, 7, reasoning_tokens=4)])
    (_, chunk), = events("chat", usage)
    assert chunk["usage"] == {"prompt_tokens": 3, "total_tokens": 20, "completion_tokens": 17,
                              "completion_tokens_details": {"reasoning_tokens": 4}}


def test_stop_strings_and_tool_call_finishes_as_vllm_writes_them():
    (_, last), = [e for e in events("chat", written("chat", 0, [1])) if e[1]["choices"]][-1:]
    assert last["choices"][0]["finish_reason"] == "stop" and last["choices"][0]["stop_reason"] == "STOP"
    message_delta = [d for n, d in events("anthropic", written("anthropic", 0, [1])) if n == "message_delta"]
    assert message_delta[0]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "STOP"}
    completion = [d for _, d in events("completions", written("completions", 0, [2])) if d["choices"]]
    assert completion[-1]["choices"][0]["stop_reason"] == "STOP"
    # a call cut by max_tokens: "length", as OpenAI says (vLLM says "tool_calls", with arguments that do not
    # parse); a call that ends: "tool_calls"
    cut = written("chat", 2, [1], eos=False, max_tokens=len(TOKENIZER.encode(SCRIPTS[2][0])) - 3)
    finish = [d["choices"][0] for _, d in events("chat", cut) if d["choices"]][-1]
    assert finish["finish_reason"] == "length" and finish["stop_reason"] is None
    ended = [d["choices"][0] for _, d in events("chat", written("chat", 2, [1])) if d["choices"]][-1]
    assert ended["finish_reason"] == "tool_calls"
    length = [d for _, d in events("responses", written("responses", 1, [1], eos=False, max_tokens=5))]
    assert length[-1]["response"]["status"] == "incomplete"
    assert length[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_continuous_usage_stats_on_every_chunk():
    chunks = [d for _, d in events("chat", written("chat", 1, [2], continuous=True))]
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    assert all("usage" in c for c in chunks) and counts == sorted(counts)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == chunks[-2]["usage"]


def test_completions_echo_puts_the_prompt_first():
    params = StreamParams()
    prompt = TOKENIZER.encode("Say it:")
    writer = writer_for(ChunkFormat(id="c", model="m", created=1, api="completions", echo=True), params, prompt,
                        TOKENIZER)
    stream = TextStream(TOKENIZER, params, prompt_ids=prompt)
    raw = writer.sse(stream.push(TOKENIZER.encode(" done"))) + writer.sse(stream.finish())
    assert "".join(d["choices"][0]["text"] for _, d in events("completions", raw)) == "Say it: done"


def test_an_unknown_api_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown chunk api 'grpc'"):
        writer_for(ChunkFormat(id="c", model="m", created=1, api="grpc"), StreamParams())
