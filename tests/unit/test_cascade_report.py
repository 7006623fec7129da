from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.routing.cascade_eval import CascadeEvalError
from eval.routing.cascade_report import pool_reports


def _report(path: Path, weak: str, n: int, quality: float, cost: float, strong_cost: float) -> Path:
    overall = {
        "n": n, "quality": quality, "cost_usd": cost, "strong_quality": 1.0, "strong_cost_usd": strong_cost,
        "weak_quality": 0.5, "tier_share": {"cheap": 0.5, "strong": 0.5},
        "escalations": {"disagreement": n // 2}, "escalated_rows": n // 2,
    }  # fmt: skip
    path.write_text(json.dumps({"strong": "s", "weak": weak, "overall": overall}))
    return path


def test_pooled_figures_weight_quality_by_rows_and_sum_costs(tmp_path: Path) -> None:
    a = _report(tmp_path / "a.json", "w", n=100, quality=0.9, cost=1.0, strong_cost=4.0)
    b = _report(tmp_path / "b.json", "w", n=300, quality=0.7, cost=3.0, strong_cost=6.0)
    strong, weak, s = pool_reports([a, b])
    assert (strong, weak, s.n) == ("s", "w", 400)
    assert s.quality == pytest.approx(0.75)
    assert s.cost_share == pytest.approx(0.4)
    assert s.gap_recovered == pytest.approx(0.5)
    assert s.escalations == {"disagreement": 200} and s.escalated_rows == 200
    assert s.tier_share["cheap"] == pytest.approx(0.5)


def test_pooling_needs_one_reference_pair(tmp_path: Path) -> None:
    a = _report(tmp_path / "a.json", "w", n=10, quality=0.9, cost=1.0, strong_cost=4.0)
    b = _report(tmp_path / "b.json", "other", n=10, quality=0.9, cost=1.0, strong_cost=4.0)
    with pytest.raises(CascadeEvalError, match="different"):
        pool_reports([a, b])
