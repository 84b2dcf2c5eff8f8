"""tcp:// only with CurveZMQ: a daemon on loopback serves a client holding an authorized key, and refuses a
client with no key, a client with an unauthorized key, and a bare socket sending plaintext."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import uvloop
import zmq

from tokworker.frontend import PoolError, TokenizerPool
from tokworker.protocol.messages import PROTOCOL_VERSION, Hello, encode_message, frame
from tokworker.tokenizer import Tokenizer
from tokworker.protocol.endpoints import ClientKeys, InsecureEndpoint
from tokworker.worker.security import check_bind, generate_keys

pytestmark = pytest.mark.slow  # daemons

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "tokworker" / "data" / "default"


def free_ports(count: int) -> int:
    """A base port with `count` consecutive free ports on 127.0.0.1."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count >= 65535:
            continue
        try:
            holders = []
            for port in range(base, base + count):
                holder = socket.socket()
                holders.append(holder)
                holder.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for holder in holders:
                holder.close()
    raise RuntimeError("no free ports")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    keys = generate_keys(tmp_path_factory.mktemp("keys") / "curve", ["api"])
    port = free_ports(2)
    proc = subprocess.Popen([sys.executable, "-m", "tokworker.cli", "serve", "--model-dir", str(MODEL),
                             "--workers", "2", "--bind", f"tcp://127.0.0.1:{port}", "--curve-keys", str(keys),
                             "--log-level", "WARNING"], env={**os.environ, "PYTHONPATH": str(REPO)})
    yield f"tcp://127.0.0.1:{port}", keys
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0


def test_key_files_are_private(daemon):
    _, keys = daemon
    assert (keys.stat().st_mode & 0o777) == 0o700
    for secret in keys.glob("*.key_secret"):
        assert (secret.stat().st_mode & 0o777) == 0o600
    assert sorted(p.name for p in (keys / "authorized_clients").iterdir()) == ["api.key"]


def test_an_authorized_client_gets_the_whole_pool(daemon):
    endpoint, keys = daemon

    async def main():
        async with await TokenizerPool.connect(endpoint, curve_keys=ClientKeys.from_dir(keys, "api"),
                                               connect_timeout=30) as pool:
            assert [link.endpoint for link in pool.links] == [endpoint, endpoint[:-5] + str(int(endpoint[-5:]) + 1)]
            assert await pool.encode(["over CURVE", "ü"]) == Tokenizer.from_dir(MODEL).encode_batch(["over CURVE", "ü"])
            await pool.open_stream("s")
            ids = (await pool.encode("encrypted text")) + pool.info.eos_token_ids
            update = (await pool.step({"s": ids}))["s"]
            assert update.deltas[0].content == "encrypted text" and update.finish_reason == "stop"

    uvloop.run(main())


@pytest.mark.parametrize("who", ["no key", "unauthorized key"])
def test_clients_without_an_authorized_key_are_refused(daemon, tmp_path, who):
    endpoint, keys = daemon
    if who == "no key":
        client_keys = None
    else:
        stranger = generate_keys(tmp_path / "other", ["api"])
        own = ClientKeys.from_dir(stranger, "api")
        client_keys = ClientKeys(ClientKeys.from_dir(keys, "api").server_public, own.public, own.secret)

    async def main():
        codes = []
        for _ in range(8):            # the refusal reaches a client in more than one way: each must read as one
            with pytest.raises(PoolError) as refused:
                await TokenizerPool.connect(endpoint, curve_keys=client_keys, connect_timeout=2)
            codes.append(refused.value.code)
        return codes

    assert uvloop.run(main()) == ["auth_failed"] * 8         # the security handshake failed: known at once


def test_a_plaintext_socket_gets_nothing(daemon):
    endpoint, _ = daemon
    context = zmq.Context()
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    sock.send(frame(1, encode_message(Hello(version=PROTOCOL_VERSION))))
    assert sock.poll(1500) == 0
    sock.close()
    context.term()


def test_tcp_without_keys_is_refused():
    for endpoint in ("tcp://0.0.0.0:7000", "tcp://[::]:7000", "tcp://127.0.0.1:7000", "tcp://*:7000"):
        with pytest.raises(InsecureEndpoint):
            check_bind(endpoint, None)
