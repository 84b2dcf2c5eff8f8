"""vLLM's own render tier (`vllm launch render`, vLLM 0.33) on this machine's CPU, for the test beside it
(tests/test_beside_vllm_render.py) and the bench (bench/render_tier.py); and vLLM's pydantic models,
run by vLLM's python, as a judge of tokworker's bodies.

What it takes to start it (see bench/README.md for the venv):
- a model folder: the render server reads a tokenizer and a model config, no weights; `model_folder` links
  a tokenizer folder's files beside a small config.json of that family (Qwen3's);
- `VLLM_TARGET_DEVICE=cpu` (a vLLM wheel built for CUDA cannot infer the device without a GPU);
- the packages its server imports beyond the classes bench/beside_vllm.py runs (uvicorn, llguidance,
  watchfiles, orjson, einops, prometheus_fastapi_instrumentator, model_hosting_container_standards): in
  the venv, or in a folder named by TOKWORKER_VLLM_PATH (`pip install --no-deps --target DIR ...`);
- `--trust-request-chat-template`, so each request names its template, as tokworker's requests do.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import urllib.request
from pathlib import Path

from tools.llama_server import free_port, stop, wait_healthy

QWEN3_CONFIG = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64,
                "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                "num_hidden_layers": 1, "vocab_size": 151936, "max_position_embeddings": 40960,
                "rms_norm_eps": 1e-6, "rope_theta": 1000000, "torch_dtype": "bfloat16",
                "tie_word_embeddings": True, "bos_token_id": 151643, "eos_token_id": 151645}
PYTHON = os.environ.get("TOKWORKER_VLLM_PYTHON", "/work/venv/vllm/bin/python")
# vLLM's pydantic models by name, for `judge`
MODELS = """
import json, sys
from pydantic import TypeAdapter
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionResponse
from vllm.entrypoints.openai.completion.protocol import CompletionResponse
from vllm.entrypoints.scale_out.token_in_token_out.protocol import (
    GenerateRequest, DerenderChatStreamResponse, DerenderCompletionStreamResponse)
models = {"GenerateRequest": GenerateRequest, "list[GenerateRequest]": list[GenerateRequest],
          "ChatCompletionResponse": ChatCompletionResponse, "CompletionResponse": CompletionResponse,
          "DerenderChatStreamResponse": DerenderChatStreamResponse,
          "DerenderCompletionStreamResponse": DerenderCompletionStreamResponse}
verdicts = []
for name, body in json.load(sys.stdin):
    try:
        TypeAdapter(models[name]).validate_python(body)
        verdicts.append(None)
    except Exception as error:
        verdicts.append(f"{type(error).__name__}: {error}")
print(json.dumps(verdicts))
"""


def environment() -> dict:
    env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", VLLM_LOGGING_LEVEL="WARNING")
    extra = os.environ.get("TOKWORKER_VLLM_PATH")
    if extra:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (extra, env.get("PYTHONPATH")) if p)
    return env


def unavailable(python: str = PYTHON) -> str | None:
    """Why vLLM's render server cannot run here, or None."""
    if not Path(python).exists():
        return f"no vLLM python at {python} (TOKWORKER_VLLM_PYTHON; bench/README.md says how to make one)"
    probe = subprocess.run([python, "-c", "import uvicorn, vllm.entrypoints.launchers.render.entry"],
                           env=environment(), capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return f"{python} cannot import vLLM's render server ({last}); see bench/vllm_render.py's docstring"
    return None


def model_folder(tokenizer_dir: Path, config: dict = QWEN3_CONFIG) -> Path:
    """A folder vLLM takes as a model: the tokenizer's files linked, and a config.json (no weights)."""
    folder = Path(tempfile.mkdtemp(prefix="tokworker-vllm-model-"))
    for path in Path(tokenizer_dir).iterdir():
        (folder / path.name).symlink_to(path.resolve())
    (folder / "config.json").write_text(json.dumps(config))
    return folder


class RenderServer:
    """`vllm launch render` in a subprocess on a free loopback port; `url`, `post(path, body)`, `stop()`."""

    def __init__(self, tokenizer_dir: Path, *parser_flags: str, python: str = PYTHON, timeout: float = 240):
        self.folder = model_folder(tokenizer_dir)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [python, "-m", "vllm.entrypoints.cli.main", "launch", "render", str(self.folder), "--host", "127.0.0.1",
             "--port", str(self.port), "--served-model-name", "vllm-render", "--trust-request-chat-template",
             *parser_flags], env=environment(), stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_healthy(self.url + "/health", self.process, timeout)
        except RuntimeError:
            self.stop()
            self.log.seek(0)
            raise RuntimeError("vLLM's render server did not start:\n"
                               + self.log.read().decode(errors="replace")[-3000:]) from None

    def post(self, path: str, body) -> tuple[int, object]:
        return post(self.url + path, body)

    def stop(self) -> None:
        stop(self.process, 20)


def post(url: str, body) -> tuple[int, object]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def judge(bodies: list[tuple[str, object]], python: str = PYTHON) -> list[str | None]:
    """Each (vLLM model name, body) validated by vLLM's own pydantic model: None, or why it is refused."""
    done = subprocess.run([python, "-c", MODELS], input=json.dumps(bodies), env=environment(),
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"vLLM's models could not run: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
