"""`llmgw cascade eval --as-configured --cost-budget` on a synthetic file where the cheap pair always
disagrees: unguarded every row escalates; the guard keeps the realized cost share under the budget."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

POLICY = """\
pools:
  - {name: a, model: cheap-a, endpoints: {static: ["http://127.0.0.1:9101"]}}
  - {name: b, model: cheap-b, endpoints: {static: ["http://127.0.0.1:9102"]}}
  - {name: s, model: strong, endpoints: {static: ["http://127.0.0.1:9103"]}}
models:
  - name: auto
    route:
      policy:
        tiers: [{pool: a}, {pool: b}, {pool: s}]
        cascade:
          scorers: [{kind: agreement}]
"""


def _cost_share(tmp: Path, *extra: str) -> float:
    cmd = [sys.executable, "-m", "gateway.cli", "cascade", "eval", "--config", str(tmp / "p.yaml"),
           "--data", str(tmp / "d.jsonl"), "--as-configured", *extra]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    match = re.search(r"^all .* cost\s+([0-9.]+)% of strong-only", proc.stdout, re.M)
    assert match, proc.stdout
    return float(match.group(1)) / 100


def test_cost_budget_caps_the_realized_cost_share(tmp_path: Path) -> None:
    rows = []
    for i in range(400):
        outcomes = {
            "cheap-a": {"score": 1.0, "cost_usd": 0.05, "response": "A"},
            "cheap-b": {"score": 0.0, "cost_usd": 0.05, "response": "B"},
            "strong": {"score": 1.0, "cost_usd": 1.0, "response": "A"},
        }
        rows.append(
            {"id": f"r{i}", "source": "synthetic", "task": "t", "prompt": f"q{i}", "outcomes": outcomes}
        )
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "p.yaml").write_text(POLICY)
    assert _cost_share(tmp_path) > 1.0  # every row pays both cheap calls and the strong one
    assert _cost_share(tmp_path, "--cost-budget", "0.4") <= 0.4


def test_cost_budget_needs_as_configured(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(POLICY)
    cmd = [sys.executable, "-m", "gateway.cli", "cascade", "eval", "--config", str(tmp_path / "p.yaml"),
           "--data", str(tmp_path / "d.jsonl"), "--cost-budget", "0.4"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0 and "--cost-budget" in proc.stderr
