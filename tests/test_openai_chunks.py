"""ChunkWriter: every chunk validates as the real openai SDK's ChatCompletionChunk; the chunks say exactly
what the stream's updates said, with no empty chunks from held-back text."""

from __future__ import annotations

import json

from hypothesis import given, settings, strategies as st
from openai.types.chat import ChatCompletionChunk

from protocol.deltas import Delta, FunctionDelta, StreamParams, StreamUpdate, ToolCallDelta
from tokworker.parsers.openai_chunks import ChunkWriter

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
    assert parsed[0].choices[0].delta.role == "assistant"
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
    for chunk, g in zip(parsed[:-1], got[:-1]):
        assert g.content or g.model_extra.get("reasoning_content") or g.tool_calls


def test_updates_with_nothing_make_no_chunks():
    writer = ChunkWriter("id", "m", created=1)
    assert writer.chunks(StreamUpdate()) == []
    assert writer.chunks(StreamUpdate(deltas=[Delta(content="Hi")]))[0]["choices"][0]["delta"] == \
        {"role": "assistant", "content": "Hi"}
    final = writer.chunks(StreamUpdate(finish_reason="stop"))
    assert final == [{"id": "id", "object": "chat.completion.chunk", "created": 1, "model": "m",
                      "choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "logprobs": None,
                                   "stop_reason": None}]}]
    validate(final)


def test_real_stream_with_reasoning_and_a_tool_call_validates():
    import pytest
    pytest.importorskip("tokworker.parsers.tools.hermes")
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
