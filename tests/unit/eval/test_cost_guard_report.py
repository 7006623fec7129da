"""`llmgw cascade guard-report` and `cascade eval --rows/--shuffle-seed/--prior-data` on small synthetic
files: three tasks whose cheap pair agrees at different rates, so each file's prior (fitted on the other
two) is off for it, and unguarded the hard file costs more than strong-only."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from eval.routing.cost_guard_report import max_running_share, ordered
from eval.routing.data import load_rows

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


def _write(path: Path, task: str, agree_every: int, n: int = 60) -> Path:
    rows = []
    for i in range(n):
        agree = i % agree_every == 0
        strong = 0.5 + (i * 7 % 11) / 10  # strong-only cost varies by request
        cheap = 0.04 * strong
        outcomes = {
            "cheap-a": {"score": float(agree), "cost_usd": cheap, "response": "A"},
            "cheap-b": {"score": float(agree), "cost_usd": cheap, "response": "A" if agree else "B"},
            "strong": {"score": 1.0, "cost_usd": strong, "response": "A"},
        }
        row = {"id": f"{task}{i}", "source": "synthetic", "task": task, "prompt": f"{task} q{i}"}
        rows.append({**row, "outcomes": outcomes})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, list[Path]]:
    (tmp_path / "p.yaml").write_text(POLICY)
    data = [_write(tmp_path / "easy.jsonl", "easy", 1), _write(tmp_path / "mid.jsonl", "mid", 2),
            _write(tmp_path / "hard.jsonl", "hard", 10)]  # fmt: skip
    return tmp_path / "p.yaml", data


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "gateway.cli", "cascade", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)


def _eval_cost(config: Path, *args: str) -> float:
    proc = _cli("eval", "--config", str(config), "--as-configured", *args)
    assert proc.returncode == 0, proc.stderr
    match = re.search(r"^all .* cost\s+([0-9.]+)% of strong-only", proc.stdout, re.M)
    assert match, proc.stdout
    return float(match.group(1)) / 100


def test_the_report_prints_every_run_within_budget_plus_tolerance(files: tuple[Path, list[Path]]) -> None:
    config, data = files
    proc = _cli("guard-report", "--config", str(config), "--data", *map(str, data),
                "--cost-budget", "0.4", "--rows", "20", "50", "--seeds", "1", "2")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = [
        line.split("|")[1:-1]
        for line in proc.stdout.splitlines()
        if line.startswith("| ") and ".jsonl" in line
    ]
    assert len(table) == 3 * 2 * 3  # files x sizes x (file order + 2 seeds)
    for file, size, order, _n, cost, running, quality, _esc, _offset, within in (
        [c.strip() for c in row] for row in table
    ):
        assert float(running.rstrip("%")) <= 42.0 and within == "yes", (file, size, order)
        assert float(cost.rstrip("%")) <= float(running.rstrip("%"))
        assert 0.0 <= float(quality.rstrip("%")) <= 100.0
    # The hard file's runs (prior from easy + mid) match `cascade eval` with the same prior and slice.
    hard = {(r[1].strip(), r[2].strip()): float(r[4].strip().rstrip("%")) for r in table if "hard" in r[0]}
    assert len(hard) == 2 * 3
    for (size, order), share in hard.items():
        seed = [] if order == "file" else ["--shuffle-seed", order.split()[1]]
        got = _eval_cost(config, "--data", str(data[2]), "--cost-budget", "0.4", "--rows", size, *seed,
                         "--prior-data", str(data[0]), str(data[1]))  # fmt: skip
        assert got * 100 == pytest.approx(share, abs=0.06)


def test_unguarded_the_hard_file_overspends_and_a_prior_may_not_see_the_rows(
    files: tuple[Path, list[Path]],
) -> None:
    config, data = files
    assert _eval_cost(config, "--data", str(data[2]), "--rows", "20") > 1.0
    proc = _cli("eval", "--config", str(config), "--as-configured", "--data", str(data[2]),
                "--cost-budget", "0.4", "--prior-data", str(data[2]))  # fmt: skip
    assert proc.returncode != 0 and "must not see" in proc.stderr


def test_orders_and_running_share(tmp_path: Path) -> None:
    rows = load_rows(_write(tmp_path / "x.jsonl", "x", 3, n=30))
    assert ordered(rows, None) == list(rows)
    shuffled = ordered(rows, 1)
    assert (
        shuffled == ordered(rows, 1)
        and shuffled != list(rows)
        and sorted(r.id for r in shuffled) == sorted(r.id for r in rows)
    )
    assert max_running_share([0.0, 3.0, 0.1], [0.0, 2.0, 8.0]) == pytest.approx(1.5)
    assert max_running_share([1.0], [0.0]) == 0.0  # no priced request: no share
