"""`llmgw router eval`: one difficulty artifact on one routing file, beside the reference routers.

Routers reported (eval/routing/baselines.py, metrics.py): the model, random (constant difficulty,
APGR 0.5 by tie-averaging), the per-subject prior fitted on the artifact's own training files (or
`--prior-train`), and the oracle. The prior uses the task label, which the model never sees: the
model must beat it to show that it learned prompts rather than subjects (issue 4).

Also reported: how the artifact's calibrated thresholds land on this file (target strong share ->
realized share, quality), because a prompt mix unlike the training mix shifts the score distribution.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eval.routing.baselines import (
    BaselineRow,
    fit_task_prior,
    format_table,
    oracle_difficulty,
    random_difficulty,
)
from eval.routing.data import FloatArray, PairOutcomes, Row, load_rows, pair_outcomes, rows_with_models
from eval.routing.metrics import RouterReport, RoutingCurve, apgr_decile_thresholds, report, routing_curve
from eval.routing.train import row_texts
from router.difficulty import DifficultyModel

MODEL_NAME = "router"


@dataclass(frozen=True, slots=True)
class Evaluation:
    rows: int
    dropped: int
    strong: str
    weak: str
    table: list[BaselineRow]
    curves: dict[str, RoutingCurve]
    calibration: dict[float, dict[str, float]]
    prior_note: str | None


def score_rows(model: DifficultyModel, rows: Sequence[Row], batch: int = 64) -> FloatArray:
    texts = row_texts(rows)
    out = np.empty(len(texts), dtype=np.float64)
    for start in range(0, len(texts), batch):
        out[start : start + batch] = model.score_many(texts[start : start + batch])
    return out


def _prior_rows(model: DifficultyModel, explicit: Sequence[str | Path]) -> tuple[tuple[Row, ...], str | None]:
    if explicit:
        return load_rows(list(explicit)), None
    files = model.artifact.manifest.get("training", {}).get("files", [])
    paths = [Path(f["path"]) for f in files if isinstance(f, dict) and "path" in f]
    if not paths or not all(p.is_file() for p in paths):
        return (), "per-task prior skipped: the artifact's training files are not here (pass --prior-train)"
    return load_rows(paths), None


def evaluate(
    model: DifficultyModel,
    data: str | Path,
    strong: str,
    weak: str,
    prior_train: Sequence[str | Path] = (),
) -> Evaluation:
    rows, dropped = rows_with_models(load_rows(data), (strong, weak))
    if not rows:
        raise ValueError(f"{data}: no row has outcomes for both {strong!r} and {weak!r}")
    pair = pair_outcomes(rows, strong, weak)
    difficulty = score_rows(model, rows)
    routers: dict[str, FloatArray] = {MODEL_NAME: difficulty, "random": random_difficulty(len(rows))}
    prior_source, note = _prior_rows(model, prior_train)
    if prior_source:
        prior_source, _ = rows_with_models(prior_source, (strong, weak))
    if prior_source:
        routers["per-task prior"] = fit_task_prior(prior_source, strong, weak).difficulty(rows)
    elif note is None:
        note = "per-task prior skipped: its training files lack this strong/weak pair"
    routers["oracle"] = oracle_difficulty(pair)
    curves: dict[str, RoutingCurve] = {}
    table: list[BaselineRow] = []
    for name, d in routers.items():
        curve = routing_curve(d, pair.strong_score, pair.weak_score, pair.strong_cost, pair.weak_cost)
        curves[name] = curve
        table.append(
            BaselineRow(
                report=report(name, curve),
                apgr_deciles=apgr_decile_thresholds(d, pair.strong_score, pair.weak_score),
            )
        )
    return Evaluation(
        rows=len(rows),
        dropped=dropped,
        strong=strong,
        weak=weak,
        table=table,
        curves=curves,
        calibration=_calibration(model, difficulty, pair),
        prior_note=note,
    )


def _calibration(
    model: DifficultyModel, difficulty: FloatArray, pair: PairOutcomes
) -> dict[float, dict[str, float]]:
    out = {}
    for share, threshold in model.thresholds.items():
        strong = difficulty >= threshold
        quality = float(np.where(strong, pair.strong_score, pair.weak_score).mean())
        out[share] = {"threshold": threshold, "realized_share": float(strong.mean()), "quality": quality}
    return out


def _num(x: float) -> float | None:
    return None if math.isnan(x) else round(x, 6)


def _report_json(r: RouterReport, deciles: float) -> dict[str, Any]:
    return {
        "apgr": _num(r.apgr),
        "apgr_deciles": _num(deciles),
        "cpt50": _num(r.cpt50),
        "cpt80": _num(r.cpt80),
        "at_shares": {
            f"{x:g}": {"quality": _num(q), "pgr": _num(p), "cost_usd": _num(c)}
            for x, (q, p, c) in r.at_shares.items()
        },
        "note": r.note,
    }


def to_json(ev: Evaluation, model: DifficultyModel, data: str | Path) -> dict[str, Any]:
    first = ev.table[0].report
    return {
        "model": model.identity,
        "data": str(data),
        "strong": ev.strong,
        "weak": ev.weak,
        "rows": ev.rows,
        "dropped_rows": ev.dropped,
        "perf_strong": _num(first.perf_strong),
        "perf_weak": _num(first.perf_weak),
        "routers": {row.report.name: _report_json(row.report, row.apgr_deciles) for row in ev.table},
        "calibration": {f"{x:g}": v for x, v in ev.calibration.items()},
        "training_cv": model.artifact.manifest.get("training", {}).get("cv"),
        "notes": [n for n in (ev.prior_note,) if n],
    }


def format_text(ev: Evaluation, model: DifficultyModel) -> str:
    lines = [f"model={model.identity}", f"strong={ev.strong}  weak={ev.weak}  dropped rows={ev.dropped}"]
    lines.append(format_table(ev.table))
    if ev.prior_note:
        lines.append(f"NOTE: {ev.prior_note}")
    lines.append("calibrated thresholds on this file (target strong share -> realized share, quality):")
    lines.append(
        "  "
        + "  ".join(
            f"{100 * x:.0f}%->{100 * v['realized_share']:.1f}% q={v['quality']:.4f}"
            for x, v in ev.calibration.items()
        )
    )
    cv = model.artifact.manifest.get("training", {}).get("cv") or {}
    for kind, label in (("id", "id-CV (in distribution)"), ("task", "task-held-out CV (unseen subjects)")):
        if cv.get(kind) and cv[kind].get("apgr_mean") is not None:
            lines.append(f"training {label}: APGR {cv[kind]['apgr_mean']:.4f} +- {cv[kind]['apgr_std']:.4f}")
    caveat = model.artifact.manifest.get("training", {}).get("cv_caveat")
    if caveat:
        lines.append(f"NOTE: {caveat}")
    return "\n".join(lines)


def write_outputs(ev: Evaluation, model: DifficultyModel, data: str | Path, out: Path) -> list[Path]:
    from eval.routing.plot import plot_cost_quality, plot_quality_vs_share

    out.mkdir(parents=True, exist_ok=True)
    written = [out / "router_eval.json"]
    written[0].write_text(json.dumps(to_json(ev, model, data), indent=2) + "\n")
    written.append(plot_quality_vs_share(ev.curves, out / "quality_vs_share.png", title=f"{Path(data).name}"))
    priced = all(c.cost is not None for c in ev.curves.values())
    if priced:
        cost_curves = {
            n: list(zip(c.cost.tolist(), c.performance.tolist(), strict=True))
            for n, c in ev.curves.items()
            if c.cost is not None
        }
        label = "total cost (USD)"
    else:
        cost_curves = {
            n: list(zip((100 * c.shares).tolist(), c.performance.tolist(), strict=True))
            for n, c in ev.curves.items()
        }
        label = "cost = strong-model calls (%) (this data has no prices)"
    written.append(
        plot_cost_quality(
            cost_curves,
            out / "cost_quality.png",
            title=f"{Path(data).name}: cost vs quality",
            cost_label=label,
        )
    )
    return written
