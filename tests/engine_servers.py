"""Processes for the engine adapters' tests: an engine server (vLLM's own, or a stand-in) and `tokworker api`
in front of it, each on a free loopback port, each waited for over HTTP and stopped at the end; plus the
script of ids a stand-in engine generates."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time

import requests

from tokworker import Tokenizer

ANSWER = "Hello there, 日本語 🧑‍🚀 naïve café. Answer: 42. END and then"


def script_ids(tokenizer: Tokenizer, words: int = 300) -> list[int]:
    """What the stand-in engines generate: ANSWER, `words` more words, then <|im_end|> (Qwen3's eos)."""
    text = ANSWER + "".join(f" word{i}" for i in range(words))
    return tokenizer.encode(text) + [tokenizer.token_to_id("<|im_end|>")]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def process(command: list[str], ready_url: str, timeout: float, log_path):
    """Run `command` until the block ends; wait until `ready_url` answers 200 (RuntimeError with the
    process's log when it dies or takes longer than `timeout`)."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = open(log_path, "rb").read()[-3000:].decode("utf-8", "replace")
                raise RuntimeError(f"{command[:3]} did not come up (exit {proc.poll()}):\n{tail}")
            try:
                if requests.get(ready_url, timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.5)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def front_door(model_dir, engine: str, engine_url: str, log_path, *extra: str):
    """`tokworker api --engine ENGINE --engine-url URL` on a free port; yields its base URL."""
    port = free_port()
    command = [sys.executable, "-m", "tokworker.cli", "api", "--model-dir", str(model_dir), "--engine", engine,
               "--engine-url", engine_url, "--port", str(port), "--workers", "1", "--served-model-name", "m",
               "--tool-call-parser", "hermes", *extra]
    with process(command, f"http://127.0.0.1:{port}/health", 120, log_path):
        yield f"http://127.0.0.1:{port}"
