"""The README's test command and CI agree: `.ci/run` runs the README's command (the default run, which leaves
out the tests marked `long`) and then the long ones, so CI runs every test."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
CI = (REPO / ".ci" / "run").read_text()


def readme_test_command() -> str:
    """The pytest command that ends the second line of the README's first bash block."""
    first_block = re.search(r"^```bash\n(.*?)^```", README, flags=re.S | re.M).group(1)
    return first_block.splitlines()[1].rsplit("&& ", 1)[1].strip()


def test_ci_runs_the_readme_command_and_then_the_long_tests():
    command = readme_test_command()
    assert command == 'python -m pytest -q -m "not long"', command
    lines = [line.strip() for line in CI.splitlines() if line.strip().startswith("python -m pytest")]
    assert [line.split(" ||")[0] for line in lines] == [command, "python -m pytest -q -m long"], lines

