"""Files written by `llmgw cascade eval --out DIR`: report.json and a cost-quality plot; and pooling
several such reports (`llmgw cascade pool`), e.g. one alias per task answering its own file.

The plot (eval/routing/plot.py) puts the cross-validated cascade, pooled and per task, among the
single-model points of every model the evaluation used, with cost as % of strong-only so that files
with different price levels share one axis.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from eval.routing.cascade_eval import CascadeEvalError, CvResult, Summary
from eval.routing.data import Row, tier_outcomes
from eval.routing.metrics import CostQuality, single_model_points
from eval.routing.plot import plot_cost_quality


def _summary_json(s: Summary) -> dict[str, object]:
    return {
        **asdict(s),
        "tier_share": dict(s.tier_share),
        "escalations": dict(s.escalations),
        "cost_share": s.cost_share,
        "gap_recovered": s.gap_recovered,
    }


def write_report(
    out: Path,
    rows: Sequence[Row],
    pool_models: Mapping[str, str],
    strong: str,
    weak: str,
    overall: Summary,
    by_task: Mapping[str, Summary],
    result: CvResult,
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "strong": strong,
        "weak": weak,
        "overall": _summary_json(overall),
        "by_task": {t: _summary_json(s) for t, s in by_task.items()},
        "folds": [asdict(f) for f in result.fits],
    }
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")

    models = sorted(set(pool_models.values()))
    outcomes = tier_outcomes(rows, models)
    points = single_model_points(outcomes)
    strong_cost = points[strong].cost_usd
    relative = {
        m: CostQuality(quality=p.quality, cost_usd=100 * p.cost_usd / strong_cost, tier_share=p.tier_share)
        for m, p in points.items()
    }
    curves = {"cascade (cross-validated)": [(100 * overall.cost_share, overall.quality)]}
    if len(by_task) > 1:
        for task, s in by_task.items():
            curves[f"cascade on {task}"] = [(100 * s.cost_share, s.quality)]
    plot_cost_quality(
        curves,
        out / "cost_quality.png",
        models=relative,
        title="Cascade vs single models (pooled rows)",
        cost_label="cost (% of strong-only)",
    )


def pool_reports(paths: Sequence[Path]) -> tuple[str, str, Summary]:
    """(strong, weak, pooled summary) of several report.json files over disjoint rows: sums of costs,
    row-weighted qualities. The gap recovered needs one reference pair, so strong and weak must match."""
    parts: list[dict[str, Any]] = []  # JSON objects as written by write_report
    refs: set[tuple[str, str]] = set()
    for path in paths:
        report = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(report, dict) or not isinstance(report.get("overall"), dict):
            raise CascadeEvalError(f"{path}: not a report.json of llmgw cascade eval")
        refs.add((str(report["strong"]), str(report["weak"])))
        parts.append(report["overall"])
    if len(refs) != 1:
        raise CascadeEvalError(f"reports use different (strong, weak) references: {sorted(refs)}")
    (strong, weak) = refs.pop()
    n = sum(int(p["n"]) for p in parts)

    def weighted(key: str) -> float:
        return sum(float(p[key]) * int(p["n"]) for p in parts) / n

    shares: dict[str, float] = {}
    escalations: dict[str, int] = {}
    for p in parts:
        for pool, share in dict(p["tier_share"]).items():
            shares[pool] = shares.get(pool, 0.0) + float(share) * int(p["n"]) / n
        for reason, count in dict(p["escalations"]).items():
            escalations[reason] = escalations.get(reason, 0) + int(count)
    summary = Summary(
        n=n,
        quality=weighted("quality"),
        cost_usd=sum(float(p["cost_usd"]) for p in parts),
        strong_quality=weighted("strong_quality"),
        strong_cost_usd=sum(float(p["strong_cost_usd"]) for p in parts),
        weak_quality=weighted("weak_quality"),
        tier_share=shares,
        escalations=dict(sorted(escalations.items())),
        escalated_rows=sum(int(p["escalated_rows"]) for p in parts),
    )
    return strong, weak, summary
