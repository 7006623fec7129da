"""The cost guard from a cold start (issue 45, part 4): an alias replayed as configured through a
CostGuard on short runs of each routing file, in file order and shuffled.

    llmgw cascade guard-report --config config/cascade-routerbench.yaml --alias auto --cost-budget 0.4 \
        --data shared/data/routing/routerbench_{arc_challenge,mbpp,winograde}_train.jsonl \
        --rows 100 300 --seeds 1 2 3

Each file is one run per (first N rows) x (file order, or shuffled with a seed, then the first N). The
guard's cold-start prior is fitted on the *other* files only (leave one file out): a prior never sees
the rows it is judged on, and each file stands for traffic of a task the calibration did not contain.
The shipped answer scorer was trained on all three RouterBench files, so its own scores are in-sample
here (as for every `--as-configured` figure); the prior and the guard are not.

Per run: realized cost as a share of strong-only cost, the largest running share after any request
(the any-length bound), and the quality share (quality / strong-only quality on the same rows).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from eval.routing.cascade_eval import (
    CascadeEvalError,
    RowDecision,
    as_configured,
    configured_cascade,
    fit_cost_prior,
)
from eval.routing.data import Row, load_rows, rows_with_models
from router.config import RoutingPolicy
from router.cost_guard import TOLERANCE, CostGuard, CostPrior

__all__ = ["GuardRun", "guard_report", "guard_runs", "max_running_share", "ordered", "report_table"]


@dataclass(frozen=True, slots=True)
class GuardRun:
    file: str
    rows: int  # the N asked for (the run has min(N, file rows))
    order: str  # "file" or "seed S"
    n: int
    cost_share: float
    max_running_share: float
    quality: float
    strong_quality: float
    escalated: int
    prior_offset: float

    @property
    def quality_share(self) -> float:
        return self.quality / self.strong_quality if self.strong_quality else float("nan")


def ordered(rows: Sequence[Row], seed: int | None) -> list[Row]:
    """The rows in file order (seed None) or shuffled by `seed` (the same permutation every run)."""
    out = list(rows)
    if seed is not None:
        random.Random(seed).shuffle(out)
    return out


def max_running_share(costs: Sequence[float], strongs: Sequence[float]) -> float:
    """The largest realized share of strong-only cost after any request of the run (0 before a priced one)."""
    spent = strong = worst = 0.0
    for c, s in zip(costs, strongs, strict=True):
        spent, strong = spent + c, strong + s
        if strong > 0:
            worst = max(worst, spent / strong)
    return worst


def guard_runs(
    name: str,
    rows: Sequence[Row],
    routing: RoutingPolicy,
    pool_models: Mapping[str, str],
    budget: float,
    prior: CostPrior | None,
    sizes: Sequence[int],
    seeds: Sequence[int],
) -> list[GuardRun]:
    """One file's runs: every size x (file order, each seed), each through a fresh guard from `prior`."""
    strong = pool_models[routing.tiers[-1].pool]
    cascade = configured_cascade(routing)
    initial = CostGuard(budget, prior=prior).initial_offset
    runs: list[GuardRun] = []
    for size in sizes:
        for seed in (None, *seeds):
            part = ordered(rows, seed)[:size]
            decisions: list[RowDecision] = as_configured(
                part, routing, pool_models, None, budget, prior, cascade
            ).decisions
            strongs = [r.outcomes[strong].cost_usd or 0.0 for r in part]
            costs = [d.cost_usd for d in decisions]
            runs.append(
                GuardRun(
                    file=name,
                    rows=size,
                    order="file" if seed is None else f"seed {seed}",
                    n=len(part),
                    cost_share=sum(costs) / sum(strongs) if sum(strongs) else float("nan"),
                    max_running_share=max_running_share(costs, strongs),
                    quality=sum(d.quality for d in decisions) / len(part),
                    strong_quality=sum(r.outcomes[strong].score for r in part) / len(part),
                    escalated=sum(d.escalated for d in decisions),
                    prior_offset=initial,
                )
            )
    return runs


def guard_report(
    files: Sequence[str],
    routing: RoutingPolicy,
    pool_models: Mapping[str, str],
    budget: float,
    sizes: Sequence[int] = (100, 300),
    seeds: Sequence[int] = (1, 2, 3),
    use_prior: bool = True,
) -> list[GuardRun]:
    """Every file's runs, each file's prior fitted on the other files (none with one file or `use_prior`
    False: the guard then starts from offset 0, the previous behaviour, with the ledger)."""
    tier_models = [pool_models[t.pool] for t in routing.tiers]
    by_file: dict[str, tuple[Row, ...]] = {}
    for f in files:
        rows, _ = rows_with_models(load_rows(f), tier_models)
        if not rows:
            raise CascadeEvalError(f"{f}: no row has outcomes for every tier model")
        by_file[f] = rows
    runs: list[GuardRun] = []
    for f, rows in by_file.items():
        others = [g for g in by_file if g != f]
        prior = None
        if use_prior and others:
            calibration = [r for g in others for r in by_file[g]]
            ids = {r.id for r in rows}
            if any(r.id in ids for r in calibration):
                raise CascadeEvalError(f"{f}: rows also in another file; a prior must not see its test rows")
            prior = fit_cost_prior(calibration, routing, pool_models, data=[Path(g).name for g in others])
        runs += guard_runs(Path(f).name, rows, routing, pool_models, budget, prior, sizes, seeds)
    return runs


def report_table(runs: Sequence[GuardRun], budget: float) -> str:
    """The runs as a Markdown table, with whether each stayed within budget + TOLERANCE."""
    bound = budget + TOLERANCE
    lines = [
        f"budget {budget:.0%} of strong-only, tolerance {TOLERANCE * 100:.0f} points: bound {bound:.0%}",
        "| file | first N | order | rows | cost % | max running cost % | quality % of strong | "
        "escalated | prior offset | within bound |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r.file} | {r.rows} | {r.order} | {r.n} | {r.cost_share:.1%} | {r.max_running_share:.1%} | "
            f"{r.quality_share:.1%} | {r.escalated} | {r.prior_offset:.2f} | "
            f"{'yes' if r.max_running_share <= bound + 1e-12 else 'NO'} |"
        )
    return "\n".join(lines)
