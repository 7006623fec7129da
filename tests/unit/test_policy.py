from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from router.config import RoutingPolicy
from router.plan import Call, Step
from router.policy import plan_route, resolve_thresholds, start_tier


def _policy(**extra: Any) -> RoutingPolicy:
    body: dict[str, Any] = {"tiers": [{"pool": "a"}, {"pool": "b"}, {"pool": "c"}, {"pool": "s"}]}
    body.update(extra)
    return RoutingPolicy.model_validate(body)


def _tiers(steps: tuple[Step, ...]) -> list[tuple[int, ...]]:
    return [s.tiers for s in steps]


@pytest.mark.parametrize(
    ("difficulty", "tier"), [(0.0, 0), (0.29, 0), (0.3, 1), (0.6, 2), (0.95, 3), (1.0, 3)]
)
def test_difficulty_thresholds_pick_the_start_tier(difficulty: float, tier: int) -> None:
    assert start_tier(_policy(), difficulty, (0.3, 0.6, 0.9)) == tier


def test_no_difficulty_starts_at_fallback_and_says_so() -> None:
    plan = plan_route(_policy(fallback_tier=2), None, thresholds=(0.3, 0.6, 0.9))
    assert plan.first_tier == 2
    assert "no_difficulty" in plan.notes
    assert plan_route(_policy(), None).first_tier == 0


def test_route_only_plan_is_start_then_failover_upwards() -> None:
    plan = plan_route(_policy(), 0.5, thresholds=(0.3, 0.6, 0.9))
    assert not plan.cascade
    assert _tiers(plan.steps) == [(1,), (2,), (3,)]


def test_risk_flag_raises_the_start() -> None:
    plan = plan_route(_policy(risk_floor={"pii": 3}), 0.0, thresholds=(0.3, 0.6, 0.9), risk_flags={"pii"})
    assert _tiers(plan.steps) == [(3,)]
    assert "risk_floor" in plan.notes
    # An unknown flag changes nothing.
    assert plan_route(_policy(risk_floor={"pii": 3}), 0.0, risk_flags={"other"}).first_tier == 0


def test_saturated_tiers_are_skipped_but_never_the_strongest() -> None:
    pol = _policy(min_headroom=0.1)
    plan = plan_route(pol, 0.0, headroom={"a": 0.05, "b": 0.5, "s": 0.0})
    assert _tiers(plan.steps) == [(1,), (2,), (3,)]
    assert "headroom" in plan.notes


def _cascade(mode: str, max_escalations: int = 3, **extra: Any) -> RoutingPolicy:
    scorer = {"kind": "agreement", "mode": mode} if mode != "single" else {"kind": "trained"}
    return _policy(cascade={"scorers": [scorer], "max_escalations": max_escalations}, **extra)


def test_cascade_single_mode_is_one_tier_per_step() -> None:
    assert _tiers(plan_route(_cascade("single"), None).steps) == [(0,), (1,), (2,), (3,)]


def test_cascade_tiers_mode_pairs_cheap_tiers_and_ends_strong_alone() -> None:
    assert _tiers(plan_route(_cascade("tiers"), None).steps) == [(0, 1), (2,), (3,)]
    # Starting at tier 2 leaves a lone cheap tier first: nothing could agree with it, so it is skipped.
    assert _tiers(plan_route(_cascade("tiers"), 0.7, thresholds=(0.3, 0.6, 0.9)).steps) == [(3,)]


def test_cascade_samples_mode_calls_each_cheap_tier_twice() -> None:
    plan = plan_route(_cascade("samples", max_escalations=1), 0.0)
    assert plan.steps == (Step((Call(0, 0), Call(0, 1))), Step((Call(3),)))


def test_max_escalations_keeps_first_steps_and_the_strongest() -> None:
    assert _tiers(plan_route(_cascade("single", max_escalations=1), None).steps) == [(0,), (3,)]
    assert _tiers(plan_route(_cascade("single", max_escalations=0), None).steps) == [(3,)]


def test_streaming_route_only_mode_disables_the_cascade() -> None:
    pol = _policy(cascade={"scorers": [{"kind": "trained"}], "stream_mode": "route_only"})
    assert not plan_route(pol, None, streaming=True).cascade
    assert plan_route(pol, None, streaming=False).cascade


def test_latency_budget_drops_the_cheapest_steps() -> None:
    tiers = [{"pool": p, "typical_latency_ms": 1000} for p in ("a", "b", "c", "s")]
    pol = RoutingPolicy.model_validate(
        {"tiers": tiers, "cascade": {"scorers": [{"kind": "trained"}], "max_escalations": 3}}
    )
    plan = plan_route(pol, None, latency_budget_ms=2500)
    assert _tiers(plan.steps) == [(2,), (3,)]
    assert "latency_budget" in plan.notes
    assert len(plan_route(pol, None).steps) == 4  # no budget: nothing dropped


def test_resolve_thresholds_prefers_yaml_then_share_then_artifact() -> None:
    assert resolve_thresholds(_policy(difficulty={"thresholds": [0.1, 0.2, 0.3]}), (0.5, 0.6, 0.7)) == (
        0.1,
        0.2,
        0.3,
    )
    shared = _policy(difficulty={"target_strong_share": 0.25})
    assert resolve_thresholds(shared, None, quantile=lambda q: q) == (0.75, 0.75, 0.75)
    assert resolve_thresholds(_policy(), (0.5, 0.6, 0.7)) == (0.5, 0.6, 0.7)
    with pytest.raises(ValueError, match="2 cut points, the policy has 4 tiers"):
        resolve_thresholds(_policy(), (0.5, 0.6))
    with pytest.raises(ValueError, match="needs a router artifact"):
        resolve_thresholds(shared, None)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"tiers": []}, "at least 1"),
        ({"tiers": [{"pool": "a"}, {"pool": "a"}]}, "repeat"),
        ({"tiers": [{"pool": "a"}, {"pool": "b"}], "difficulty": {"thresholds": [0.5, 0.6]}}, "need 1"),
        ({"tiers": [{"pool": "a"}, {"pool": "b"}], "risk_floor": {"x": 5}}, "not a tier index"),
        (
            {
                "tiers": [
                    {"pool": "a", "price": {"input_per_mtok": 10, "output_per_mtok": 30}},
                    {"pool": "b", "price": {"input_per_mtok": 1, "output_per_mtok": 2}},
                ]
            },
            "cheap -> strong",
        ),
        ({"tiers": [{"pool": "a", "price": {"input_per_mtok": "inf", "output_per_mtok": 1}}]}, "finite"),
        ({"tiers": [{"pool": "a", "price": {"input_per_mtok": 1, "output_per_mtok": 1e309}}]}, "finite"),
        ({"tiers": [{"pool": "a"}], "cascade": {"scorers": [{"kind": "magic"}]}}, "kind"),
        ({"tiers": [{"pool": "a"}], "colour": 1}, "Extra inputs"),
    ],
)
def test_bad_policies_are_rejected(body: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RoutingPolicy.model_validate(body)
