"""Offline replay of a routed alias (policy + cascade) over a routing dataset's recorded responses.

Every row runs the same code the gateway runs: `router.policy.plan_route` makes the plan and the
`router.cascade.Cascade` state machine judges the tiers' answers, except that a tier's "call" returns
the model's recorded response and its recorded `cost_usd`. A row's quality is the score of the answer
accepted; its cost is the sum over every call made (a cascade pays for each attempt).

Cross-validation (`cross_validate`): rows are split into k folds by id hash (eval/routing/data.py).
For each fold, everything trainable is fitted on the other folds only — the answer scorer's weights,
the trained scorer's acceptance threshold (the best quality within a cost budget, as a share of the
strong tier's cost), the cheap tiers (which pools, when `select_tiers`), and a difficulty target
share's cut point — then the fold is replayed with that fit. Every row is evaluated exactly once by a
policy that never saw it. Without trainable parts the policy is replayed as configured.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from eval.routing.data import Row, kfold_indices
from eval.routing.scorer_train import FeatureCache, train_scorer, train_step_scorer
from router.cascade import Accept, Cascade, Escalate, Fail
from router.config import AgreementScorer, LogprobScorer, RoutingPolicy, Tier, TrainedScorer
from router.cost_guard import CostGuard, CostPrior
from router.plan import Answer, EscalationReason, Plan
from router.policy import plan_route
from router.scorers import Scorer, TrainedAnswerScorer

# Step 0.025, and 0.005 above 0.9: a trained scorer's probabilities crowd near 1 when the cheap answers
# are mostly right (ARC), and a coarse grid there leaves several points of the cost budget unused.
THRESHOLD_GRID: tuple[float, ...] = tuple(round(0.025 * i, 3) for i in range(36)) + tuple(
    round(0.9 + 0.005 * i, 3) for i in range(20)
)


class CascadeEvalError(ValueError):
    """A policy that cannot be replayed on this data (the message says why)."""


@dataclass(frozen=True, slots=True)
class RowDecision:
    id: str
    task: str
    tier: int  # tier index that answered (-1: no answer)
    pool: str
    escalated: bool
    score: float | None
    reasons: tuple[str, ...]
    called: tuple[int, ...]  # tier indices called, in order, with repeats for samples
    quality: float
    cost_usd: float
    fold: int = -1


@dataclass(frozen=True, slots=True)
class FoldFit:
    fold: int
    pools: tuple[str, ...]
    threshold: float | None
    train_quality: float
    train_cost_share: float


@dataclass(frozen=True, slots=True)
class Summary:
    n: int
    quality: float
    cost_usd: float
    strong_quality: float
    strong_cost_usd: float
    weak_quality: float
    tier_share: Mapping[str, float]
    escalations: Mapping[str, int]
    escalated_rows: int

    @property
    def cost_share(self) -> float:
        return self.cost_usd / self.strong_cost_usd if self.strong_cost_usd else math.nan

    @property
    def gap_recovered(self) -> float:
        gap = self.strong_quality - self.weak_quality
        return math.nan if abs(gap) < 1e-12 else (self.quality - self.weak_quality) / gap


@dataclass
class _Memo:
    """Caches a deterministic scorer's results within one evaluation (the decisions do not change)."""

    inner: Scorer
    # Keyed by tiers too: a step scorer scores the same text differently from another tier.
    cache: dict[tuple[str, int, str, tuple[tuple[int, str], ...]], float] = field(default_factory=dict)

    @property
    def reject_reason(self) -> EscalationReason:
        return self.inner.reject_reason

    def score(self, prompt: str, answer: Answer, others: Sequence[Answer]) -> float:
        key = (prompt, answer.call.tier, answer.text, tuple((o.call.tier, o.text) for o in others))
        if key not in self.cache:
            self.cache[key] = self.inner.score(prompt, answer, others)
        return self.cache[key]


def check_replayable(routing: RoutingPolicy, models: Sequence[str], rows: Sequence[Row]) -> None:
    if routing.cascade is None:
        return
    for s in routing.cascade.scorers:
        if isinstance(s, LogprobScorer):
            raise CascadeEvalError("routing data has no token logprobs: a logprob scorer cannot be replayed")
        if isinstance(s, AgreementScorer) and s.mode == "samples":
            raise CascadeEvalError(
                "routing data has one response per model: agreement mode 'samples' cannot be replayed"
            )
    for m in models:
        if not any(r.outcomes[m].response is not None for r in rows if m in r.outcomes):
            raise CascadeEvalError(f"model {m!r} has no recorded responses: a cascade cannot judge it")


def memoized(cascade: Cascade) -> Cascade:
    return Cascade(scorers=tuple((_Memo(s), t) for s, t in cascade.scorers))


def replay_row(
    row: Row,
    routing: RoutingPolicy,
    models: Sequence[str],
    cascade: Cascade,
    difficulty: float | None = None,
    thresholds: Sequence[float] | None = None,
    guard: CostGuard | None = None,
    offset: float = 0.0,
) -> RowDecision:
    """Run plan + cascade on one row with the tiers' recorded responses as answers (a `guard` steers;
    without one, `offset` lowers every threshold, as a guard's would)."""
    plan: Plan = plan_route(routing, difficulty, thresholds=thresholds)
    state, step = cascade.start(plan)
    if guard is not None:
        # Read once per cascade, as the gateway does. The row's recorded costs stand for the request's
        # worst case (the gateway's is its reservation at each tier's price, never below them).
        every_call = sum(row.outcomes[models[c.tier]].cost_usd or 0.0 for s in plan.steps for c in s.calls)
        offset = guard.threshold_offset(every_call, row.outcomes[models[-1]].cost_usd or 0.0)
    while True:
        answers = []
        for call in step.calls:
            out = row.outcomes[models[call.tier]]
            # A missing recorded response behaves like a failed call: the cascade escalates past it.
            error = None if out.response is not None else "no recorded response"
            answers.append(
                Answer(call=call, text=out.response or "", error=error, cost_usd=out.cost_usd or 0.0)
            )
        decision = cascade.judge(plan, state, row.prompt, answers, threshold_offset=offset)
        if isinstance(decision, Escalate):
            state, step = decision.state, decision.step
            continue
        break
    called = tuple(a.call.tier for a in decision.state.answers)
    cost = sum(a.cost_usd or 0.0 for a in decision.state.answers)
    reasons = tuple(str(r) for r in decision.state.escalations)
    if guard is not None:
        guard.record(cost, row.outcomes[models[-1]].cost_usd or 0.0, bool(decision.state.escalations))
    if isinstance(decision, Fail):
        return RowDecision(row.id, row.task, -1, "", True, None, reasons, called, 0.0, cost)
    assert isinstance(decision, Accept)
    tier = decision.tier
    return RowDecision(
        id=row.id,
        task=row.task,
        tier=tier,
        pool=routing.tiers[tier].pool,
        escalated=decision.escalated,
        score=decision.score,
        reasons=reasons,
        called=called,
        quality=row.outcomes[models[tier]].score,
        cost_usd=cost,
    )


def replay(
    rows: Sequence[Row],
    routing: RoutingPolicy,
    models: Sequence[str],
    cascade: Cascade,
    difficulty: Mapping[str, float] | None = None,
    thresholds: Sequence[float] | None = None,
    guard: CostGuard | None = None,
    offset: float = 0.0,
) -> list[RowDecision]:
    d = difficulty or {}  # in file order: a guard adapts online
    return [replay_row(r, routing, models, cascade, d.get(r.id), thresholds, guard, offset) for r in rows]


def summarize(
    decisions: Sequence[RowDecision], rows: Sequence[Row], strong: str, weak: str, pools: Sequence[str]
) -> Summary:
    by_id = {r.id: r for r in rows}
    picked = [by_id[d.id] for d in decisions]
    n = len(decisions)
    shares = Counter(d.pool or "<none>" for d in decisions)
    reasons = Counter(reason for d in decisions for reason in d.reasons)
    return Summary(
        n=n,
        quality=sum(d.quality for d in decisions) / n,
        cost_usd=sum(d.cost_usd for d in decisions),
        strong_quality=sum(r.outcomes[strong].score for r in picked) / n,
        strong_cost_usd=sum(r.outcomes[strong].cost_usd or 0.0 for r in picked),
        weak_quality=sum(r.outcomes[weak].score for r in picked) / n,
        # Every pool of the alias appears (0 when unused); "<none>" only when some rows got no answer.
        tier_share={p: shares.get(p, 0) / n for p in [*pools, "<none>"] if p != "<none>" or p in shares},
        escalations=dict(sorted(reasons.items())),
        escalated_rows=sum(1 for d in decisions if d.escalated),
    )


def _with_tiers(routing: RoutingPolicy, pools: Sequence[str]) -> RoutingPolicy:
    old = {t.pool: t for t in routing.tiers}
    tiers = tuple(old.get(p, Tier(pool=p)) for p in pools)
    return RoutingPolicy.model_validate({**routing.model_dump(), "tiers": [t.model_dump() for t in tiers]})


def _trained_index(routing: RoutingPolicy) -> int | None:
    if routing.cascade is None:
        return None
    return next((i for i, s in enumerate(routing.cascade.scorers) if isinstance(s, TrainedScorer)), None)


def _cascade_for(
    routing: RoutingPolicy, trained: TrainedAnswerScorer | None, threshold: float | None, memo: Cascade | None
) -> Cascade:
    base = memo if memo is not None else memoized(Cascade.from_config(routing.cascade, trained))
    idx = _trained_index(routing)
    if idx is None or threshold is None:
        return base
    scorers = list(base.scorers)
    scorers[idx] = (scorers[idx][0], threshold)
    return Cascade(scorers=tuple(scorers))


@dataclass(frozen=True, slots=True)
class CvResult:
    decisions: list[RowDecision]
    fits: list[FoldFit]


def cross_validate(
    rows: Sequence[Row],
    routing: RoutingPolicy,
    pool_models: Mapping[str, str],
    *,
    k: int = 5,
    target_cost_share: float = 0.35,
    fit_threshold: bool = True,
    select_tiers: bool = False,
    difficulty: Mapping[str, float] | None = None,
    scorer_models: Sequence[str] | None = None,
    step_scorer: bool = False,
    inner_folds: int = 0,
) -> CvResult:
    """Fit on k-1 folds, replay the held-out fold; see the module docstring.

    `step_scorer`: the trained scorer is a step scorer of the alias (scorer_train.train_step_scorer),
    with every other model's responses (or `scorer_models`') as answer-only examples.
    `inner_folds` > 1: the threshold is fitted on out-of-fold scores within the training folds (each
    inner part scored by a scorer that did not see it), not on the training rows' own, overconfident,
    scores; the fold's scorer is then trained on all its training rows.
    """
    strong_pool = routing.tiers[-1].pool
    strong = pool_models[strong_pool]
    n_cheap = len(routing.tiers) - 1
    if select_tiers:
        candidates = [p for p, m in pool_models.items() if p != strong_pool]
        tier_sets = [(*c, strong_pool) for c in itertools.combinations(candidates, n_cheap)]
    else:
        tier_sets = [tuple(t.pool for t in routing.tiers)]
    trainable = _trained_index(routing) is not None
    cache: FeatureCache = {}
    all_models = sorted({m for r in rows for m in r.outcomes})

    def fit(train: Sequence[Row], policy: RoutingPolicy, models: list[str]) -> TrainedAnswerScorer | None:
        if not trainable:
            return None
        if step_scorer:
            extra = [m for m in (scorer_models or all_models) if m not in models]
            return train_step_scorer(train, policy, models, cache, extra_models=extra)
        return train_scorer(train, cache, models=scorer_models)

    decisions: list[RowDecision] = []
    fits: list[FoldFit] = []
    for fold, (train_idx, test_idx) in enumerate(kfold_indices(rows, k)):
        train = [rows[i] for i in train_idx]
        test = [rows[i] for i in test_idx]
        if not test:
            continue
        strong_cost = sum(r.outcomes[strong].cost_usd or 0.0 for r in train)
        cuts = _fold_cuts(routing, difficulty, train)
        grid: Sequence[float | None] = THRESHOLD_GRID if (trainable and fit_threshold) else (None,)
        best: tuple[float, float, tuple[str, ...], float | None] | None = None
        for pools in tier_sets:
            # Cheap tiers ordered by their mean cost on the training rows: a cascade goes cheap -> strong.
            pools = (*sorted(pools[:-1], key=lambda p: _mean_cost(train, pool_models[p])), pools[-1])
            policy = _with_tiers(routing, pools)
            models = [pool_models[p] for p in pools]
            if inner_folds > 1 and trainable and len(grid) > 1:
                inner = kfold_indices(train, inner_folds, salt="inner")
                parts = [([train[i] for i in a], [train[i] for i in b]) for a, b in inner]
            else:
                parts = [(train, train)]
            totals = {thr: [0.0, 0.0] for thr in grid}  # threshold -> [quality sum, cost sum]
            for fit_rows, score_rows in parts:
                if not score_rows:
                    continue
                trained = fit(fit_rows, policy, models)
                memo = memoized(Cascade.from_config(policy.cascade, trained))
                for thr in grid:
                    dec = replay(
                        score_rows, policy, models, _cascade_for(policy, trained, thr, memo), difficulty, cuts
                    )
                    totals[thr][0] += sum(d.quality for d in dec)
                    totals[thr][1] += sum(d.cost_usd for d in dec)
            for thr, (q_sum, c_sum) in totals.items():
                quality = q_sum / len(train)
                share = c_sum / strong_cost if strong_cost else math.nan
                within = share <= target_cost_share
                # Best quality within budget; if nothing fits, the cheapest candidate.
                key = (quality if within else -share, -share)
                if best is None or key > (best[0], best[1]):
                    best = (key[0], key[1], pools, thr)
        assert best is not None
        _, _, pools, thr = best
        policy = _with_tiers(routing, pools)
        models = [pool_models[p] for p in pools]
        trained = fit(train, policy, models)
        train_dec = replay(train, policy, models, _cascade_for(policy, trained, thr, None), difficulty, cuts)
        fits.append(
            FoldFit(
                fold=fold,
                pools=pools,
                threshold=thr,
                train_quality=sum(d.quality for d in train_dec) / len(train_dec),
                train_cost_share=sum(d.cost_usd for d in train_dec) / strong_cost
                if strong_cost
                else math.nan,
            )
        )
        test_dec = replay(test, policy, models, _cascade_for(policy, trained, thr, None), difficulty, cuts)
        decisions += [_with_fold(d, fold) for d in test_dec]
    order = {r.id: i for i, r in enumerate(rows)}
    decisions.sort(key=lambda d: order[d.id])
    return CvResult(decisions=decisions, fits=fits)


def configured_cascade(routing: RoutingPolicy) -> Cascade:
    """The alias's cascade as the gateway builds it (YAML thresholds, shipped artifact), memoized."""
    idx = _trained_index(routing)
    trained = None
    if idx is not None and routing.cascade is not None:
        cfg = routing.cascade.scorers[idx]
        assert isinstance(cfg, TrainedScorer)
        trained = TrainedAnswerScorer.load(cfg.artifact)
    return memoized(Cascade.from_config(routing.cascade, trained))


def as_configured(
    rows: Sequence[Row],
    routing: RoutingPolicy,
    pool_models: Mapping[str, str],
    difficulty: Mapping[str, float] | None = None,
    cost_budget: float | None = None,
    prior: CostPrior | None = None,
    cascade: Cascade | None = None,
) -> CvResult:
    """Replay every row as the gateway runs it (YAML thresholds, shipped artifact, no fitting; through a
    CostGuard starting from `prior` when `cost_budget` is set). Not a held-out estimate when the
    artifact (or the prior) saw these rows. `cascade`: the configured one, already built (reuse)."""
    models = [pool_models[t.pool] for t in routing.tiers]
    cascade = cascade if cascade is not None else configured_cascade(routing)
    guard = CostGuard(cost_budget, prior=prior) if cost_budget is not None else None
    cuts = _fold_cuts(routing, difficulty, rows)
    return CvResult(
        decisions=replay(rows, routing, models, cascade, difficulty, cuts, guard),
        fits=[],
    )


# Offsets a prior is fitted at: every threshold is in [0, 1], so 1 accepts any scored answer; 0.01
# resolves the trained scorer's probabilities, which crowd near its thresholds.
PRIOR_OFFSETS: tuple[float, ...] = tuple(round(0.01 * i, 2) for i in range(101))


def fit_cost_prior(
    rows: Sequence[Row],
    routing: RoutingPolicy,
    pool_models: Mapping[str, str],
    data: Sequence[str] = (),
    cascade: Cascade | None = None,
) -> CostPrior:
    """The cold-start prior of a CostGuard: the configured cascade replayed on calibration `rows` at
    every offset of PRIOR_OFFSETS, its cost share of strong-only and its escalation rate at each.
    `data` names the rows' files (recorded in the prior, so it is never judged on them)."""
    if not rows:
        raise CascadeEvalError("a cost prior needs calibration rows")
    models = [pool_models[t.pool] for t in routing.tiers]
    cascade = cascade if cascade is not None else configured_cascade(routing)
    strong_cost = sum(r.outcomes[models[-1]].cost_usd or 0.0 for r in rows)
    if strong_cost <= 0:
        raise CascadeEvalError("calibration rows have no strong-tier cost: a cost share is undefined")
    shares: list[float] = []
    rates: list[float] = []
    for offset in PRIOR_OFFSETS:
        dec = replay(rows, routing, models, cascade, offset=offset)
        shares.append(sum(d.cost_usd for d in dec) / strong_cost)
        rates.append(sum(d.escalated for d in dec) / len(dec))
    return CostPrior(PRIOR_OFFSETS, tuple(shares), tuple(rates), rows=len(rows), data=tuple(data))


def _with_fold(d: RowDecision, fold: int) -> RowDecision:
    return RowDecision(
        d.id, d.task, d.tier, d.pool, d.escalated, d.score, d.reasons, d.called, d.quality, d.cost_usd, fold
    )


def _mean_cost(rows: Sequence[Row], model: str) -> float:
    return float(np.mean([r.outcomes[model].cost_usd or 0.0 for r in rows]))


def _fold_cuts(
    routing: RoutingPolicy, difficulty: Mapping[str, float] | None, train: Sequence[Row]
) -> tuple[float, ...] | None:
    """Difficulty cut points: the YAML's, or a target strong share's quantile over the training rows."""
    cfg = routing.difficulty
    if difficulty is None or cfg is None:
        return None
    if cfg.thresholds is not None:
        return cfg.thresholds
    if cfg.target_strong_share is not None:
        values = [difficulty[r.id] for r in train if r.id in difficulty]
        cut = float(np.quantile(values, 1.0 - cfg.target_strong_share)) if values else 1.0
        return tuple([cut] * (len(routing.tiers) - 1))
    return None
