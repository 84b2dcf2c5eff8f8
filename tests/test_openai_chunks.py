"""ChunkWriter: every chunk validates as the real openai SDK's ChatCompletionChunk; the chunks say exactly
what the stream's updates said, with no empty chunks from held-back text; its server-sent events are the
same chunks, byte for byte, and rebuild the same message however the stream's steps were grouped."""

from __future__ import annotations

import functools
import json

import msgspec
from hypothesis import given, settings, strategies as st
from openai.types.chat import ChatCompletionChunk

from tokworker.protocol.deltas import ChunkFormat, Delta, FunctionDelta, StreamParams, StreamUpdate, ToolCallDelta
from tokworker.wire.chat import ChunkWriter

text = st.text(min_size=1, max_size=8)
call_fragment = st.builds(
    lambda index, first, name, args: ToolCallDelta(
        index=index, id=f"call_{index}" if first else None, type="function" if first else None,
        function=FunctionDelta(name=name if first else None, arguments=args)),
    st.integers(0, 2), st.booleans(), st.sampled_from(["get_weather", "f"]), st.one_of(st.none(), text))
delta = st.one_of(st.builds(Delta, content=text), st.builds(Delta, reasoning_content=text),
                  st.builds(lambda calls: Delta(tool_calls=calls), st.lists(call_fragment, min_size=1, max_size=2)))
updates = st.tuples(st.lists(st.lists(delta, max_size=3), max_size=6),
                    st.sampled_from([("stop", None), ("stop", "</answer>"), ("stop", 151645), ("length", None),
                                     ("tool_calls", None)]))


def validate(chunks: list[dict]) -> list[ChatCompletionChunk]:
    # through JSON, as a client receives them
    return [ChatCompletionChunk.model_validate(json.loads(json.dumps(chunk))) for chunk in chunks]


@settings(max_examples=200, deadline=None)
@given(updates)
def test_every_chunk_validates_and_says_the_same(case):
    steps, (finish_reason, stop_reason) = case
    stream_updates = [StreamUpdate(deltas=d) for d in steps] + [StreamUpdate(finish_reason=finish_reason,
                                                                           stop_reason=stop_reason)]
    writer = ChunkWriter("chatcmpl-1", "qwen3", created=1700000000, index=0)
    chunks = [c for u in stream_updates for c in writer.chunks(u)]
    parsed = validate(chunks)
    assert all(c.object == "chat.completion.chunk" and c.id == "chatcmpl-1" and c.model == "qwen3" for c in parsed)
    # vLLM's opening chunk: the role and empty content, nothing else
    assert parsed[0].choices[0].delta.role == "assistant" and parsed[0].choices[0].delta.content == ""
    assert all(c.choices[0].delta.role is None for c in parsed[1:])
    assert [c.choices[0].finish_reason for c in parsed] == [None] * (len(parsed) - 1) + [finish_reason]
    last = parsed[-1].choices[0]
    assert last.model_extra.get("stop_reason") == stop_reason  # vLLM's extra field survives the SDK
    sent = [d for step in steps for d in step]
    got = [c.choices[0].delta for c in parsed]
    assert "".join(d.content or "" for d in sent) == "".join(g.content or "" for g in got)
    assert "".join(d.reasoning_content or "" for d in sent) == \
        "".join(g.model_extra.get("reasoning_content") or "" for g in got)
    sent_calls = [(c.index, c.id, c.function.name, c.function.arguments) for d in sent for c in d.tool_calls or ()]
    got_calls = [(c.index, c.id, c.function.name, c.function.arguments) for g in got for c in g.tool_calls or ()]
    assert sent_calls == got_calls
    # a chunk without content, reasoning or calls is only the final one (or the role announcement)
    for chunk, g in zip(parsed[1:-1], got[1:-1]):
        assert g.content or g.model_extra.get("reasoning_content") or g.tool_calls


def test_updates_with_nothing_make_no_chunks():
    writer = ChunkWriter("id", "m", created=1)
    assert [c["choices"][0]["delta"] for c in writer.chunks(StreamUpdate())] == [{"role": "assistant", "content": ""}]
    assert writer.chunks(StreamUpdate()) == []
    assert writer.chunks(StreamUpdate(deltas=[Delta(content="Hi")]))[0]["choices"][0]["delta"] == {"content": "Hi"}
    final = writer.chunks(StreamUpdate(finish_reason="stop"))
    assert final == [{"id": "id", "object": "chat.completion.chunk", "created": 1, "model": "m",
                      "choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "logprobs": None,
                                   "stop_reason": None}]}]
    validate(final)


def test_real_stream_with_reasoning_and_a_tool_call_validates():
    import pytest
    from tests.test_stream_state import qwen
    from tokworker.stream.state import TextStream
    tok, ref = qwen()
    ids = ref.encode('<think>\nNeed weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": '
                     '{"city": "Paris"}}\n</tool_call><|im_end|>', add_special_tokens=False).ids
    stream = TextStream(tok, StreamParams(reasoning_parser="qwen3", tool_parser="hermes"))
    writer = ChunkWriter("chatcmpl-x", "Qwen/Qwen3-0.6B", index=1)
    chunks = [c for i in ids for c in writer.chunks(stream.push([i]))]
    parsed = validate(chunks)
    assert parsed[-1].choices[0].finish_reason == "tool_calls"
    calls = [c for p in parsed for c in p.choices[0].delta.tool_calls or ()]
    assert calls[0].id and calls[0].type == "function" and calls[0].function.name == "get_weather"
    assert json.loads("".join(c.function.arguments or "" for c in calls)) == {"city": "Paris"}
    assert all(p.choices[0].index == 1 for p in parsed)


# ---------------------------------------------------------------- server-sent events

def events(sse: bytes) -> list[dict]:
    """A response body as a client reads it: `data: {json}` events, each ended by a blank line."""
    assert sse.endswith(b"\n\n") or not sse
    parts = sse.split(b"\n\n")[:-1]
    assert all(part.startswith(b"data: ") and b"\n" not in part for part in parts)
    return [json.loads(part[len(b"data: "):]) for part in parts]


def rebuild(chunks: list[dict]) -> dict:
    """The assistant message a client assembles from the chunks (tool-call ids are random: kept aside)."""
    message = {"role": None, "content": "", "reasoning_content": "", "calls": {}, "finish_reason": None,
               "stop_reason": None}
    for chunk in chunks:
        choice = chunk["choices"][0]
        delta = choice["delta"]
        message["role"] = message["role"] or delta.get("role")
        message["content"] += delta.get("content") or ""
        message["reasoning_content"] += delta.get("reasoning_content") or ""
        for call in delta.get("tool_calls") or ():
            entry = message["calls"].setdefault(call["index"], {"name": "", "arguments": "", "ids": 0})
            entry["ids"] += "id" in call
            entry["name"] += call.get("function", {}).get("name") or ""
            entry["arguments"] += call.get("function", {}).get("arguments") or ""
        if choice["finish_reason"] is not None:
            message["finish_reason"], message["stop_reason"] = choice["finish_reason"], choice["stop_reason"]
    return message


@settings(max_examples=200, deadline=None)
@given(updates, st.integers(0, 3))
def test_sse_is_the_chunks_encoded_byte_for_byte(case, index):
    steps, (finish_reason, stop_reason) = case
    stream_updates = [StreamUpdate(deltas=d) for d in steps] + [StreamUpdate(finish_reason=finish_reason,
                                                                           stop_reason=stop_reason)]
    form = ChunkFormat(id="chatcmpl-é\"1", model="Qwen/Qwen3 🚀", created=1700000000, index=index)
    as_dicts, as_sse = ChunkWriter(form.id, form.model, form.created, index), ChunkWriter.for_format(form)
    body = b""
    for update in stream_updates:
        chunks, sse = as_dicts.chunks(update), as_sse.sse(update)
        assert events(sse) == chunks
        assert sse == b"".join(b"data: " + msgspec.json.encode(chunk) + b"\n\n" for chunk in chunks)
        body += sse
    parsed = [ChatCompletionChunk.model_validate_json(part[len(b"data: "):]) for part in body.split(b"\n\n")[:-1]]
    assert [c.choices[0].finish_reason for c in parsed][-1] == finish_reason
    assert all(c.choices[0].index == index and c.id == form.id and c.model == form.model for c in parsed)


def test_the_first_step_opens_with_the_role_and_later_empty_updates_are_empty():
    writer = ChunkWriter("id", "m", created=1)
    head = {"id": "id", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    assert events(writer.sse(StreamUpdate())) == [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None,
                              "logprobs": None}]}]
    assert writer.sse(StreamUpdate()) == b""
    assert events(writer.sse(StreamUpdate(finish_reason="stop", stop_reason="</a>"))) == [
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "logprobs": None,
                              "stop_reason": "</a>"}]}]


@functools.cache
def _default_stream_ids():
    from pathlib import Path
    from tokworker.tokenizer import Tokenizer
    tokenizer = Tokenizer.from_dir(Path(__file__).resolve().parent.parent / "tokworker" / "data" / "default")
    text = ('<think>\nNeed the weather in 東京 🚀.\n</think>\n\nLet me check. <tool_call>\n{"name": "get_weather", '
            '"arguments": {"city": "Zürich \\"old\\" town"}}\n</tool_call><tool_call>\n{"name": "get_weather", '
            '"arguments": {"city": "Paris"}}\n</tool_call>')
    return tokenizer, tokenizer.encode(text) + [tokenizer.eos_token_ids[0]]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=60))
def test_real_stream_events_rebuild_the_same_message_however_steps_group(sizes):
    from tokworker.stream.state import TextStream
    tokenizer, ids = _default_stream_ids()
    params = StreamParams(reasoning_parser="qwen3", tool_parser="hermes", tools=[
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])
    form = ChunkFormat(id="chatcmpl-7", model="m", created=7)

    def body(groups) -> bytes:
        stream, writer, out = TextStream(tokenizer, params, prompt_text="<|im_start|>assistant\n"), \
            ChunkWriter.for_format(form), []
        for group in groups:
            update = stream.push(group)
            out.append(writer.sse(update))
            if update.finish_reason is not None:
                return b"".join(out)
        out.append(writer.sse(stream.finish()))
        return b"".join(out)

    groups, at = [], 0
    for size in sizes:
        groups.append(ids[at:at + size])
        at += size
    if at < len(ids):
        groups.append(ids[at:])
    one_by_one, grouped = events(body([[i] for i in ids])), events(body(groups))
    for chunk in grouped:
        ChatCompletionChunk.model_validate(chunk)
    message = rebuild(grouped)
    assert message == rebuild(one_by_one)
    assert [c["choices"][0]["delta"].get("role") for c in grouped] == ["assistant"] + [None] * (len(grouped) - 1)
    assert message["reasoning_content"] == "Need the weather in 東京 🚀."      # the parsers trim the whitespace
    assert message["content"] == "Let me check."
    assert message["finish_reason"] == "tool_calls"
    assert [(c["name"], json.loads(c["arguments"]), c["ids"]) for c in message["calls"].values()] == [
        ("get_weather", {"city": 'Zürich "old" town'}, 1), ("get_weather", {"city": "Paris"}, 1)]
