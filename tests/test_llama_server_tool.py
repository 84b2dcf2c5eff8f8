"""tools/llama_server.py: the per-machine build is reused, llama-server listens on 127.0.0.1 only and ends
with its context, a server that cannot start says why, and llama-tokenize's batches split exactly."""

from __future__ import annotations

import time

import pytest

from tests.llama_cpp import binary, serve, smollm2
from tools.llama_server import LlamaServer, build, install_dir, llama_tokenize

pytestmark = pytest.mark.slow  # llama-server


def test_another_host_is_refused():
    with pytest.raises(ValueError, match="127.0.0.1"):
        LlamaServer("model.gguf", "--host", "0.0.0.0")


def test_a_built_machine_does_not_build_again():
    binary("llama-server")
    assert build(log=pytest.fail) == install_dir()          # a build would say so first: the log fails the test


def _listening(port: int) -> list[str]:
    """Local addresses of the listening TCP sockets on `port` (from /proc/net/tcp and tcp6)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:      # 0A: LISTEN
                found.append(address)
    return found


def test_it_listens_on_loopback_only(smollm2_server):
    assert smollm2_server.url.startswith("http://127.0.0.1:")
    assert _listening(smollm2_server.port) == ["0100007F"]      # 127.0.0.1, little-endian hex
    assert smollm2_server.tokenize("Hello") == [19556]


def test_the_context_stops_it():
    with serve(smollm2(), "-c", "512", "-np", "1") as server:
        process = server.process
        assert process.poll() is None
    assert process.poll() is not None


def test_a_server_that_cannot_start_says_why(tmp_path):
    binary("llama-server")
    (tmp_path / "broken.gguf").write_bytes(b"GGUF" + bytes(20))
    with pytest.raises(RuntimeError, match="(?s)did not become ready.*"):
        with LlamaServer(tmp_path / "broken.gguf", ready_timeout=30):
            pass


def test_llama_tokenize_batches_split_exactly(smollm2_server):
    texts = ["Hello world", "", "<|im_start|>user\nHi", "  \n 12 ٣", "日本🦙"]
    batched = llama_tokenize(smollm2(), texts, "<empty_output>", binary=binary("llama-tokenize"))
    assert batched == [smollm2_server.tokenize(text) for text in texts]
    with pytest.raises(ValueError, match="separator"):
        llama_tokenize(smollm2(), ["a<empty_output>b"], "<empty_output>", binary=binary("llama-tokenize"))


def test_serve_stops_llama_server_on_sigterm():
    """`python -m tools.llama_server serve` under SIGTERM (a service manager's stop): llama-server goes too,
    so a rerun finds the port free instead of a server left behind."""
    import signal
    import subprocess
    import sys

    from tools.llama_server import free_port

    smollm2()
    binary("llama-server")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tools.llama_server", "serve", "--port", str(port)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert "llama-server on" in proc.stdout.readline()
        assert _listening(port)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        deadline = time.monotonic() + 10
        while _listening(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _listening(port)
    finally:
        proc.kill()
        proc.wait()
