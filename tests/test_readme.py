"""Every ```python block of README.md runs as pasted, on the bundled tokenizer: top-level `await` runs in
an event loop, the `TokenizerPool.connect` example reaches a real `tokworker serve` started on its default
endpoint, and each `# -> text` comment on a line is output the block really printed."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import uvloop

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
BLOCKS = re.findall(r"^```python\n(.*?)^```", README, flags=re.S | re.M)


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
    yield root
    daemon.terminate()
    assert daemon.wait(30) == 0


@pytest.mark.parametrize("number", range(len(BLOCKS)))
def test_readme_block_runs(number, runtime_dir, monkeypatch, capsys):
    source = BLOCKS[number]
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime_dir))
    code = compile(source, f"README.md python block {number + 1}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    namespace = {"__name__": "__readme__"}
    result = eval(code, namespace)
    if result is not None:                                    # the block awaits: a coroutine to run
        uvloop.run(result)
    printed = capsys.readouterr().out.splitlines()
    for expected in re.findall(r"# -> (.*)$", source, flags=re.M):
        assert expected.strip() in printed, (expected, printed)
