"""The N-tier success policy: the start tier from per-tier predicted success, its config, its plan."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pytest
from pydantic import ValidationError

from gateway.routing.aliases import RoutedAlias, _live_calibration
from router.cascade import Cascade
from router.config import RoutingPolicy
from router.policy import plan_route
from router.tiers import (
    escalation_worth,
    header_difficulty,
    strong_gap,
    success_start,
    tier_columns,
    tier_probabilities,
)

MODELS = ("Llama-3.1-8B", "Llama-3.1-70B", "gpt-4o")


class _Predictor:
    """An in-memory SuccessPredictor: a fixed row per text."""

    models = MODELS
    manifest: Mapping[str, Any] = {}

    def __init__(self, rows: dict[str, list[float]] | None = None) -> None:
        self.rows = rows or {}

    def index(self, name: str) -> int:
        if name not in self.models:
            raise KeyError(name)  # like the artifact
        return self.models.index(name)

    def predict(self, emb: npt.NDArray[np.float32], texts: Sequence[str]) -> npt.NDArray[np.float64]:
        return np.asarray([self.rows[t] for t in texts], dtype=np.float64)


def _policy(n: int = 3, **extra: Any) -> RoutingPolicy:
    tiers = [{"pool": f"p{i}", "like": MODELS[min(i, 2)]} for i in range(n)]
    return RoutingPolicy.model_validate({"tiers": tiers, "success": {"tolerance": 0.05}, **extra})


@pytest.mark.parametrize(
    ("probs", "tolerance", "start"),
    [
        ((0.70, 0.80), 0.05, 1),  # two tiers: the cheap one is 0.10 behind
        ((0.77, 0.80), 0.05, 0),  # within the tolerance: the cheap one
        ((0.40, 0.78, 0.80), 0.05, 1),  # three tiers: the middle is close enough
        ((0.40, 0.60, 0.80), 0.05, 2),
        ((0.90, 0.60, 0.80), 0.0, 0),  # the cheapest is the best
        ((0.1, 0.2, 0.3, 0.9), 0.05, 3),  # four tiers
        ((0.1, 0.84, 0.88, 0.9), 0.05, 2),
        ((0.1, 0.84, 0.88, 0.9), 0.1, 1),
        ((0.5, 0.8, 0.8), 0.0, 1),  # a tie at the best with no tolerance: the cheaper of the two
        ((0.8, 0.8, 0.8), 0.0, 0),
        ((0.3, 0.5, 0.7), 1.0, 0),  # the whole range: always the cheapest
    ],
)
def test_the_start_is_the_cheapest_tier_within_tolerance_of_the_best(
    probs: tuple[float, ...], tolerance: float, start: int
) -> None:
    assert success_start(probs, tolerance) == start


@pytest.mark.parametrize("probs", [None, (), (0.5, math.nan, 0.9)])
def test_no_usable_probabilities_give_no_start(probs: Sequence[float] | None) -> None:
    assert success_start(probs, 0.05) is None


def test_a_negative_tolerance_is_read_as_zero_so_the_best_tier_always_qualifies() -> None:
    assert success_start((0.2, 0.9, 0.9), -0.3) == 1


def test_strong_gap_is_how_far_the_strongest_tier_leads() -> None:
    assert strong_gap((0.2, 0.5, 0.9)) == pytest.approx(0.4)
    assert strong_gap((0.2, 0.95, 0.9)) == 0.0  # not ahead
    assert strong_gap((0.9,)) == 0.0
    # The start is the strongest tier exactly when the gap exceeds the tolerance.
    rng = random.Random(3)
    for _ in range(500):
        p = tuple(rng.random() for _ in range(3))
        tol = rng.random() * 0.3
        assert (success_start(p, tol) == 2) == (strong_gap(p) > tol)


def test_header_difficulty_is_the_cheapest_tiers_chance_of_failing() -> None:
    assert header_difficulty((0.75, 0.9)) == pytest.approx(0.25)


def test_tier_columns_map_likes_and_name_every_unknown_model() -> None:
    pred = _Predictor()
    assert tier_columns(pred, ["gpt-4o", "Llama-3.1-8B"]) == (2, 0)
    with pytest.raises(ValueError, match=r"\['Mixtral', 'gpt-5'\].*it knows"):
        tier_columns(pred, ["Mixtral", "Llama-3.1-8B", "gpt-5"])


def test_a_row_that_is_not_probabilities_maps_to_none() -> None:
    assert tier_probabilities(np.asarray([0.2, 0.5, 0.9]), (2, 0)) == (0.9, 0.2)
    assert tier_probabilities(np.asarray([0.2, math.nan, 0.9]), (1, 2)) is None
    assert tier_probabilities(np.asarray([0.2, 1.5]), (0, 1)) is None


# --- configuration ---


def test_success_needs_every_tier_to_say_what_it_is_like() -> None:
    with pytest.raises(ValidationError, match=r"missing on \['b'\]"):
        RoutingPolicy.model_validate(
            {"tiers": [{"pool": "a", "like": "x"}, {"pool": "b"}], "success": {"tolerance": 0.1}}
        )


def test_success_and_difficulty_are_exclusive() -> None:
    with pytest.raises(ValidationError, match="difficulty or success, not both"):
        _policy(difficulty={"thresholds": [0.3, 0.6]})


@pytest.mark.parametrize("section", [{"tolerance": -0.1}, {"tolerance": 1.5}, {"tolerance": 0.1, "typo": 1}])
def test_success_rejects_bad_values_and_unknown_keys(section: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        RoutingPolicy.model_validate({"tiers": [{"pool": "a", "like": "x"}], "success": section})


def test_success_tiers_must_be_priced_cheap_to_strong() -> None:
    cheap = {"input_per_mtok": 0.1, "output_per_mtok": 0.1}
    dear = {"input_per_mtok": 5.0, "output_per_mtok": 15.0}
    with pytest.raises(ValidationError, match="ordered cheap -> strong"):
        RoutingPolicy.model_validate(
            {
                "tiers": [
                    {"pool": "a", "like": "x", "price": dear},
                    {"pool": "b", "like": "y", "price": cheap},
                ],
                "success": {},
            }
        )


def test_without_success_the_difficulty_policy_is_unchanged() -> None:
    pol = RoutingPolicy.model_validate({"tiers": [{"pool": "a"}, {"pool": "b"}]})
    assert pol.success is None
    # Probabilities given to a difficulty policy are ignored: the difficulty decides.
    assert plan_route(pol, 0.9, thresholds=(0.5,), success=(0.9, 0.1)).first_tier == 1


# --- the plan ---


def test_the_plan_starts_from_the_success_probabilities() -> None:
    plan = plan_route(_policy(), 0.0, success=(0.40, 0.78, 0.80))
    assert plan.start_tier == 1 and [s.tiers for s in plan.steps] == [(1,), (2,)]
    assert not plan.notes


def test_a_tolerance_passed_in_overrides_the_configured_one() -> None:
    assert plan_route(_policy(), None, success=(0.40, 0.78, 0.80), tolerance=0.0).start_tier == 2
    assert plan_route(_policy(), None, success=(0.40, 0.78, 0.80), tolerance=0.5).start_tier == 0


@pytest.mark.parametrize("probs", [None, (0.5, 0.9), (0.5, math.nan, 0.9)])
def test_missing_probabilities_start_at_the_fallback_tier(probs: tuple[float, ...] | None) -> None:
    plan = plan_route(_policy(fallback_tier=1), None, success=probs)
    assert plan.start_tier == 1 and "no_success" in plan.notes
    assert plan_route(_policy(), None, success=probs).start_tier == 0


def test_the_later_steps_apply_unchanged_to_the_success_start() -> None:
    pol = _policy(risk_floor={"pii": 2})
    assert plan_route(pol, None, success=(0.9, 0.9, 0.9), risk_flags={"pii"}).first_tier == 2
    # The start tier is not allowed for the key: capped at the best allowed tier below it.
    assert plan_route(pol, None, success=(0.1, 0.2, 0.9), allowed_tiers={0, 1}).first_tier == 1
    cascade = _policy(cascade={"scorers": [{"kind": "logprob"}], "max_escalations": 2})
    plan = plan_route(cascade, None, success=(0.72, 0.74, 0.76))
    assert plan.cascade and [s.tiers for s in plan.steps] == [(0,), (1,), (2,)]


# --- the routed alias: probabilities per request, the live tolerance ---


class _Scorer:
    """Stands in for router.difficulty.SuccessScorer: per-model rows from the fake predictor."""

    def __init__(self, predictor: _Predictor) -> None:
        self.predictor = predictor

    async def assess(self, text: str) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float32]]:
        row = self.predictor.predict(np.zeros((1, 4), dtype=np.float32), [text])[0]
        return row, np.zeros(4, dtype=np.float32)


def _alias(policy: RoutingPolicy, predictor: _Predictor) -> RoutedAlias:
    return RoutedAlias(
        name="auto",
        policy=policy,
        pools=tuple(t.pool for t in policy.tiers),
        thresholds=None,
        cascade=Cascade.from_config(None, None),
        difficulty=None,
        fallback=None,
        logprobs=False,
        calibration=_live_calibration(policy),
        success=cast(Any, _Scorer(predictor)),
        columns=tier_columns(predictor, [t.like for t in policy.tiers]),
    )


def _ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_a_routed_alias_plans_from_its_tiers_columns() -> None:
    # Columns in another order than the tiers: the tiers' `like` decides which is which.
    pred = _Predictor({"easy": [0.95, 0.2, 0.97], "hard": [0.1, 0.3, 0.8]})
    policy = RoutingPolicy.model_validate(
        {
            "tiers": [{"pool": "s", "like": "Llama-3.1-70B"}, {"pool": "l", "like": "gpt-4o"}],
            "success": {"tolerance": 0.05},
        }
    )
    alias = _alias(policy, pred)
    easy = asyncio.run(alias.plan(_ask("hard"), None, (), False))
    assert easy.success == (0.3, 0.8) and easy.plan.start_tier == 1
    assert easy.difficulty == pytest.approx(0.7) and easy.tolerance == 0.05


def test_the_live_tolerance_follows_a_target_share_at_the_strongest_tier() -> None:
    rng = random.Random(11)
    rows = {}
    for i in range(600):
        base = rng.random() * 0.6
        rows[f"q{i}"] = [base, base + rng.random() * 0.2, base + rng.random() * 0.4]
    pred = _Predictor(rows)
    policy = _policy(
        success={
            "tolerance": 0.0,  # alone it would send nearly every request to the strongest tier
            "target_strong_share": 0.2,
            "calibration": {"window": 200, "min_samples": 50},
        }
    )
    alias = _alias(policy, pred)
    assert alias.calibration is not None

    async def share(texts: list[str]) -> float:
        starts = [(await alias.plan(_ask(t), None, (), False)).plan.start_tier for t in texts]
        return sum(s == 2 for s in starts) / len(starts)

    texts = list(rows)
    first = asyncio.run(share(texts[:50]))  # the configured tolerance until min_samples
    assert first > 0.5
    asyncio.run(share(texts[50:300]))
    learnt = asyncio.run(share(texts[300:]))
    assert 0.12 <= learnt <= 0.3, learnt
    cut = alias.calibration.cut()
    assert cut is not None and cut > 0.0


def test_without_a_target_share_the_tolerance_is_fixed() -> None:
    policy = _policy(success={"tolerance": 0.05, "target_strong_share": None})
    assert _live_calibration(policy) is None


@pytest.mark.parametrize(
    ("probs", "here", "later", "worth"),
    [
        ((0.5, 0.7, 0.9), [0], [1, 2], True),  # a later tier is predicted better
        ((0.5, 0.45, 0.5), [0], [1, 2], False),  # none is: the escalation buys nothing
        ((0.8, 0.6, 0.7), [0], [2], False),  # a stronger, dearer tier predicted worse on this prompt
        ((0.5, 0.6, 0.9), [0, 1], [2], True),  # a step of two tiers: its best one is the bar
        ((0.5, 0.9, 0.9), [0, 1], [2], False),
        (None, [0], [1], True),  # no probabilities: the scorers alone decide
        ((0.5, math.nan), [0], [1], True),
        ((0.5, 0.6), [0], [2], True),  # a tier the probabilities do not cover: no opinion
    ],
)
def test_an_escalation_is_worth_it_only_towards_a_tier_predicted_better(
    probs: tuple[float, ...] | None, here: list[int], later: list[int], worth: bool
) -> None:
    assert escalation_worth(probs, here, later) is worth


def test_the_cascade_runner_weighs_the_steps_after_the_current_one() -> None:
    from gateway.routing.cascade_runner import CascadeRunner
    from gateway.routing.table import Decided
    from router.plan import Call, Plan, Step

    plan = Plan(
        steps=(Step((Call(0),)), Step((Call(1),)), Step((Call(2),))), cascade=True, start_tier=0, notes=()
    )

    def decided(success: tuple[float, ...] | None) -> Decided:
        return Decided(None, (), plan, None, "p", [], False, success=success)  # type: ignore[arg-type]

    assert CascadeRunner._worth(decided((0.5, 0.4, 0.6)), 0)  # tier 2 beats tier 0
    assert not CascadeRunner._worth(decided((0.5, 0.6, 0.4)), 1)  # only tier 2 is left, predicted worse
    assert CascadeRunner._worth(decided(None), 1)
