"""Every ```python block of README.md runs as pasted, on the bundled tokenizer: top-level `await` runs in
an event loop, the `TokenizerPool.connect` example reaches a real `tokworker serve` started on its default
endpoint, the HTTP examples reach a real `tokworker api` (on a free port where the README says 8000), and
each `# -> text` comment on a line is output the block really printed. The `curl` commands of the ```bash
blocks run too, against the same server.
Covers tokworker.api.run and tokworker.templates.chat_tokenizer."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import uvloop

from tests.daemons import wait_held
from tools.llama_server import free_port, wait_healthy

pytestmark = pytest.mark.slow  # daemons and the front door

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
BLOCKS = re.findall(r"^```python\n(.*?)^```", README, flags=re.S | re.M)
CURLS = [command.replace("\\\n", " ") for block in re.findall(r"^```bash\n(.*?)^```", README, flags=re.S | re.M)
         for command in re.findall(r"^curl .*?(?<!\\)$", block, flags=re.S | re.M)]


def test_the_readme_has_its_examples():
    assert len(BLOCKS) >= 3
    assert any("TokenizerPool.connect(" in block for block in BLOCKS)
    assert any("TokenizerPool.spawn(" in block for block in BLOCKS)


@pytest.fixture(scope="module")
def runtime_dir(tmp_path_factory):
    """A private XDG_RUNTIME_DIR with `tokworker serve` on its default endpoint, as a user would run it."""
    root = tmp_path_factory.mktemp("xdg")
    os.chmod(root, 0o700)
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_RUNTIME_DIR": str(root)}
    daemon = subprocess.Popen([sys.executable, "-m", "tokworker.cli", "serve", "--model-dir",
                               str(REPO / "tokworker" / "data" / "default"), "--workers", "2",
                               "--log-level", "WARNING"], env=env)
    wait_held(daemon, f"ipc://{root}/tokworker/worker")
    yield root
    daemon.terminate()
    assert daemon.wait(30) == 0


@pytest.fixture(scope="module")
def api_port():
    """`tokworker api` as the README starts it, on a free port."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tokworker.cli", "api", "--served-model-name", "my-model",
                               "--port", str(port), "--log-level", "WARNING"], env={**os.environ, "PYTHONPATH": str(REPO)})
    wait_healthy(f"http://127.0.0.1:{port}/health", server)
    yield port
    server.terminate()
    assert server.wait(30) == 0


def test_the_readme_shows_curl_and_the_openai_sdk_against_tokworker_api():
    assert any("tokworker api" in block for block in re.findall(r"^```bash\n(.*?)^```", README, flags=re.S | re.M))
    assert CURLS and any("from openai import OpenAI" in block for block in BLOCKS)


@pytest.mark.parametrize("number", range(len(CURLS)))
def test_readme_curl_runs(number, api_port):
    command = CURLS[number].replace(":8000", f":{api_port}")
    reply = json.loads(subprocess.run(command, shell=True, check=True, capture_output=True, text=True).stdout)
    assert reply["object"] == "chat.completion" and reply["choices"][0]["message"]["content"]


@pytest.fixture(scope="module")
def llama_api_port(smollm2_server):
    """The "Real engines" section as it runs: llama-server on SmolLM2 (conftest's), `tokworker api` on its
    GGUF in front (skipped, saying why, without the build or the model)."""
    from tests.llama_cpp import smollm2

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tokworker.cli", "api", "--model-dir", str(smollm2()),
                               "--engine", "llama.cpp", "--engine-url", smollm2_server.url, "--tool-call-parser", "hermes",
                               "--served-model-name", "smollm2", "--port", str(port), "--log-level", "WARNING"],
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    wait_healthy(f"http://127.0.0.1:{port}/health", server)
    yield port
    server.terminate()
    assert server.wait(30) == 0


@pytest.mark.parametrize("number", range(len(BLOCKS)))
def test_readme_block_runs(number, runtime_dir, api_port, request, monkeypatch, capsys):
    source = BLOCKS[number].replace(":8000", f":{api_port}")
    if ":8001" in source:
        source = source.replace(":8001", f":{request.getfixturevalue('llama_api_port')}")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime_dir))
    code = compile(source, f"README.md python block {number + 1}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    namespace = {"__name__": "__readme__"}
    result = eval(code, namespace)
    if result is not None:                                    # the block awaits: a coroutine to run
        uvloop.run(result)
    printed = capsys.readouterr().out.splitlines()
    for expected in re.findall(r"# -> (.*)$", source, flags=re.M):
        assert expected.strip() in printed, (expected, printed)
