"""Router metrics after RouteLLM (Ong et al., "RouteLLM: Learning to Route LLMs with Preference Data",
arXiv:2406.18665, §5.1), plus cost-quality accounting over N priced tiers.

Two-tier routing. A router gives every prompt a difficulty (higher = needs the strong model more). A
threshold routes the hardest share x of prompts to the strong model M_s and the rest to the weak one M_w:

    perf(x)  = mean quality of the chosen answers
    PGR(x)   = (perf(x) - perf(M_w)) / (perf(M_s) - perf(M_w))          performance gap recovered
    APGR     = integral of PGR(x) over x in [0, 1]                       average PGR
    CPT(p)   = min { x : PGR(x) >= p }                                   call-performance threshold

Ties. Prompts with equal difficulty cannot be ordered by the router, so inside a tie block every order
is equally likely. The expected cumulative gain over a block then grows linearly, which means the
tie-averaged curve is the piecewise-linear interpolation of the exact curve at tie-block boundaries.
We compute that curve at every knot x = k/n (k = 0..n) and integrate it exactly with the trapezoid rule
(exact for a piecewise-linear function), so the result is the limit of an arbitrarily fine x grid and
does not depend on input order. Consequences: a constant difficulty (the random router) has APGR = 0.5
exactly, and a prior with one value per subject is credited the average over within-subject orders.

RouteLLM's published code (routellm/evals/evaluate.py) instead evaluates 11 thresholds at difficulty
deciles and integrates those points with the trapezoid rule; `apgr_decile_thresholds` reproduces that
for comparison with published figures. It systematically under-credits concave curves (a good router's).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from eval.routing.data import FloatArray, IntArray, TierOutcomes

DEFAULT_SHARES: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def _as_vector(name: str, values: npt.ArrayLike, n: int | None = None) -> FloatArray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"{name} has {arr.shape[0]} values, expected {n}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr


def _hardest_first(difficulty: FloatArray) -> tuple[IntArray, IntArray]:
    """Row order (hardest first) and the tie-block boundaries in that order, including 0 and n."""
    # Stable sort on the negated key: order inside a tie block is input order, but the block boundaries,
    # which are all the expected curve depends on, are not.
    order = np.argsort(-difficulty, kind="stable").astype(np.int64)
    ranked = difficulty[order]
    inner = np.flatnonzero(ranked[1:] != ranked[:-1]) + 1
    bounds = np.concatenate(([0], inner, [len(difficulty)])).astype(np.int64)
    return order, bounds


def expected_cumsum(difficulty: FloatArray, values: FloatArray) -> FloatArray:
    """E[sum of `values` over the k hardest rows] for k = 0..n, averaged over orders inside tie blocks."""
    order, bounds = _hardest_first(difficulty)
    cum = np.concatenate(([0.0], np.cumsum(values[order])))
    knots = np.arange(len(values) + 1, dtype=np.float64)
    return np.interp(knots, bounds.astype(np.float64), cum[bounds])


@dataclass(frozen=True, slots=True)
class RoutingCurve:
    """Expected two-tier outcome at every strong share k/n, k = 0..n."""

    shares: FloatArray
    performance: FloatArray
    perf_strong: float
    perf_weak: float
    # Total cost in USD at each knot, when both models have per-row prices.
    cost: FloatArray | None = None

    @property
    def gap(self) -> float:
        return self.perf_strong - self.perf_weak

    @property
    def degenerate_reason(self) -> str | None:
        """Why PGR is undefined on this data, or None. Exact equality: scores are sums of the same rows."""
        if math.isclose(self.perf_strong, self.perf_weak, rel_tol=0.0, abs_tol=1e-12):
            return (
                f"strong and weak models have the same mean quality ({self.perf_strong:.4f}): "
                "there is no performance gap to recover, so PGR/APGR/CPT are undefined"
            )
        return None

    @property
    def pgr(self) -> FloatArray:
        if self.degenerate_reason is not None:
            return np.full_like(self.performance, np.nan)
        return (self.performance - self.perf_weak) / self.gap

    def performance_at(self, share: float) -> float:
        _check_share(share)
        return float(np.interp(share, self.shares, self.performance))

    def cost_at(self, share: float) -> float:
        _check_share(share)
        return math.nan if self.cost is None else float(np.interp(share, self.shares, self.cost))

    def pgr_at(self, share: float) -> float:
        _check_share(share)
        return float(np.interp(share, self.shares, self.pgr))


def _check_share(share: float) -> None:
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"strong share must be in [0, 1], got {share}")


def _router_inputs(
    difficulty: npt.ArrayLike, strong_score: npt.ArrayLike, weak_score: npt.ArrayLike
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Difficulty and both models' scores as equal-length float vectors (at least one row)."""
    d = _as_vector("difficulty", difficulty)
    if d.shape[0] == 0:
        raise ValueError("cannot evaluate a router on zero rows")
    n = d.shape[0]
    return d, _as_vector("strong_score", strong_score, n), _as_vector("weak_score", weak_score, n)


def routing_curve(
    difficulty: npt.ArrayLike,
    strong_score: npt.ArrayLike,
    weak_score: npt.ArrayLike,
    strong_cost: npt.ArrayLike | None = None,
    weak_cost: npt.ArrayLike | None = None,
) -> RoutingCurve:
    d, s, w = _router_inputs(difficulty, strong_score, weak_score)
    n = d.shape[0]
    performance = (w.sum() + expected_cumsum(d, s - w)) / n
    cost: FloatArray | None = None
    if strong_cost is not None and weak_cost is not None:
        sc = _as_vector("strong_cost", strong_cost, n)
        wc = _as_vector("weak_cost", weak_cost, n)
        cost = wc.sum() + expected_cumsum(d, sc - wc)
    return RoutingCurve(
        shares=np.arange(n + 1, dtype=np.float64) / n,
        performance=performance,
        perf_strong=float(s.mean()),
        perf_weak=float(w.mean()),
        cost=cost,
    )


def apgr(curve: RoutingCurve) -> float:
    """Exact area under the tie-averaged PGR curve; NaN when there is no gap (see degenerate_reason)."""
    if curve.degenerate_reason is not None:
        return math.nan
    return float(np.trapezoid(curve.pgr, curve.shares))


def cpt(curve: RoutingCurve, target: float) -> float:
    """Smallest strong share whose expected PGR reaches `target`, linear between knots; NaN if none."""
    if curve.degenerate_reason is not None or not math.isfinite(target):
        return math.nan
    pgr = curve.pgr
    hits = np.flatnonzero(pgr >= target)
    if hits.size == 0:
        return math.nan
    j = int(hits[0])
    if j == 0:
        return 0.0
    # pgr[j-1] < target <= pgr[j]: the first crossing lies on this segment.
    lo, hi = pgr[j - 1], pgr[j]
    x0, x1 = curve.shares[j - 1], curve.shares[j]
    return float(x0 + (target - lo) / (hi - lo) * (x1 - x0))


def apgr_decile_thresholds(
    difficulty: npt.ArrayLike, strong_score: npt.ArrayLike, weak_score: npt.ArrayLike, bins: int = 10
) -> float:
    """APGR as RouteLLM's evaluate.py computes it: thresholds at `bins`-quantiles, trapezoid over them.

    Kept only to compare with published numbers; `apgr` is the definition we report.
    """
    d, s, w = _router_inputs(difficulty, strong_score, weak_score)
    perf_s, perf_w = float(s.mean()), float(w.mean())
    if math.isclose(perf_s, perf_w, rel_tol=0.0, abs_tol=1e-12):
        return math.nan
    thresholds = np.quantile(d, np.linspace(0.0, 1.0, bins + 1))
    points: list[tuple[float, float]] = []
    for i, t in enumerate(thresholds):
        # Their last threshold uses `>` so that the curve reaches 0 % strong calls.
        chosen = d > t if i == len(thresholds) - 1 else d >= t
        points.append((float(chosen.mean()), float(np.where(chosen, s, w).mean())))
    points.sort()
    xs = np.array([p[0] for p in points])
    perf = np.array([p[1] for p in points])
    span = xs[-1] - xs[0]
    auc = float(np.trapezoid(perf, xs))
    return (auc - perf_w * span) / ((perf_s - perf_w) * span) if span > 0 else math.nan


@dataclass(frozen=True, slots=True)
class RouterReport:
    """The figures `llmgw router eval` prints for one router on one dataset."""

    name: str
    n: int
    perf_strong: float
    perf_weak: float
    apgr: float
    cpt50: float
    cpt80: float
    # strong share -> (expected quality, PGR, total cost USD or NaN)
    at_shares: dict[float, tuple[float, float, float]] = field(default_factory=dict)
    note: str | None = None


def report(name: str, curve: RoutingCurve, shares: Sequence[float] = DEFAULT_SHARES) -> RouterReport:
    return RouterReport(
        name=name,
        n=len(curve.shares) - 1,
        perf_strong=curve.perf_strong,
        perf_weak=curve.perf_weak,
        apgr=apgr(curve),
        cpt50=cpt(curve, 0.5),
        cpt80=cpt(curve, 0.8),
        at_shares={x: (curve.performance_at(x), curve.pgr_at(x), curve.cost_at(x)) for x in shares},
        note=curve.degenerate_reason,
    )


# --- N priced tiers ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CostQuality:
    """Outcome of one routing/cascade plan over a dataset."""

    quality: float
    cost_usd: float  # NaN when the data has no prices
    tier_share: tuple[float, ...]  # share of rows answered by each tier

    def relative_to(self, reference: CostQuality) -> tuple[float, float]:
        """(quality ratio, cost ratio) against a reference plan such as strong-only."""
        q = self.quality / reference.quality if reference.quality else math.nan
        c = self.cost_usd / reference.cost_usd if reference.cost_usd else math.nan
        return q, c


def evaluate_plan(
    outcomes: TierOutcomes, answered: npt.ArrayLike, called: npt.ArrayLike | None = None
) -> CostQuality:
    """Quality of the answering tier per row; cost of every tier called (a cascade pays for each try).

    `answered[i]` is the tier index whose answer row i returns; `called[i, t]` says tier t was called
    for row i (default: only the answering tier, i.e. plain routing). The answering tier must be called.
    """
    n, tiers = outcomes.score.shape
    if n == 0:
        raise ValueError("cannot evaluate a plan on zero rows")
    ans = np.asarray(answered, dtype=np.int64)
    if ans.shape != (n,) or ans.min() < 0 or ans.max() >= tiers:
        raise ValueError(f"answered must be {n} tier indices in [0, {tiers})")
    rows = np.arange(n)
    if called is None:
        calls = np.zeros((n, tiers), dtype=bool)
        calls[rows, ans] = True
    else:
        calls = np.asarray(called, dtype=bool)
        if calls.shape != (n, tiers):
            raise ValueError(f"called must have shape {(n, tiers)}, got {calls.shape}")
        if not np.all(calls[rows, ans]):
            raise ValueError("every row's answering tier must be among its called tiers")
    quality = float(outcomes.score[rows, ans].mean())
    cost = math.nan if outcomes.cost is None else float((outcomes.cost * calls).sum())
    share = tuple(float(x) for x in np.bincount(ans, minlength=tiers) / n)
    return CostQuality(quality=quality, cost_usd=cost, tier_share=share)


def single_model_points(outcomes: TierOutcomes) -> dict[str, CostQuality]:
    """Every tier answering everything: the points a router has to beat."""
    n = outcomes.score.shape[0]
    return {m: evaluate_plan(outcomes, np.full(n, t)) for t, m in enumerate(outcomes.models)}


def assign_by_shares(difficulty: npt.ArrayLike, shares: Sequence[float]) -> IntArray:
    """Tier per row from target shares, tiers ordered cheap -> strong: the easiest rows go to tier 0.

    Ties go in input order (a deterministic choice; tie-averaging is a two-tier curve property).
    """
    d = _as_vector("difficulty", difficulty)
    if not shares or any(s < 0 for s in shares) or not math.isclose(sum(shares), 1.0, abs_tol=1e-9):
        raise ValueError(f"shares must be non-negative and sum to 1, got {list(shares)}")
    n = d.shape[0]
    order = np.argsort(d, kind="stable")
    edges = np.rint(np.cumsum(shares) * n).astype(np.int64)
    edges[-1] = n
    tier_of_rank = np.searchsorted(edges, np.arange(n), side="right")
    out = np.empty(n, dtype=np.int64)
    out[order] = tier_of_rank
    return out


def oracle_cheapest(outcomes: TierOutcomes) -> IntArray:
    """Per row, the cheapest tier reaching that row's best score (tier order breaks ties without prices).

    The upper bound for any router or cascade over these tiers.
    """
    best = outcomes.score.max(axis=1, keepdims=True)
    ok = outcomes.score >= best
    price = (
        outcomes.cost
        if outcomes.cost is not None
        else np.broadcast_to(np.arange(outcomes.score.shape[1], dtype=np.float64), outcomes.score.shape)
    )
    cheapest: IntArray = np.argmin(np.where(ok, price, np.inf), axis=1).astype(np.int64)
    return cheapest


def gap_recovered(quality: float, weak_quality: float, strong_quality: float) -> float:
    """PGR of a single plan; NaN when strong and weak have the same quality."""
    gap = strong_quality - weak_quality
    return math.nan if math.isclose(gap, 0.0, abs_tol=1e-12) else (quality - weak_quality) / gap


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of (cost, quality) points not dominated by a cheaper-or-equal, better-or-equal point."""
    idx = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front: list[int] = []
    best = -math.inf
    for i in idx:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front
