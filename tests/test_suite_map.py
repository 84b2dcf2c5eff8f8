"""Every source module is named in a test file, so `grep -l tokworker.x.y tests/` finds its tests: the file
imports it (`from tokworker.x.y import ...`, `from tokworker.x import y`), or its docstring says it covers it
through a public seam ("Covers tokworker.x.y."). A tool format's module counts when a test names one of its
parsers (the shape files, test_tool_json_calls.py and its siblings, list theirs); `__main__` when a test runs
its package with `-m`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tokworker.parsers.tools import _PARSERS

REPO = Path(__file__).resolve().parent.parent
FOLDERS = {"tokworker": REPO / "tokworker", "tokworker.frontend": REPO / "frontend",
           "tokworker.protocol": REPO / "protocol"}
TESTS = {path.name: path.read_text() for path in (REPO / "tests").glob("*.py")}


def source_modules() -> dict[str, Path]:
    """Dotted name -> file, for every module and every package whose __init__ holds more than imports."""
    found = {}
    for prefix, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                body = ast.parse(path.read_text()).body
                if all(isinstance(node, (ast.Import, ast.ImportFrom, ast.Expr)) for node in body):
                    continue
                parts = parts[:-1]
            found[".".join((prefix, *parts))] = path
    return found


def named(module: str, text: str) -> bool:
    package, _, leaf = module.rpartition(".")
    if re.search(re.escape(module) + r"\b", text):
        return True
    if leaf == "__main__":
        return f'"{package}"' in text
    if package == "tokworker.parsers.tools.formats":
        return any(re.search(rf"\b{re.escape(name)}\b", text) for name, (mod, _) in _PARSERS.items() if mod == leaf)
    for imported in re.findall(rf"^\s*from {re.escape(package)} import \(?([^)]*?)\)?$", text, flags=re.M | re.S):
        if re.search(rf"\b{re.escape(leaf)}\b", imported):
            return True
    return False


def test_every_source_module_is_named_in_a_test_file():
    modules = source_modules()
    assert len(modules) > 150 and "tokworker.frontend.steps" in modules
    unnamed = sorted(module for module in modules if not any(named(module, text) for text in TESTS.values()))
    assert not unnamed, ("no test file names these modules; import them in their tests, or say in the docstring "
                         f"of the test file that covers them 'Covers {unnamed[0]}.': {unnamed}")
