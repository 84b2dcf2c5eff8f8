"""The import graph: every arrow points down, no modules import each other in a circle, and the only global
import name an install claims is `tokworker` (frontend/ and protocol/ install as tokworker.frontend and
tokworker.protocol).

Layers, bottom to top: the wire contract; the text engine's stages; what renders, streams or constrains
with them; the worker process; the API process's client; the engines; the HTTP front door; the entry points
(CLI, demo, lazy exports).
Imports inside functions count: a lazy import upwards is still an upward arrow.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FOLDERS = {"tokworker": REPO / "tokworker", "tokworker.frontend": REPO / "frontend",
           "tokworker.protocol": REPO / "protocol"}

LAYERS = [
    ("tokworker.protocol",),
    ("tokworker.tokenizer", "tokworker.parsers"),
    ("tokworker.stream", "tokworker.templates", "tokworker.constrain", "tokworker.wire"),
    ("tokworker.worker",),
    ("tokworker.frontend",),
    ("tokworker.engines",),              # beside the front door: the pool never imports an engine
    ("tokworker.api",),                  # the HTTP front door
    ("tokworker",),                      # tokworker/__init__.py, cli.py, demo.py
]


def _modules() -> dict[str, Path]:
    found = {}
    for package, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if package == "tokworker" and parts[0] in ("frontend", "protocol"):
                continue
            name = ".".join((package, *parts))
            found[name.removesuffix(".__init__")] = path
    return found


def _layer(module: str) -> int:
    best = None
    for rank, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (rank, len(prefix))
    return best[0]


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from package import module` imports the module; `from module import name`, the module
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
    return targets


GRAPH = {name: _imports(name, path, set(_modules())) for name, path in _modules().items()}


def test_every_arrow_points_down():
    upward = sorted(f"{source} -> {target}" for source, targets in GRAPH.items() for target in targets
                    if _layer(target) > _layer(source))
    assert upward == []


def test_no_module_cycles():
    # a module may import its own package's __init__ only in the sense of being inside it; any cycle of
    # real imports between modules is a design knot
    state: dict[str, int] = {}
    cycles = []

    def visit(node, trail):
        state[node] = 1
        for target in GRAPH.get(node, ()):
            if node.startswith(target + "."):
                continue                    # a submodule reading its own package's names
            if state.get(target) == 1:
                cycles.append(trail[trail.index(target):] + [target])
            elif target not in state:
                visit(target, trail + [target])
        state[node] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_every_package_folder_is_installed():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    folders = {name for name, path in _modules().items() if path.name == "__init__.py"}
    assert listed == folders
    assert config["package-dir"] == {"tokworker.frontend": "frontend", "tokworker.protocol": "protocol"}


def test_installed_names_are_only_tokworker(tmp_path):
    # run from a directory that holds no project folder: what resolves must come from the install
    import subprocess
    code = ("import importlib.util as u, tokworker.frontend, tokworker.protocol.messages;"
            "print(u.find_spec('frontend') is None, u.find_spec('protocol') is None)")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["True", "True"]


@pytest.mark.parametrize("module", ["tokworker.tokenizer", "tokworker.stream.state", "tokworker.protocol.messages"])
def test_engine_imports_no_jinja_or_zmq(module):
    import subprocess
    code = f"import sys, {module}; print(sorted(m for m in ('jinja2', 'zmq') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
