"""Drift between two pools serving the same weights: a pure comparison of two greedy trajectories.

Both `llmgw drift` (eval/drift) and the gateway's background canary (gateway/upstream/drift_canary.py) call
`compare` and `summarize`; it lives in `pools` because both may import it (design §2: nothing imports
`eval`, and `pools` never imports `gateway`) and because agreement between pools is a property of the
pools, like their load. Parsing an OpenAI answer into a `Trajectory` is in `pools.drift_answer`.

What is compared, per position i of two greedy continuations of the same prompt:

- The contexts are identical up to and including the first divergence position d (the first i whose
  tokens differ): the distributions at 0..d answer the same question, so the top-k overlap and the
  KL estimate use positions 0..d (d included); after d the two pools continue different texts and
  nothing is comparable.
- |Δ logprob| of the chosen token needs the same token on both sides: positions 0..d-1 only (the
  shared prefix).
- A position whose chosen-token logprob is not finite on either side (NaN, ±inf: a broken engine or a
  -inf it could not serialise) is left out of |Δ logprob| and counted in `nonfinite`; non-finite
  top-k entries are dropped before the KL. Identical trajectories therefore compare as exactly 0.

KL estimator (top-k, renormalised, floored): at one position each side lists its top-k tokens with
logprobs (plus the chosen one). Over the union U of the listed tokens, a token missing from one side's
list is given that side's smallest listed logprob: it was not in that side's top-k, so its true value
is at most that (the floor is the largest value consistent with what the engine said). Each side is
then renormalised over U and KL(A‖B) = Σ_U p_A log(p_A/p_B) is taken. It is an estimate: the mass
outside U is ignored, and the floor understates disagreement on tokens only one side ranks highly.
For identical lists it is exactly 0 (the same floats on both sides). Top-k overlap at a position is the
Jaccard index |A∩B| / |A∪B| of the two listed token sets (1 for identical lists).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Comparison", "Step", "Summary", "breaches", "compare", "position_deltas", "summarize", "top_kl"]


@dataclass(frozen=True, slots=True)
class Step:
    """One generated token: its text, its logprob, and the engine's top-k alternatives at that position
    (empty when the engine sent none)."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


Trajectory = Sequence[Step]


@dataclass(frozen=True, slots=True)
class Comparison:
    """Two trajectories of one prompt."""

    length_a: int
    length_b: int
    match: bool  # the same tokens, the same length
    divergence: int | None  # first position whose tokens differ (or where the shorter one ended); None: match
    shared: int  # positions of the shared prefix (|Δ logprob| is taken over these)
    mean_abs_logprob: float  # 0 when no shared position has finite logprobs on both sides
    max_abs_logprob: float
    kl: float  # mean top-k KL(A‖B) over the comparable positions (0..divergence)
    topk_overlap: float  # mean Jaccard of the listed top-k sets over the comparable positions (1: none)
    compared: int  # comparable positions that had top-k lists on both sides (KL and overlap were taken)
    nonfinite: int  # shared positions left out of |Δ logprob| (a non-finite logprob on either side)


def _finite(x: float) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


def _listed(step: Step) -> dict[str, float]:
    """The side's distribution at one position: top-k plus the chosen token, finite values only."""
    out = {t: lp for t, lp in step.top if _finite(lp)}
    if step.token not in out and _finite(step.logprob):
        out[step.token] = step.logprob
    return out


def top_kl(a: dict[str, float], b: dict[str, float]) -> tuple[float, float] | None:
    """(KL(A‖B), Jaccard) of two listed top-k distributions (token -> logprob); None if either is empty.

    The estimator is the module docstring's: union support, a side's missing tokens at its smallest
    listed logprob, both renormalised."""
    if not a or not b:
        return None
    union = a.keys() | b.keys()
    floor_a, floor_b = min(a.values()), min(b.values())
    # Shift by each side's maximum before exp: logprobs near -100 would underflow to zero otherwise.
    top_a, top_b = max(a.values()), max(b.values())
    pa = {t: math.exp(a.get(t, floor_a) - top_a) for t in union}
    pb = {t: math.exp(b.get(t, floor_b) - top_b) for t in union}
    za, zb = sum(pa.values()), sum(pb.values())
    kl = 0.0
    for t in sorted(union):  # a fixed order: the same sum for the same inputs
        p, q = pa[t] / za, pb[t] / zb
        if p > 0.0:
            kl += p * math.log(p / q)
    jaccard = len(a.keys() & b.keys()) / len(union)
    return max(kl, 0.0), jaccard  # rounding can leave -1e-17 for equal distributions in another order


def position_deltas(a: Trajectory, b: Trajectory) -> list[float | None]:
    """|Δ logprob| of the chosen token at each position of the shared prefix (None: not finite on a
    side). What a report plots per position; `compare` aggregates the same values."""
    out: list[float | None] = []
    for sa, sb in zip(a, b, strict=False):
        if sa.token != sb.token:
            break
        finite = _finite(sa.logprob) and _finite(sb.logprob)
        out.append(abs(sa.logprob - sb.logprob) if finite else None)
    return out


def compare(a: Trajectory, b: Trajectory) -> Comparison:
    """Compare two greedy continuations of the same prompt (see the module docstring)."""
    shortest = min(len(a), len(b))
    divergence = next((i for i in range(shortest) if a[i].token != b[i].token), None)
    if divergence is None and len(a) != len(b):
        divergence = shortest  # one stopped where the other went on: that is a divergence too
    shared = shortest if divergence is None else divergence
    per_position = position_deltas(a, b)
    deltas = [d for d in per_position if d is not None]
    nonfinite = len(per_position) - len(deltas)
    # Distributions are comparable up to the divergence position itself (same context up to there).
    last = shared if divergence is not None and divergence < shortest else shared - 1
    kls: list[float] = []
    overlaps: list[float] = []
    for i in range(last + 1):
        got = top_kl(_listed(a[i]), _listed(b[i]))
        if got is not None:
            kls.append(got[0])
            overlaps.append(got[1])
    return Comparison(
        length_a=len(a),
        length_b=len(b),
        match=divergence is None,
        divergence=divergence,
        shared=shared,
        mean_abs_logprob=_mean(deltas, 0.0),
        max_abs_logprob=max(deltas, default=0.0),
        kl=_mean(kls, 0.0),
        topk_overlap=_mean(overlaps, 1.0),
        compared=len(kls),
        nonfinite=nonfinite,
    )


def _mean(xs: Sequence[float], empty: float) -> float:
    return math.fsum(xs) / len(xs) if xs else empty


@dataclass(frozen=True, slots=True)
class Summary:
    """Many prompts' comparisons, pooled: what a report's overall line and the gauges show."""

    prompts: int
    match_ratio: float  # share of prompts whose continuations are identical (1.0 for no prompts)
    diverged: int
    first_divergence: int | None  # the earliest divergence position over the prompts; None: none diverged
    mean_divergence: float | None  # mean divergence position over the diverged prompts
    mean_abs_logprob: float  # over every shared position of every prompt (position-weighted)
    max_abs_logprob: float
    kl: float  # over every comparable position of every prompt (position-weighted)
    topk_overlap: float
    positions: int  # shared positions with finite logprobs (the |Δ logprob| sample size)
    nonfinite: int


def summarize(comparisons: Sequence[Comparison]) -> Summary:
    """Pool per-prompt comparisons; means are weighted by positions so a long prompt counts as its
    tokens, not as one sample."""
    diverged = [c.divergence for c in comparisons if c.divergence is not None]
    positions = sum(c.shared - c.nonfinite for c in comparisons)
    compared = sum(c.compared for c in comparisons)
    n = len(comparisons)
    return Summary(
        prompts=n,
        match_ratio=(n - len(diverged)) / n if n else 1.0,
        diverged=len(diverged),
        first_divergence=min(diverged) if diverged else None,
        mean_divergence=_mean([float(d) for d in diverged], 0.0) if diverged else None,
        mean_abs_logprob=(
            math.fsum(c.mean_abs_logprob * (c.shared - c.nonfinite) for c in comparisons) / positions
            if positions
            else 0.0
        ),
        max_abs_logprob=max((c.max_abs_logprob for c in comparisons), default=0.0),
        kl=math.fsum(c.kl * c.compared for c in comparisons) / compared if compared else 0.0,
        topk_overlap=(
            math.fsum(c.topk_overlap * c.compared for c in comparisons) / compared if compared else 1.0
        ),
        positions=positions,
        nonfinite=sum(c.nonfinite for c in comparisons),
    )


def breaches(
    s: Summary,
    max_mean_abs_logprob: float | None = None,
    max_kl: float | None = None,
    min_match_ratio: float | None = None,
) -> tuple[str, ...]:
    """The measures of `s` outside their bounds (None: that measure is not bounded), in a fixed order."""
    out: list[str] = []
    if max_mean_abs_logprob is not None and s.mean_abs_logprob > max_mean_abs_logprob:
        out.append("mean_abs_logprob")
    if max_kl is not None and s.kl > max_kl:
        out.append("kl")
    if min_match_ratio is not None and s.match_ratio < min_match_ratio:
        out.append("match_ratio")
    return tuple(out)
