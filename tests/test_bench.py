"""`python -m bench --quick` runs end to end, so the harness never rots: every section reports rows,
the markdown table and the JSON lines agree, and the exactness columns the sections report hold."""

import json
import subprocess
import sys

import pytest

from bench.__main__ import SECTIONS
from realdata import REPO

pytestmark = [pytest.mark.slow, pytest.mark.long]  # the whole bench, quick: 3 minutes


def test_quick_bench_writes_every_section(tmp_path):
    subprocess.run([sys.executable, "-m", "bench", "--quick", "--out", str(tmp_path)], cwd=REPO, check=True,
                   timeout=600, stdout=subprocess.DEVNULL)
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert lines[0]["machine"]["quick"] is True
    rows = lines[1:]
    assert {row["section"] for row in rows} == set(SECTIONS)
    markdown = (tmp_path / "results.md").read_text()
    for section in SECTIONS:
        assert f"### {section}" in markdown
    for row in rows:
        for key in ("identical_ids", "identical_text", "same_allowed_sets_as_outlines_core"):
            assert row.get(key, True) is True, row
    ratios = [value for row in rows for key, value in row.items() if "ratio" in key]
    assert ratios and all(isinstance(value, (int, float)) and value > 0 for value in ratios)
