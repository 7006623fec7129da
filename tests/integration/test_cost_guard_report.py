"""Issue 45's cold-start acceptance on a small slice of the shared RouterBench files: `llmgw cascade
guard-report` for the `auto` alias of config/cascade-routerbench.yaml, first 40 rows in file order and
shuffled, each file's prior fitted on the other two files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data" / "routing"
FILES = [SHARED / f"routerbench_{t}_train.jsonl" for t in ("arc_challenge", "mbpp", "winograde")]


def test_every_short_run_stays_within_budget_plus_tolerance_and_prints_quality() -> None:
    if not all(f.exists() for f in FILES):
        pytest.skip(f"{SHARED} not available")
    cmd = [sys.executable, "-m", "gateway.cli", "cascade", "guard-report",
           "--config", str(ROOT / "config" / "cascade-routerbench.yaml"), "--alias", "auto",
           "--cost-budget", "0.4", "--rows", "40", "--seeds", "1", "--data", *map(str, FILES)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [
        [c.strip() for c in line.split("|")[1:-1]] for line in proc.stdout.splitlines() if ".jsonl |" in line
    ]
    assert len(rows) == 3 * 2  # files x (file order, seed 1)
    for row in rows:
        running, quality = float(row[5].rstrip("%")), float(row[6].rstrip("%"))
        assert running <= 42.0 and row[9] == "yes", row
        assert quality > 0.0, row
