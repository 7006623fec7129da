"""Reference routers every learned router is reported against (`llmgw router eval` prints them).

- random: a constant difficulty. With tie-averaging (metrics.py) that is exactly the expectation over
  uniformly random routings, so its APGR is 0.5 by construction (tests/unit/routing/test_routing_metrics.py
  checks it against seeded random draws).
- oracle: difficulty = strong score - weak score, so rows where the weak model loses go first and rows
  where it wins go last; the best any prompt-only router could do on this data.
- per-task prior: difficulty = training-set rate of `weak < strong` within the row's task (unseen
  tasks: the global rate). It knows subjects, not prompts, and is the bar issue 4 sets for the router.

The table CLI (`python -m eval.routing.baselines`) was retired in issue 23 (last version at commit
a0a19f0): `llmgw router eval` prints the same rows beside an artifact.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from eval.routing.data import FloatArray, PairOutcomes, Row, pair_outcomes
from eval.routing.metrics import RouterReport, apgr_decile_thresholds, report, routing_curve

DEFAULT_STRONG = "gpt-4-1106-preview"
DEFAULT_WEAK = "mixtral-8x7b-instruct-v0.1"


def random_difficulty(n: int) -> FloatArray:
    return np.zeros(n, dtype=np.float64)


def oracle_difficulty(pair: PairOutcomes) -> FloatArray:
    return pair.strong_score - pair.weak_score


@dataclass(frozen=True, slots=True)
class TaskPrior:
    """Per-task rate of `weak < strong` fitted on training rows."""

    strong: str
    weak: str
    rates: Mapping[str, float]
    global_rate: float

    def difficulty(self, rows: Sequence[Row]) -> FloatArray:
        return np.fromiter(
            (self.rates.get(r.task, self.global_rate) for r in rows), dtype=np.float64, count=len(rows)
        )


def fit_task_prior(rows: Sequence[Row], strong: str, weak: str) -> TaskPrior:
    if not rows:
        raise ValueError("cannot fit a task prior on zero rows")
    label = pair_outcomes(rows, strong, weak).needs_strong
    totals: dict[str, list[int]] = {}
    for row, needs in zip(rows, label, strict=True):
        hit_count = totals.setdefault(row.task, [0, 0])
        hit_count[0] += int(needs)
        hit_count[1] += 1
    rates = {task: hits / count for task, (hits, count) in sorted(totals.items())}
    return TaskPrior(strong=strong, weak=weak, rates=rates, global_rate=float(label.mean()))


@dataclass(frozen=True, slots=True)
class BaselineRow:
    report: RouterReport
    apgr_deciles: float  # RouteLLM's 10-threshold discretization, for comparison with published figures


def baseline_table(
    train: Sequence[Row], evaluation: Sequence[Row], strong: str, weak: str
) -> list[BaselineRow]:
    pair = pair_outcomes(evaluation, strong, weak)
    prior = fit_task_prior(train, strong, weak)
    routers = {
        "random": random_difficulty(len(evaluation)),
        "per-task prior": prior.difficulty(evaluation),
        "oracle": oracle_difficulty(pair),
    }
    out = []
    for name, d in routers.items():
        curve = routing_curve(d, pair.strong_score, pair.weak_score, pair.strong_cost, pair.weak_cost)
        out.append(
            BaselineRow(
                report=report(name, curve),
                apgr_deciles=apgr_decile_thresholds(d, pair.strong_score, pair.weak_score),
            )
        )
    return out


def _pct(x: float) -> str:
    return "   n/a" if math.isnan(x) else f"{100 * x:5.1f}%"


def format_table(rows: Sequence[BaselineRow]) -> str:
    first = rows[0].report
    lines = [f"rows={first.n}  strong-only quality={first.perf_strong:.4f}  weak-only={first.perf_weak:.4f}"]
    if first.note:
        lines.append(f"NOTE: {first.note}")
    shares = list(first.at_shares)
    head = f"{'router':<16} {'APGR':>6} {'APGR@10':>8} {'CPT50':>7} {'CPT80':>7}  " + " ".join(
        f"q@{round(100 * x):>2}%" for x in shares
    )
    lines += [head, "-" * len(head)]
    for row in rows:
        r = row.report
        quality = " ".join(f"{r.at_shares[x][0]:6.4f}" for x in shares)
        cpts = f"{_pct(r.cpt50):>7} {_pct(r.cpt80):>7}"
        lines.append(f"{r.name:<16} {r.apgr:6.4f} {row.apgr_deciles:8.4f} {cpts}  {quality}")
    lines.append(
        "APGR: exact tie-averaged area (design doc 006); APGR@10: RouteLLM evaluate.py's decile thresholds."
    )
    return "\n".join(lines)
