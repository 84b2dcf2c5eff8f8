"""The wire contract: every message round-trips through msgpack, anything else is refused with a typed
error before it becomes an object, and nothing on the wire can run code (no pickle anywhere)."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings, strategies as st

from tokworker.protocol.deltas import ChunkFormat, Delta, FunctionDelta, StreamParams, StreamUpdate, ToolCallDelta
from tokworker.protocol.messages import (PROTOCOL_VERSION, CloseReply, CloseStreams, Compile, CompileReply, Decode, DecodeReply,
                               Encode, EncodeReply, Error, ErrorReply, Guide, GuideQuery, GuideReply, GuideResult,
                               Hello, HelloReply, Limits, OpenReply, OpenStream, Render, RenderReply, Stats, StatsReply,
                               Step, StepReply, decode_reply, decode_request, encode_message, nesting_depth, pack_id,
                               unpack_id)

REPO = Path(__file__).resolve().parent.parent

REQUESTS = [
    Hello(version=PROTOCOL_VERSION, session="s", epoch=3, reset=True),
    Stats(),
    Render(messages=[{"role": "user", "content": "hi", "extra": {"nested": [1, 2.5, None, True]}}],
           tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
           add_generation_prompt=False, template_kwargs={"enable_thinking": False}, return_text=True),
    Render(messages=[{"role": "user", "content": "hi"}], max_model_len=4096,
           open=[OpenStream(stream_id="c-0", params=StreamParams(max_tokens=None, logprobs=2), sink=True,
                            chunks=ChunkFormat(id="chatcmpl-1", model="m", created=1, n=2)),
                 OpenStream(stream_id="c-1", chunks=ChunkFormat(id="chatcmpl-1", model="m", created=1, index=1, n=2))]),
    Encode(texts=["a", "ß 日本 🧑‍🚀", ""], add_special_tokens=True, split_special_tokens=True),
    Decode(ids=[[1, 2, 3], []], skip_special_tokens=True),
    Compile(json_schema={"type": "object", "properties": {"a": {"type": "integer"}}}),
    Compile(tools=[{"type": "function", "function": {"name": "f"}}], tool_name="f", eos_token_ids=[2]),
    Guide(queries={"r1": GuideQuery(constraint_id="c" * 32, state=1), "r2": GuideQuery(constraint_id="d", state=7,
                                                                                       ids=[5, 151_000])}),
    OpenStream(stream_id="req-1", params=StreamParams(stop=["</a>"], stop_token_ids=[7], max_tokens=9,
                                                      reasoning_parser="qwen3", tool_parser="hermes",
                                                      tools=[{"type": "function", "function": {"name": "f"}}]),
               prompt_ids=[1, 2], prompt_text="<|im_start|>", replay=[[5], [6, 7]]),
    Step(ids={"a": [1, 2], "b": []}, finish=["c"]),
    Step(ids={"a": [3]}, news_only=True),
    CloseStreams(stream_ids=["a", "b"]),
]
REPLIES = [
    HelloReply(version=1, worker_id="h:1:ab", index=2, pool_size=4, pid=1, model_fingerprint="f" * 32,
               vocab_size=151_000, eos_token_ids=[2, 3], capabilities=["encode", "stream"],
               limits=Limits(max_message_bytes=1, max_depth=2, max_batch=3, max_text_chars=4, max_streams=5),
               tool_parser="hermes"),
    StatsReply(worker_id="w", index=0, pool_size=2, pid=1, model_fingerprint="f", uptime_s=1.5, draining=False,
               requests=3, errors=1, streams_open=2, streams_opened=9, queue_depth=0, max_rss_kb=1000,
               errors_by_code={"invalid": 1}),
    RenderReply(ids=[1, 2], text="x"), RenderReply(ids=[3], opened=True),
    EncodeReply(ids=[[1], []]),
    DecodeReply(texts=["a", ""]),
    CompileReply(constraint_id="c" * 32, pattern="a+", initial_state=1, vocab_size=151_669, eos_token_ids=[2]),
    GuideReply(results={"r1": GuideResult(state=3, mask=0, accepting=True), "r3": GuideResult(state=3, mask=0)},
               masks=[b"\x01\x00\x00\x80" * 4740], errors={"r2": Error(code="unknown_constraint")}),
    OpenReply(stream_id="s"),
    StepReply(updates=[StreamUpdate(deltas=[Delta(content="hi"), Delta(reasoning_content="r"), Delta(
        tool_calls=[ToolCallDelta(index=0, id="call_1", type="function",
                                  function=FunctionDelta(name="f", arguments="{"))])],
        finish_reason="stop", stop_reason="</a>", abort=True), StreamUpdate()],
        errors={"b": Error(code="unknown_stream", message="no open stream 'b'")}, finished=[0]),
    CloseReply(closed=2),
    ErrorReply(code="invalid", message="why", request_id=2**64 - 1),
]


@pytest.mark.parametrize("msg", REQUESTS, ids=lambda m: type(m).__name__)
def test_every_request_round_trips(msg):
    assert decode_request(encode_message(msg)) == msg


@pytest.mark.parametrize("msg", REPLIES, ids=lambda m: type(m).__name__)
def test_every_reply_round_trips(msg):
    assert decode_reply(encode_message(msg)) == msg


def test_the_type_tag_is_a_plain_field_other_languages_can_write():
    body = msgspec.msgpack.encode({"type": "encode", "texts": ["hi"]})
    assert decode_request(body) == Encode(texts=["hi"])
    assert msgspec.msgpack.decode(encode_message(Encode(texts=["hi"]))) == {"type": "encode", "texts": ["hi"]}


@pytest.mark.parametrize("body, fragment", [
    ({"type": "launch_missiles"}, "`$.type`"),
    ({"texts": ["a"]}, "missing required field `type`"),
    ({"type": "encode", "texts": ["a"], "surprise": 1}, "unknown field `surprise`"),
    ({"type": "encode", "texts": "not a list"}, "Expected `array`"),
    ({"type": "step", "ids": {"a": ["x"]}}, "Expected `int`"),
    ({"type": "open", "stream_id": "s", "params": {"stop": [], "evil": True}}, "unknown field `evil`"),
])
def test_wrong_messages_are_validation_errors(body, fragment):
    with pytest.raises(msgspec.ValidationError, match=re.escape(fragment)):
        decode_request(msgspec.msgpack.encode(body))


class _Tripwire:
    fired = False

    def __reduce__(self):
        return (_trip, ())


def _trip():
    _Tripwire.fired = True
    return "pwned"


@pytest.mark.parametrize("protocol", range(0, pickle.HIGHEST_PROTOCOL + 1))
def test_a_pickle_never_runs(protocol):
    payload = pickle.dumps({"type": "encode", "texts": [_Tripwire()]}, protocol=protocol)
    with pytest.raises((msgspec.DecodeError, msgspec.ValidationError)):
        decode_request(payload)
    assert not _Tripwire.fired


def test_deep_nesting_is_an_error_not_a_crash():
    deep = b"\x91" * 200_000 + b"\xc0"                       # 200k nested one-element arrays
    body = b"\x82\xa4type\xa6render\xa8messages\x91\x81\xa1a" + deep
    with pytest.raises((RecursionError, msgspec.DecodeError, msgspec.ValidationError)):
        decode_request(body)


def test_nesting_depth_is_iterative_and_stops_early():
    value = []
    for _ in range(100_000):
        value = [value]
    assert nesting_depth(value, 64) == 65
    assert nesting_depth({"a": [{"b": 1}]}, 64) == 3
    assert nesting_depth("flat", 64) == 0


def test_request_id_frames():
    for rid in (0, 1, 2**32, 2**64 - 1):
        assert unpack_id(pack_id(rid)) == rid
    with pytest.raises(ValueError):
        unpack_id(b"\x01" * 7)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=8), st.lists(st.integers(0, 2**31 - 1), max_size=8), max_size=8),
       st.lists(st.text(max_size=8), max_size=4))
def test_steps_round_trip(ids, finish):
    msg = Step(ids=ids, finish=finish)
    assert decode_request(encode_message(msg)) == msg


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.text(max_size=10) |
                     st.binary(max_size=10) | st.floats(allow_nan=False),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                     max_leaves=20)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["hello", "stats", "render", "encode", "decode", "compile", "guide", "open", "step", "close",
                         "zzz"]),
       st.dictionaries(st.sampled_from(["texts", "ids", "messages", "stream_id", "params", "finish", "version", "x"]),
                       _JSON, max_size=4))
def test_random_fields_decode_or_raise_a_validation_error(kind, fields):
    body = msgspec.msgpack.encode({"type": kind, **fields})
    try:
        msg = decode_request(body)
    except msgspec.ValidationError:
        return
    assert decode_request(encode_message(msg)) == msg


def _sources(*roots):
    for root in roots:
        yield from (REPO / root).rglob("*.py")


def test_no_pickle_and_no_oracle_imports_in_shipped_code():
    banned = re.compile(r"^\s*(import|from)\s+(pickle|cPickle|dill|cloudpickle|transformers|tokenizers|tiktoken|"
                        r"sentencepiece)\b", re.M)
    offenders = [str(path.relative_to(REPO)) for path in _sources("protocol", "frontend", "tokworker/worker")
                 if banned.search(path.read_text())]
    assert offenders == []
    assert "pickle" not in (REPO / "tokworker" / "cli.py").read_text()
