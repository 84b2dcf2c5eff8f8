"""A real worker process on a real socket, fed garbage: every message gets exactly one reply (a result or
a typed ErrorReply naming the request), and the worker never dies."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec
import pytest
import zmq
from hypothesis import HealthCheck, given, settings, strategies as st

from tokworker.protocol.messages import (PROTOCOL_VERSION, ErrorCode, ErrorReply, Hello, HelloReply, OpenReply, OpenStream,
                                         Render, StatsReply, Stats, Step, StepReply, decode_reply, encode_message,
                                         frame, pack_id, unpack_id)
from tokworker.protocol.deltas import StreamParams
from tokworker.tokenizer import Tokenizer
from tokworker.worker.options import WorkerOptions, options_to_json

pytestmark = [pytest.mark.slow, pytest.mark.long]  # a worker process fed garbage

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "tokworker" / "data" / "default"
MAX_MESSAGE = 8 << 20
CODES = {value for name, value in vars(ErrorCode).items() if name.isupper()}


class Raw:
    """A bare DEALER: frames in, (request id, reply) out, with a timeout. A well-formed message is one
    frame: the request id (8 bytes), then the body."""

    def __init__(self, context, endpoint):
        self.sock = context.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVTIMEO, 10_000)
        self.sock.connect(endpoint)

    def exchange(self, frames):
        self.sock.send_multipart(frames)
        reply = self.sock.recv_multipart()
        assert len(reply) == 1
        return unpack_id(reply[0][:8]), decode_reply(reply[0][8:])

    def call(self, body, rid=7):
        got_id, reply = self.exchange([frame(rid, body)])
        assert got_id == rid
        return reply

    def close(self):
        self.sock.close()


@pytest.fixture(scope="module")
def worker():
    run_dir = tempfile.mkdtemp(prefix="tokworker-test-")
    endpoint = f"ipc://{run_dir}/worker"
    options = WorkerOptions(model_dir=str(MODEL), bind=endpoint, max_message_bytes=MAX_MESSAGE, budget_s=0.3,
                            max_batch=64, max_depth=16, memory_limit_mb=2048, cpu_limit_s=30, log_level="ERROR")
    proc = subprocess.Popen([sys.executable, "-m", "tokworker.worker", options_to_json(options)],
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    context = zmq.Context()
    raw = Raw(context, endpoint)
    hello = raw.call(encode_message(Hello(version=PROTOCOL_VERSION)), rid=1)
    assert isinstance(hello, HelloReply) and hello.pid == proc.pid
    yield proc, endpoint, raw, context
    raw.close()
    proc.terminate()
    assert proc.wait(10) == 0                                 # SIGTERM: a clean exit
    context.term()


def assert_alive(worker):
    proc, _, raw, _ = worker
    reply = raw.call(encode_message(Stats()), rid=99)
    assert isinstance(reply, StatsReply) and reply.pid == proc.pid
    assert proc.poll() is None


def expect_error(reply, code, rid=7):
    assert isinstance(reply, ErrorReply), reply
    assert reply.code == code, reply
    assert reply.request_id == rid


def test_garbage_bodies_get_typed_errors(worker):
    raw = worker[2]
    expect_error(raw.call(b""), ErrorCode.MALFORMED)
    expect_error(raw.call(b"\xc1"), ErrorCode.MALFORMED)                      # never-used msgpack byte
    expect_error(raw.call(b"\x82\xa4type"), ErrorCode.MALFORMED)              # truncated map
    expect_error(raw.call(msgspec.msgpack.encode({"type": "rm -rf"})), ErrorCode.UNKNOWN_TYPE)
    expect_error(raw.call(msgspec.msgpack.encode({"type": "encode", "texts": [1]})), ErrorCode.INVALID)
    expect_error(raw.call(msgspec.msgpack.encode({"type": "encode", "texts": ["a"], "x": 1})), ErrorCode.INVALID)
    expect_error(raw.call(msgspec.msgpack.encode([1, 2, 3])), ErrorCode.INVALID)
    assert_alive(worker)


def test_pickles_are_refused(worker):
    raw = worker[2]
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        payload = pickle.dumps({"type": "encode", "texts": ["a"]}, protocol=protocol)
        reply = raw.call(payload)
        assert isinstance(reply, ErrorReply) and reply.code in (ErrorCode.MALFORMED, ErrorCode.INVALID)
    assert_alive(worker)


def test_wrong_frame_shapes(worker):
    raw = worker[2]
    rid, reply = raw.exchange([b"1234567"])                                  # shorter than a request id
    assert rid == 0
    expect_error(reply, ErrorCode.MALFORMED, rid=0)
    rid, reply = raw.exchange([frame(5, encode_message(Stats())), b"extra"])  # two frames: no id to trust
    expect_error(reply, ErrorCode.MALFORMED, rid=0)
    rid, reply = raw.exchange([pack_id(5), encode_message(Stats())])          # protocol 4's two frames
    expect_error(reply, ErrorCode.MALFORMED, rid=0)
    rid, reply = raw.exchange([pack_id(6)])                                   # an id and no body
    expect_error(reply, ErrorCode.MALFORMED, rid=6)
    assert_alive(worker)


def test_deep_and_large_payloads(worker):
    raw = worker[2]
    deep = b"\x91" * 300_000 + b"\xc0"
    body = b"\x82\xa4type\xa6render\xa8messages\x91\x81\xa1a" + deep
    reply = raw.call(body)
    assert isinstance(reply, ErrorReply) and reply.code in (ErrorCode.TOO_LARGE, ErrorCode.MALFORMED)
    nested = {"role": "user", "content": "x"}
    for _ in range(40):                                         # deeper than max_depth=16, shallow for msgspec
        nested = {"role": "user", "content": [nested]}
    expect_error(raw.call(encode_message(Render(messages=[nested]))), ErrorCode.TOO_LARGE)
    expect_error(raw.call(msgspec.msgpack.encode({"type": "encode", "texts": ["a"] * 65})), ErrorCode.TOO_LARGE)
    expect_error(raw.call(msgspec.msgpack.encode({"type": "decode", "ids": [[1]] * 65})), ErrorCode.TOO_LARGE)
    expect_error(raw.call(msgspec.msgpack.encode({"type": "decode", "ids": [[10**9]]})), ErrorCode.INVALID)
    expect_error(raw.call(msgspec.msgpack.encode({"type": "step", "ids": {str(i): [1] for i in range(65)}})),
                 ErrorCode.TOO_LARGE)
    assert_alive(worker)


def test_request_templates_are_refused_unless_enabled(worker):
    msg = Render(messages=[{"role": "user", "content": "hi"}], chat_template="{{ 7 * 6 }}")
    expect_error(worker[2].call(encode_message(msg)), ErrorCode.FORBIDDEN)


def test_a_slow_request_is_cut_at_its_budget(worker):
    raw = worker[2]
    text = " ".join(f"w{i}x{i * 7919 % 104729}" for i in range(400_000))        # ~5 MB of uncached words
    started = time.monotonic()
    expect_error(raw.call(msgspec.msgpack.encode({"type": "encode", "texts": [text]})), ErrorCode.TIMEOUT)
    assert time.monotonic() - started < 5                       # budget 0.3 s; generous for a loaded machine
    assert_alive(worker)


def test_an_oversize_frame_is_dropped_and_the_worker_lives(worker):
    _, endpoint, _, context = worker
    big = Raw(context, endpoint)
    big.sock.setsockopt(zmq.RCVTIMEO, 1000)
    big.sock.send(frame(1, b"\x00" * (MAX_MESSAGE + 1)))
    with pytest.raises(zmq.Again):                               # ZeroMQ drops it silently: clients need timeouts
        big.sock.recv_multipart()
    big.close()
    assert_alive(worker)


def test_the_memory_and_cpu_limits_are_set(worker):
    proc = worker[0]
    worker[2].call(encode_message(Stats()))                     # a request arms the CPU backstop
    limits = Path(f"/proc/{proc.pid}/limits").read_text()
    address = next(line for line in limits.splitlines() if line.startswith("Max address space"))
    assert address.split()[3] == str(2048 << 20)
    cpu = next(line for line in limits.splitlines() if line.startswith("Max cpu time"))
    assert cpu.split()[3] != "unlimited"


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=4))
def test_random_frames_always_get_one_reply(worker, frames):
    raw = worker[2]
    raw.sock.send_multipart(frames)
    reply = raw.sock.recv_multipart()
    assert len(reply) == 1
    decoded = decode_reply(reply[0][8:])
    if isinstance(decoded, ErrorReply):
        assert decoded.code in CODES
    assert worker[0].poll() is None


_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.text(max_size=12) |
                       st.binary(max_size=12) | st.floats(),
                       lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                       max_leaves=25)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(["hello", "stats", "render", "encode", "decode", "compile", "guide", "open", "step", "close",
                         "x"]),
       st.dictionaries(st.sampled_from(["texts", "ids", "messages", "tools", "stream_id", "params", "finish",
                                        "version", "session", "epoch", "replay", "pattern", "stream_ids", "queries"]),
                       _VALUES, max_size=4))
def test_random_messages_get_a_reply_or_a_typed_error(worker, kind, fields):
    reply = worker[2].call(msgspec.msgpack.encode({"type": kind, **fields}))
    if isinstance(reply, ErrorReply):
        assert reply.code in CODES and reply.code != ErrorCode.INTERNAL, reply
    assert worker[0].poll() is None


def test_a_step_reply_lists_updates_in_the_steps_order(worker):
    """Protocol 6: one update per stream named, the streams of `ids` and then those only in `finish`; an
    unknown stream has None (an empty update) at its place and its error by name; `finished` lists the
    places whose update ends its stream."""
    raw = worker[2]
    for name in ("a", "b", "c"):
        assert isinstance(raw.call(encode_message(OpenStream(stream_id=name, params=StreamParams(stop=["!"])))),
                          OpenReply)
    tokenizer = Tokenizer.from_dir(MODEL)
    hello, stopped = tokenizer.encode("Hello"), tokenizer.encode("Hello! world")
    reply = raw.call(encode_message(Step(ids={"a": hello, "zz": [1], "b": stopped}, finish=["c", "a"])))
    assert isinstance(reply, StepReply)
    assert len(reply.updates) == 4
    assert set(reply.errors) == {"zz"} and reply.errors["zz"].code == ErrorCode.UNKNOWN_STREAM
    assert reply.updates[1] is None
    assert reply.updates[2].finish_reason == "stop"                          # b met its stop string
    assert reply.updates[0].finish_reason == reply.updates[3].finish_reason == "length"   # ended by the engine
    assert reply.finished == [0, 2, 3]
    assert_alive(worker)


def test_still_the_same_process_after_all_of_it(worker):
    assert_alive(worker)
