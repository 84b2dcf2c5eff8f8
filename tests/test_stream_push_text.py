"""The usual step's short path: TextStream.push_text gives exactly what push gives (plain content as its
text, anything else as the update; with reasoning and tool parsers too), and a worker stream stepped
through it (ServedStream.one) writes the same bytes as one stepped through its writer's sse, for every
format, streamed and direct.
Covers TextStream.push_text, ChunkWriter.text_event, CompletionWriter.text_event, ServedStream.one."""

from __future__ import annotations

import itertools
import os
import socket
import types

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tokworker.protocol.deltas import EMPTY, ChunkFormat, Delta, StreamParams, StreamUpdate
from tokworker.protocol.messages import OpenStream, Step
from tokworker.stream.state import TextStream
from tokworker.worker.sinks import SinkTable
from tokworker.worker.streams import StreamTable
from tests.test_sinks import read_all
from tests.test_stream_state import STOPS, ids_strategy, ref, tok  # noqa: F401 (fixtures)

PROMPTS = [None, "<|im_start|>assistant\n", "<|im_start|>assistant\n<think>\n"]
# mostly text that takes the short path, with what leaves it now and then (markup, stops, split characters)
PLAIN = ["Hello", " world", ".", " more", " words", "\n", " 日本語", " 🧑‍🚀", " The answer is 42", "ab", "c",
         "<think>", "</think>", "STOP", "<tool_call>", '{"name": "f", "arguments": {"a": 1}}', "</tool_call>",
         '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>', '[TOOL_CALLS][{"name": "f", "arguments": {}}]']


@pytest.fixture(autouse=True)
def same_call_ids(monkeypatch):
    """Two streams fed alike draw the same call ids (each is random otherwise)."""
    from tokworker.parsers.tools.core import callids
    monkeypatch.setattr(callids, "os", types.SimpleNamespace(urandom=bytes))


TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
                                                                       "properties": {"a": {"type": "integer"}}}}}]


def stream_params():
    return st.builds(StreamParams, stop=st.lists(st.sampled_from(STOPS), max_size=2),
                     tool_parser=st.sampled_from([None, None, "hermes", "hermes", "qwen3_coder", "mistral", "pythonic"]),
                     tools=st.just(TOOLS),
                     include_stop_str_in_output=st.booleans(), ignore_eos=st.booleans(),
                     min_tokens=st.integers(0, 4), max_tokens=st.one_of(st.none(), st.integers(1, 30)),
                     skip_special_tokens=st.booleans(),
                     reasoning_parser=st.sampled_from([None, None, None, "qwen3", "deepseek_r1", "deepseek_v3"]),
                     include_usage=st.booleans())


def plain_ids(ref, eos):
    weighted = st.sampled_from(PLAIN[:11] * 3 + PLAIN[11:] * 2)
    return st.lists(st.one_of(weighted, weighted, weighted, st.just(None)), max_size=40).map(
        lambda parts: [i for p in parts for i in ([eos] if p is None else ref.encode(p, add_special_tokens=False).ids)])


def any_ids(ref, eos):
    return st.one_of(ids_strategy(ref, eos), plain_ids(ref, eos))


def test_push_text_is_push_one_id_at_a_time(tok, ref):
    eos = tok.token_to_id(tok.eos_token)

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(any_ids(ref, eos), stream_params(), st.sampled_from(PROMPTS))
    def check(ids, params, prompt):
        pushed = TextStream(tok, params, prompt_text=prompt)
        short = TextStream(tok, params, prompt_text=prompt)
        for token_id in ids:
            expected = pushed.push([token_id])
            got = short.push_text(token_id)
            if got.__class__ is str:
                assert expected == (StreamUpdate([Delta(got)]) if got else EMPTY)
            else:
                assert got == expected
        assert short.finish() == pushed.finish()

    check()


def test_push_text_around_a_tool_call(tok, ref):
    """Content, a hermes call, content: the short path carries the plain tokens on both sides of the call,
    and the stream says what push says."""
    ids = ref.encode('Sure, let me check that for you. <tool_call>\n{"name": "f", "arguments": {"a": 1}}\n'
                     '</tool_call> And more words after it', add_special_tokens=False).ids
    params = StreamParams(tool_parser="hermes", tools=TOOLS)
    pushed, short = TextStream(tok, params), TextStream(tok, params)
    texts = 0
    for token_id in ids:
        expected, got = pushed.push([token_id]), short.push_text(token_id)
        if got.__class__ is str:
            texts += 1
            got = StreamUpdate([Delta(got)]) if got else EMPTY
        assert got == expected
    assert short.finish("stop") == pushed.finish("stop") and short.finish_reason == "tool_calls"
    assert texts >= 10                          # of 33 ids: 12 (the call and its edges take push)


FORMATS = ["chat", "completions", "responses", "anthropic"]


def _table(tok, tmp_path, name):
    table = StreamTable(tok, 64, 3600.0)
    table.sinks = SinkTable(str(tmp_path / f"{name}.sinks"), 1 << 20)
    return table


def _open(table, name, api, params, prompt_ids, sink):
    chunks = ChunkFormat(id="id-1", model="m", created=1700000000, api=api)
    table.open("s", OpenStream(stream_id=name, params=params, prompt_ids=prompt_ids, chunks=chunks, sink=sink))


def test_one_writes_what_step_writes(tok, ref, tmp_path):
    """The table steps a one-id step through ServedStream.one; the same ids through ServedStream.step (the
    general path) give the same events, forwarded (in each update's sse) and direct (on the socket)."""
    eos = tok.token_to_id(tok.eos_token)
    prompt_ids = ref.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False).ids
    tables = {"short": _table(tok, tmp_path, "short"), "general": _table(tok, tmp_path, "general")}
    names = itertools.count()

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(any_ids(ref, eos), stream_params(), st.sampled_from(FORMATS), st.booleans())
    def check(ids, params, api, sink):
        written = {}
        a = f"a{next(names)}"                 # a stream of its own: a failed example leaves its stream open
        for name, table in tables.items():
            _open(table, a, api, params, prompt_ids, sink)
            ours = theirs = None
            if sink:
                ours, theirs = socket.socketpair()
                table.sinks.sinks[("s", a)].attach(os.dup(theirs.fileno()))
                theirs.close()
            out = []
            stream = table.sessions["s"][a]
            for token_id in ids:
                if name == "short":
                    reply = table.step("s", Step(ids={a: [token_id]}))
                    update = reply.updates[0]
                else:
                    update = stream.step([token_id], False, 0.0)
                    update = None if update is EMPTY else update
                    if update is not None and update.finish_reason is not None:
                        table._remove("s", table.sessions["s"], a)
                out.append(update)
                if update is not None and update.finish_reason is not None:
                    break
            else:
                out.append(table.step("s", Step(ids={}, finish=[a])).updates[0])
            table.close("s", [a])
            written[name] = (out, read_all(ours) if sink else b"")
            if sink:
                ours.close()
        assert written["short"] == written["general"]

    check()
