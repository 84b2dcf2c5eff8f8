"""The bench stands alone: no bench module imports the tests, pytest or hypothesis, and `python -m bench`
runs with those made unimportable; `--vllm-python` with a python that has no vLLM reports why."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the bench, in fresh processes

REPO = Path(__file__).resolve().parent.parent
TEST_ONLY = ("tests", "pytest", "hypothesis", "realdata", "tokenizer_refs")

# Run as `python -c`: a finder that refuses the test-only modules, then the bench's own entry point.
BLOCKED = f"""
import importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {TEST_ONLY!r}:
            raise ImportError("test-only module " + name + " imported by the bench")
sys.meta_path.insert(0, Refuse())
sys.argv = ["bench", *sys.argv[1:]]
from bench.__main__ import main
main()
"""


def test_no_bench_module_imports_test_code():
    for path in sorted((REPO / "bench").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert name.split(".")[0] not in TEST_ONLY, f"{path.name} imports {name}"


def test_the_bench_runs_without_the_test_extras(tmp_path):
    subprocess.run([sys.executable, "-c", BLOCKED, "--quick", "--only", "stream", "--only", "beside_vllm",
                    "--out", str(tmp_path), "--vllm-python", sys.executable],
                   cwd=REPO, check=True, timeout=600, stdout=subprocess.DEVNULL)
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()[1:]]
    assert {row["section"] for row in rows} == {"stream", "beside_vllm"}
    assert any("ratio" in row for row in rows if row["section"] == "stream")
    vllm = [row for row in rows if row["section"] == "beside_vllm"]
    try:
        import vllm  # noqa: F401
    except ImportError:                                      # this python has no vLLM: the row says so
        assert vllm[0]["case"] in ("failed", "skipped") and vllm[0]["reason"]
