"""Sessions under attack, through real worker processes: a session belongs to the peer that named it (its
CURVE key over tcp, its process over ipc), so another key, another process or a Hello naming a raw
connection's routing id cannot take a tenant's streams at any epoch; one session cannot hold every stream;
the streams of an API process that is killed are dropped at once, and those of one that went silent (a
relay that stops passing bytes, as a dead host or a cut network does) after its heartbeat timeout; opens
and steps that would hold the lane for seconds are refused at once; clients that stop reading cost the
worker nothing while parked, and what they send past their bound is dropped and counted.
Covers tokworker.worker.sessions, tokworker.worker.connections and tokworker.worker.lane."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import zmq

from tests.test_curve import free_ports
from tests.test_worker_fuzz import Raw
from tests.work import RESPONSIVE_S, cpu_s
from tokworker.protocol.deltas import StreamParams
from tokworker.protocol.endpoints import ClientKeys
from tokworker.protocol.messages import (PROTOCOL_VERSION, Decode, ErrorCode, ErrorReply, Hello, HelloReply, OpenReply,
                                         OpenStream, Stats, StatsReply, Step, StepReply, encode_message)
from tokworker.tokenizer import Tokenizer
from tokworker.worker.options import WorkerOptions, options_to_json
from tokworker.worker.security import generate_keys

pytestmark = [pytest.mark.slow, pytest.mark.long]  # sessions under attack, on worker processes

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "tokworker" / "data" / "default"
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
TEXT = "a tenant's stream stays the tenant's"


def spawn(bind: str, **settings) -> subprocess.Popen:
    options = WorkerOptions(model_dir=str(MODEL), bind=bind, log_level="WARNING", **settings)
    proc = subprocess.Popen([sys.executable, "-m", "tokworker.worker", options_to_json(options)], env=ENV)
    return proc


class Client(Raw):
    """A Raw client that may show a CURVE key pair and a routing id of its own."""

    def __init__(self, context, endpoint: str, keys=None, routing_id: bytes | None = None):
        self.sock = context.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVTIMEO, 30_000)              # the worker may still be loading
        if routing_id is not None:
            self.sock.setsockopt(zmq.ROUTING_ID, routing_id)
        if keys is not None:
            keys.apply(self.sock)
        self.sock.connect(endpoint)


def hello(raw: Raw, session: str, epoch: int = 0):
    return raw.call(encode_message(Hello(version=PROTOCOL_VERSION, session=session, epoch=epoch)))


def step_text(raw: Raw, stream: str, ids: list[int]):
    reply = raw.call(encode_message(Step(ids={stream: ids})))
    assert isinstance(reply, StepReply), reply
    update = reply.updates[0]
    return reply, "".join(d.content or "" for d in update.deltas) if update is not None else ""


@pytest.fixture
def ipc_worker():
    run_dir = tempfile.mkdtemp(prefix="tokworker-sessions-")
    bind = f"ipc://{run_dir}/worker"
    proc = spawn(bind, max_streams=6, max_session_streams=4)
    context = zmq.Context()
    yield bind, context, proc
    proc.kill()
    proc.wait(10)
    context.destroy(linger=0)


def test_another_curve_key_cannot_take_a_session_by_its_name(tmp_path):
    keys = generate_keys(tmp_path / "curve", ["tenant", "intruder"])
    bind = f"tcp://127.0.0.1:{free_ports(1)}"
    proc = spawn(bind, curve_keys=str(keys))
    context = zmq.Context()
    try:
        ids = Tokenizer.from_dir(MODEL).encode(TEXT)
        tenant = Client(context, bind, ClientKeys.from_dir(keys, "tenant"))
        assert isinstance(hello(tenant, "tenant-0", epoch=1), HelloReply)
        assert isinstance(tenant.call(encode_message(OpenStream(stream_id="s", params=StreamParams()))), OpenReply)
        _, first = step_text(tenant, "s", ids[:3])
        intruder = Client(context, bind, ClientKeys.from_dir(keys, "intruder"))
        assert isinstance(hello(intruder, "tenant-0", epoch=10**9), HelloReply)   # a session of its own
        reply, _ = step_text(intruder, "s", ids[3:4])
        assert reply.errors["s"].code == ErrorCode.UNKNOWN_STREAM
        _, rest = step_text(tenant, "s", ids[3:])                 # not STALE: the session never moved
        assert first + rest == TEXT
    finally:
        proc.kill()
        proc.wait(10)
        context.destroy(linger=0)


def test_another_process_or_a_hello_naming_a_raw_connection_takes_nothing(ipc_worker):
    bind, context, _ = ipc_worker
    ids = Tokenizer.from_dir(MODEL).encode(TEXT)
    tenant = Client(context, bind)
    assert isinstance(hello(tenant, "api-0", epoch=1), HelloReply)
    assert isinstance(tenant.call(encode_message(OpenStream(stream_id="s", params=StreamParams()))), OpenReply)
    raw_client = Client(context, bind, routing_id=b"raw-client")            # never says Hello
    assert isinstance(raw_client.call(encode_message(OpenStream(stream_id="r", params=StreamParams()))), OpenReply)
    # another process names the tenant's session at a higher epoch, and the raw client's routing id
    script = f"""
import zmq
from tests.test_worker_fuzz import Raw
from tokworker.protocol.messages import PROTOCOL_VERSION, Hello, Step, encode_message
raw = Raw(zmq.Context(), {bind!r})
for session, stream in (("api-0", "s"), ({b"raw-client".hex()!r}, "r")):
    raw.call(encode_message(Hello(version=PROTOCOL_VERSION, session=session, epoch=10**9)))
    print(raw.call(encode_message(Step(ids={{stream: [5]}}))).errors[stream].code)
"""
    out = subprocess.run([sys.executable, "-c", script], env=ENV, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == [ErrorCode.UNKNOWN_STREAM] * 2, out.stderr
    # the same process's own Hello naming the raw connection's id gets a session of its own, too
    assert isinstance(hello(Client(context, bind), b"raw-client".hex(), epoch=10**9), HelloReply)
    _, text = step_text(tenant, "s", ids)
    assert text == TEXT
    reply, _ = step_text(raw_client, "r", ids)
    assert not reply.errors


def test_one_session_cannot_hold_every_stream(ipc_worker):
    bind, context, _ = ipc_worker
    greedy, other = Client(context, bind), Client(context, bind)
    assert isinstance(hello(greedy, "greedy"), HelloReply) and isinstance(hello(other, "other"), HelloReply)
    opened = [greedy.call(encode_message(OpenStream(stream_id=f"g{i}", params=StreamParams()))) for i in range(5)]
    assert all(isinstance(reply, OpenReply) for reply in opened[:4])
    assert isinstance(opened[4], ErrorReply) and opened[4].code == ErrorCode.OVERLOADED
    assert "session holds its limit of 4 streams" in opened[4].message
    for i in range(2):                                            # the worker's other two places
        assert isinstance(other.call(encode_message(OpenStream(stream_id=f"o{i}", params=StreamParams()))), OpenReply)


@pytest.fixture
def tcp_worker(tmp_path):
    keys = generate_keys(tmp_path / "curve", ["api"])
    bind = f"tcp://127.0.0.1:{free_ports(1)}"
    proc = spawn(bind, curve_keys=str(keys), max_streams=6, max_session_streams=4)
    context = zmq.Context()
    yield bind, context, proc, keys
    proc.kill()
    proc.wait(10)
    context.destroy(linger=0)


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_a_killed_api_process_leaves_no_streams_behind(transport, request):
    """Its connection drops, and the streams of the session it held go with it (over tcp no process id
    says so; the socket monitor does, for both)."""
    if transport == "ipc":
        bind, context, _ = request.getfixturevalue("ipc_worker")
        keys = None
    else:
        bind, context, _, key_dir = request.getfixturevalue("tcp_worker")
        keys = str(key_dir)
    script = f"""
import sys, zmq
from tests.test_worker_sessions import Client
from tokworker.protocol.deltas import StreamParams
from tokworker.protocol.endpoints import ClientKeys
from tokworker.protocol.messages import PROTOCOL_VERSION, Hello, OpenStream, encode_message
keys = ClientKeys.from_dir({keys!r}, "api") if {keys!r} else None
raw = Client(zmq.Context(), {bind!r}, keys)
raw.call(encode_message(Hello(version=PROTOCOL_VERSION, session="doomed")))
for i in range(4):
    raw.call(encode_message(OpenStream(stream_id=f"d{{i}}", params=StreamParams())))
print("open", flush=True)
sys.stdin.read()
"""
    api = subprocess.Popen([sys.executable, "-c", script], env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True)
    assert api.stdout.readline().strip() == "open"
    watcher = Client(context, bind, ClientKeys.from_dir(keys, "api") if keys else None)
    assert watcher.call(encode_message(Stats())).streams_open == 4
    api.send_signal(signal.SIGKILL)
    api.wait(10)
    killed = time.monotonic()
    while watcher.call(encode_message(Stats())).streams_open and time.monotonic() - killed < 10:
        time.sleep(0.02)
    assert watcher.call(encode_message(Stats())).streams_open == 0
    assert time.monotonic() - killed < 3                          # not the 3,600 s idle timeout


class Blackhole:
    """A tcp relay that can go silent without closing anything, as a peer's host does when it dies or its
    network is cut: no FIN, no RST, no byte."""

    def __init__(self, upstream_port: int):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.upstream_port = upstream_port
        self.silent = threading.Event()
        self.kept: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        client, _ = self.listener.accept()
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        self.kept += [client, upstream]
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source, sink):
        while not self.silent.is_set():
            data = source.recv(65536)
            if not data or self.silent.is_set():
                return
            sink.sendall(data)


def test_the_streams_of_a_peer_that_went_silent_go_after_its_timeout(tmp_path):
    keys = generate_keys(tmp_path / "curve", ["api"])
    port = free_ports(1)
    bind = f"tcp://127.0.0.1:{port}"
    proc = spawn(bind, curve_keys=str(keys), peer_timeout_s=2.0)
    context = zmq.Context()
    try:
        watcher = Client(context, bind, ClientKeys.from_dir(keys, "api"))
        assert watcher.call(encode_message(Stats())).streams_open == 0          # the worker is up
        relay = Blackhole(port)
        api = Client(context, f"tcp://127.0.0.1:{relay.port}", ClientKeys.from_dir(keys, "api"))
        assert isinstance(hello(api, "far-away"), HelloReply)
        for i in range(4):
            assert isinstance(api.call(encode_message(OpenStream(stream_id=f"f{i}", params=StreamParams()))),
                              OpenReply)
        assert watcher.call(encode_message(Stats())).streams_open == 4
        time.sleep(4.0)                                           # quiet but answering heartbeats: kept
        assert watcher.call(encode_message(Stats())).streams_open == 4
        relay.silent.set()
        silenced = time.monotonic()
        while watcher.call(encode_message(Stats())).streams_open and time.monotonic() - silenced < 30:
            time.sleep(0.05)
        gone_after = time.monotonic() - silenced
        print(f"a silent peer's streams went after {gone_after:.2f} s")
        assert watcher.call(encode_message(Stats())).streams_open == 0
        assert gone_after < 10                                    # its 2 s timeout, not the 3,600 s idle one
    finally:
        proc.kill()
        proc.wait(10)
        context.destroy(linger=0)


def test_opens_and_steps_that_would_hold_the_lane_are_refused_at_once(ipc_worker):
    """Refused before any work on the ids: the worker's CPU seconds for both (counted, which a loaded
    machine hardly stretches) stay at what reading 10 MB of messages costs, far from the seconds of
    holding the lane."""
    bind, context, proc = ipc_worker
    raw = Client(context, bind)
    assert isinstance(hello(raw, "big"), HelloReply)
    started, cpu_before = time.monotonic(), cpu_s(proc.pid)
    prompt = [5] * 8_000_000
    reply = raw.call(encode_message(OpenStream(stream_id="p", params=StreamParams(reasoning_parser="qwen3"),
                                               prompt_ids=prompt)))
    assert isinstance(reply, ErrorReply) and reply.code == ErrorCode.TOO_LARGE, reply
    assert "ids" in reply.message
    assert isinstance(raw.call(encode_message(OpenStream(stream_id="s", params=StreamParams()))), OpenReply)
    chunk = [5] * 40_000
    reply = raw.call(encode_message(Step(ids={"s": chunk, **{f"x{i}": chunk for i in range(63)}})))
    assert isinstance(reply, ErrorReply) and reply.code == ErrorCode.TOO_LARGE, reply
    used = cpu_s(proc.pid) - cpu_before
    assert used < 1.0 and time.monotonic() - started < RESPONSIVE_S, used    # both, with 10 MB of messages
    reply, _ = step_text(raw, "s", [5, 6])                        # the stream goes on
    assert not reply.errors


def test_parked_clients_cost_nothing_while_parked(ipc_worker):
    bind, context, proc = ipc_worker
    raw = Client(context, bind)
    assert isinstance(raw.call(encode_message(Stats())), StatsReply)
    body = encode_message(Decode(ids=[[5] * 200_000]))
    parked = []
    for i in range(20):                                           # each stops reading with replies queued
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, 1)
        sock.setsockopt(zmq.RCVBUF, 4096)
        sock.connect(bind)
        # 12 replies of 200 KB fill ZeroMQ's queue of 8 and the socket's buffers only just: the first client,
        # the one flooded next, sends enough to be surely parked (else its flood is served and held, not
        # parked, and nothing is dropped)
        for request in range(30 if i == 0 else 12):
            sock.send(request.to_bytes(8, "little") + body)
        parked.append(sock)
    deadline = time.monotonic() + 30
    while raw.call(encode_message(Stats())).queue_depth and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    before = cpu_s(proc.pid)
    time.sleep(3.0)
    used = cpu_s(proc.pid) - before
    assert used < 0.15, used                                      # a 5 ms retry loop used 12-14% of a core
    stats = raw.call(encode_message(Stats()))
    assert isinstance(stats, StatsReply) and proc.poll() is None  # others are served
    assert stats.dropped == 0
    for request in range(100):                                    # 20 MB more than one parked client may hold
        parked[0].send(request.to_bytes(8, "little") + body)
    deadline = time.monotonic() + 30
    while not raw.call(encode_message(Stats())).dropped and time.monotonic() < deadline:
        time.sleep(0.1)
    stats = raw.call(encode_message(Stats()))
    assert 0 < stats.dropped < 100                                # what passed PARKED_BYTES, not all of it
    for sock in parked:
        sock.close()
