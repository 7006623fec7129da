from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from eval.routing.baselines import baseline_table, fit_task_prior, format_table
from eval.routing.data import RoutingDataError, Row, load_rows, tier_outcomes
from eval.routing.metrics import routing_curve, single_model_points
from eval.routing.plot import plot_cost_quality, plot_quality_vs_share

# shared/ lies beside the checkout (sessions and CI alike).
SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "routing"


def _line(i: int, task: str, strong: float, weak: float) -> dict[str, Any]:
    outcome = {"cost_usd": None, "response": None}
    return {
        "id": f"{task}-{i}",
        "source": "test",
        "task": task,
        "prompt": f"{task} question {i}",
        "outcomes": {"S": {"score": strong, **outcome}, "W": {"score": weak, **outcome}},
    }


def _write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    # Task "hard": weak loses 3 of 4; task "easy": weak loses 1 of 4.
    train = [_line(i, "hard", 1.0, 0.0 if i < 3 else 1.0) for i in range(4)]
    train += [_line(i, "easy", 1.0, 0.0 if i < 1 else 1.0) for i in range(4)]
    evaluation = [_line(i, "hard", 1.0, 0.0) for i in range(10, 13)]
    evaluation += [_line(i, "easy", 1.0, 1.0) for i in range(10, 13)]
    evaluation += [_line(20, "unseen", 1.0, 0.0), _line(21, "easy", 0.0, 1.0)]
    return _write(tmp_path / "train.jsonl", train), _write(tmp_path / "eval.jsonl", evaluation)


def test_task_prior_rates_and_unseen_tasks(files: tuple[Path, Path]) -> None:
    train = load_rows(files[0])
    prior = fit_task_prior(train, "S", "W")
    assert dict(prior.rates) == {"easy": 0.25, "hard": 0.75}
    assert prior.global_rate == 0.5
    unseen = Row(id="u", source="s", task="new", prompt="p", outcomes={})
    assert prior.difficulty([unseen, train[0]]).tolist() == [0.5, 0.75]


def test_baseline_table_orders_random_prior_oracle(files: tuple[Path, Path]) -> None:
    table = {
        row.report.name: row.report
        for row in baseline_table(load_rows(files[0]), load_rows(files[1]), "S", "W")
    }
    assert table["random"].apgr == pytest.approx(0.5)
    # The prior ranks the "hard" rows (all weak losses) first, the unseen task in the middle:
    # better than random, worse than the oracle.
    assert 0.5 < table["per-task prior"].apgr < table["oracle"].apgr
    assert table["oracle"].cpt50 <= table["per-task prior"].cpt50 < table["random"].cpt50


def test_table_prints_every_router(files: tuple[Path, Path]) -> None:
    # What `llmgw router eval` prints (the baselines' own CLI was retired in issue 23).
    out = format_table(baseline_table(load_rows(files[0]), load_rows(files[1]), "S", "W"))
    for name in ("random", "per-task prior", "oracle", "APGR", "CPT50"):
        assert name in out


def test_table_reports_bad_data(files: tuple[Path, Path]) -> None:
    with pytest.raises(RoutingDataError, match="no outcome for model 'X'"):
        baseline_table(load_rows(files[0]), load_rows(files[1]), "S", "X")


def test_plots_write_png_without_pyplot(files: tuple[Path, Path], tmp_path: Path) -> None:
    rows = load_rows(files[1])
    tiers = tier_outcomes(rows, ["W", "S"])
    curve = routing_curve([0.0] * len(rows), tiers.score[:, 1], tiers.score[:, 0])
    a = plot_quality_vs_share({"random": curve}, tmp_path / "out" / "share.png")
    b = plot_cost_quality(
        {"random": list(zip(curve.shares.tolist(), curve.performance.tolist(), strict=True))},
        tmp_path / "cost.png",
        models={k: v for k, v in single_model_points(tiers).items()},
        cost_label="strong share",
    )
    for path in (a, b):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "matplotlib.pyplot" not in sys.modules
    with pytest.raises(ValueError):
        plot_quality_vs_share({}, tmp_path / "none.png")


@pytest.mark.skipif(
    not (SHARED / "mmlu_dev.jsonl").exists(), reason="shared routing data not on this machine"
)
def test_reproduces_the_reported_mmlu_prior() -> None:
    # Issue 4 reports the per-subject prior at APGR ~0.67 on mmlu_dev; doc 006 records 0.6775.
    table = baseline_table(
        load_rows(SHARED / "mmlu_train.jsonl"),
        load_rows(SHARED / "mmlu_dev.jsonl"),
        "gpt-4-1106-preview",
        "mixtral-8x7b-instruct-v0.1",
    )
    prior = next(r.report for r in table if r.report.name == "per-task prior")
    assert prior.apgr == pytest.approx(0.6775, abs=0.001)


def test_no_module_imports_pyplot() -> None:
    """pyplot selects a process-wide backend and keeps a global figure registry: every plot in the project
    draws on a bare Figure instead (the assertion above holds only while no other module imports it)."""
    import ast

    root = Path(__file__).resolve().parents[3]
    offenders = []
    for top in ("eval", "gateway", "router", "pools", "ratelimit", "cache", "scripts"):
        for path in (root / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [f"{node.module}.{a.name}" for a in node.names]
                    if isinstance(node, ast.ImportFrom) and node.module
                    else []
                )
                if any(n.startswith("matplotlib.pyplot") for n in names):
                    offenders.append(str(path.relative_to(root)))
    assert offenders == []
