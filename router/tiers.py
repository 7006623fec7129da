"""The N-tier success policy: per-tier predicted success -> the tier a request starts at (pure).

A success predictor (router/success.py) maps a prompt's encoder embedding to one probability per model
of its training data; each tier of a routed alias declares the model it behaves like (`tiers[].like`),
so a request gets one probability per tier, p[0..n-1], tiers ordered cheap -> strong:

    start = the first (cheapest) tier t with p[t] >= max(p) - tolerance

The best tier always qualifies, so there is always a start; tolerance 0 picks the cheapest of the
tiers tied at the best. Missing, short or non-finite probabilities give no start (None): the policy
then uses its fallback tier, as it does without a difficulty. Everything after the start (risk floor,
allowed tiers, headroom, cascade steps, latency budget) is router.policy.plan_route, unchanged.

Live calibration of the tolerance (the equivalent of the difficulty cut's, router/calibration.py):
a request starts at the strongest tier exactly when its `strong_gap` = p[n-1] - max(p[:n-1]) exceeds
the tolerance, so the tolerance that sends a target share of traffic to the strongest tier is the
(1 - target) quantile of the gaps, which is what LiveCalibration learns when fed the gaps instead of
difficulties. With two tiers this is the same split as the difficulty policy's target_strong_share;
with more, the middle tiers share the rest by the same tolerance. The header keeps one number,
`header_difficulty` = 1 - p[0], the predicted chance that the cheapest tier fails (higher = harder,
like the difficulty it replaces).

In a cascade the same probabilities weigh each escalation (`escalation_worth`): when the scorers reject
a step's answers, the next steps are called only if one of their tiers is predicted to answer better
than the tiers just called. An escalation to tiers predicted no better costs their price for no
expected gain (models are not monotone in price: on some prompts the predictor rates a cheaper model
higher), so the best answer in hand is kept instead. Errors and empty answers still escalate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the policy imports this module on the config path, where numpy is not loaded
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "SuccessPredictor",
    "header_difficulty",
    "strong_gap",
    "escalation_worth",
    "success_start",
    "tier_columns",
    "tier_probabilities",
]


class SuccessPredictor(Protocol):
    """What the policy needs of router.success.SuccessModel (a protocol, so tests use an in-memory one)."""

    @property
    def models(self) -> tuple[str, ...]: ...

    @property
    def manifest(self) -> Mapping[str, Any]: ...

    def index(self, name: str) -> int:
        """The column of `name` in `predict`'s output; KeyError if the artifact has no such model."""
        ...

    def predict(self, emb: npt.NDArray[np.float32], texts: Sequence[str]) -> npt.NDArray[np.float64]:
        """(n, d) L2-normalized encoder embeddings -> (n, len(models)) success probabilities."""
        ...


def tier_columns(predictor: SuccessPredictor, likes: Sequence[str | None]) -> tuple[int, ...]:
    """The predictor's column for each tier (start-up); ValueError naming every unknown `like`."""
    columns: list[int] = []
    unknown: list[str] = []
    for like in likes:
        if like is None:
            unknown.append("<unset>")
            continue
        try:
            columns.append(predictor.index(like))
        except KeyError:
            unknown.append(like)
    if unknown:
        raise ValueError(
            f"tiers[].like names models the success predictor was not trained on: {unknown}; "
            f"it knows {list(predictor.models)}"
        )
    return tuple(columns)


def tier_probabilities(row: npt.NDArray[np.float64], columns: Sequence[int]) -> tuple[float, ...] | None:
    """One request's per-tier probabilities from its per-model row; None when any is not a probability
    (a NaN from a broken artifact must not pick a tier)."""
    out = tuple(float(row[c]) for c in columns)
    return out if all(0.0 <= p <= 1.0 for p in out) else None


def success_start(probabilities: Sequence[float] | None, tolerance: float) -> int | None:
    """The cheapest tier within `tolerance` of the best one; None without usable probabilities."""
    if not probabilities or any(not math.isfinite(p) for p in probabilities):
        return None
    floor = max(probabilities) - max(0.0, tolerance)
    for tier, p in enumerate(probabilities):
        if p >= floor:
            return tier
    return None  # unreachable: the best tier always qualifies


def escalation_worth(
    probabilities: Sequence[float] | None, here: Sequence[int], later: Sequence[int]
) -> bool:
    """Whether calling the tiers `later` after the tiers `here` can buy quality: some later tier's
    predicted success is above every tier's just called. True without usable probabilities (the
    scorers alone decide, as without a success policy)."""
    if not probabilities or not here or not later:
        return True
    if any(not math.isfinite(p) for p in probabilities) or max(*here, *later) >= len(probabilities):
        return True
    return max(probabilities[t] for t in later) > max(probabilities[t] for t in here)


def strong_gap(probabilities: Sequence[float]) -> float:
    """How far the strongest tier is ahead of the best cheaper one, in [0, 1] (0: it is not ahead).
    A request starts at the strongest tier exactly when this is above the tolerance."""
    if len(probabilities) < 2:
        return 0.0
    return min(1.0, max(0.0, probabilities[-1] - max(probabilities[:-1])))


def header_difficulty(probabilities: Sequence[float]) -> float:
    """The one number `x-llmgw-difficulty` carries for a success alias: 1 - p(cheapest tier)."""
    return 1.0 - probabilities[0]
