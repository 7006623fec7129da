from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from eval.routing.data import TierOutcomes
from eval.routing.metrics import (
    apgr,
    apgr_decile_thresholds,
    assign_by_shares,
    cpt,
    evaluate_plan,
    gap_recovered,
    oracle_cheapest,
    pareto_front,
    report,
    routing_curve,
    single_model_points,
)

# Four prompts: the weak model loses twice, ties once, wins once.
# gains (strong - weak) = [1, 1, 0, -1]; perf_strong = 0.75, perf_weak = 0.5, gap = 0.25.
STRONG = np.array([1.0, 1.0, 1.0, 0.0])
WEAK = np.array([0.0, 0.0, 1.0, 1.0])


def test_oracle_curve_apgr_and_cpt_by_hand() -> None:
    curve = routing_curve(STRONG - WEAK, STRONG, WEAK)
    # PGR at x = 0, .25, .5, .75, 1 is cumulative gain / total gain = [0, 1, 2, 2, 1].
    np.testing.assert_allclose(curve.pgr, [0.0, 1.0, 2.0, 2.0, 1.0])
    np.testing.assert_allclose(curve.performance, [0.5, 0.75, 1.0, 1.0, 0.75])
    assert apgr(curve) == pytest.approx(0.25 * (0.5 + 1.5 + 2.0 + 1.5))  # 1.375
    assert cpt(curve, 0.5) == pytest.approx(0.125)
    assert cpt(curve, 0.8) == pytest.approx(0.2)


def test_perfect_inverse_router_by_hand() -> None:
    curve = routing_curve(WEAK - STRONG, STRONG, WEAK)
    np.testing.assert_allclose(curve.pgr, [0.0, -1.0, -1.0, 0.0, 1.0])
    assert apgr(curve) == pytest.approx(-0.375)
    # The curve first reaches 0.5 on its last segment (0.75 -> 1.0, PGR 0 -> 1).
    assert cpt(curve, 0.5) == pytest.approx(0.875)


def test_reversed_difficulty_apgrs_sum_to_one() -> None:
    # Routing the top x by -d is routing the bottom 1-x by d to the weak model, so
    # PGR_{-d}(x) + PGR_d(1-x) = 1 and the two areas sum to 1; tie-averaging keeps that exact.
    rng = np.random.default_rng(7)
    d = rng.integers(0, 5, 300).astype(float)
    s = rng.random(300)
    w = rng.random(300)
    assert apgr(routing_curve(d, s, w)) + apgr(routing_curve(-d, s, w)) == pytest.approx(1.0)


def test_constant_difficulty_is_exactly_the_random_router() -> None:
    rng = np.random.default_rng(1)
    s = rng.integers(0, 2, 101).astype(float)
    w = rng.integers(0, 2, 101).astype(float)
    w[0], s[0] = 0.0, 1.0  # make sure there is a gap
    curve = routing_curve(np.zeros(101), s, w)
    assert apgr(curve) == pytest.approx(0.5)
    assert cpt(curve, 0.5) == pytest.approx(0.5)
    assert cpt(curve, 0.8) == pytest.approx(0.8)


def test_seeded_random_routers_average_near_half() -> None:
    rng = np.random.default_rng(3)
    s = (rng.random(2000) < 0.8).astype(float)
    w = (rng.random(2000) < 0.6).astype(float)
    values = [apgr(routing_curve(np.random.default_rng(seed).random(2000), s, w)) for seed in range(20)]
    assert abs(float(np.mean(values)) - 0.5) < 0.03


def _exact_curve(order: list[int], s: np.ndarray, w: np.ndarray) -> np.ndarray:
    # Strictly decreasing difficulty along `order`: no ties, so no averaging is involved.
    d = np.empty(len(order))
    d[order] = np.arange(len(order), 0, -1)
    return routing_curve(d, s, w).performance


def test_ties_equal_the_average_over_all_orders_inside_the_block() -> None:
    s = np.array([1.0, 0.0, 1.0, 1.0, 0.0])
    w = np.array([0.0, 1.0, 0.0, 1.0, 0.0])
    d = np.array([2.0, 1.0, 1.0, 1.0, 0.0])  # rows 1..3 tie
    tied = routing_curve(d, s, w).performance
    perms = [[0, *p, 4] for p in itertools.permutations([1, 2, 3])]
    brute = np.mean([_exact_curve(p, s, w) for p in perms], axis=0)
    np.testing.assert_allclose(tied, brute)


def test_input_order_does_not_change_tied_results() -> None:
    rng = np.random.default_rng(5)
    d = rng.integers(0, 3, 50).astype(float)
    s = rng.random(50)
    w = rng.random(50)
    perm = rng.permutation(50)
    assert apgr(routing_curve(d, s, w)) == pytest.approx(apgr(routing_curve(d[perm], s[perm], w[perm])))


def test_no_gap_returns_nan_with_a_reason() -> None:
    s = np.array([1.0, 0.0, 1.0])
    w = np.array([0.0, 1.0, 1.0])
    curve = routing_curve([0.3, 0.2, 0.1], s, w)
    assert math.isnan(apgr(curve)) and math.isnan(cpt(curve, 0.5))
    assert curve.degenerate_reason is not None and "same mean quality" in curve.degenerate_reason
    rep = report("r", curve)
    assert rep.note == curve.degenerate_reason and math.isnan(rep.apgr)
    # Quality at a share is still meaningful without a gap.
    assert rep.at_shares[0.5][0] == pytest.approx(curve.performance_at(0.5))
    assert math.isnan(apgr_decile_thresholds([0.3, 0.2, 0.1], s, w))


@pytest.mark.parametrize(
    ("d", "s", "w", "match"),
    [
        ([], [], [], "zero rows"),
        ([0.1, 0.2], [1.0], [0.0, 1.0], "expected 2"),
        ([math.nan], [1.0], [0.0], "NaN"),
        ([[0.1]], [1.0], [0.0], "one-dimensional"),
    ],
)
def test_bad_inputs_are_rejected(d: list[float], s: list[float], w: list[float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        routing_curve(d, s, w)


def test_shares_outside_unit_interval_are_rejected() -> None:
    curve = routing_curve(STRONG - WEAK, STRONG, WEAK)
    with pytest.raises(ValueError, match="strong share"):
        curve.performance_at(1.5)


def test_quality_at_share_interpolates_between_prompts() -> None:
    curve = routing_curve(STRONG - WEAK, STRONG, WEAK)
    # Half-way between one and two strong calls: one call plus a coin flip on the second.
    assert curve.performance_at(0.375) == pytest.approx(0.875)
    assert report("oracle", curve, shares=(0.25,)).at_shares[0.25][:2] == pytest.approx((0.75, 1.0))


def test_cost_curve_runs_from_weak_only_to_strong_only() -> None:
    sc = np.array([10.0, 10.0, 10.0, 10.0])
    wc = np.array([1.0, 2.0, 1.0, 2.0])
    curve = routing_curve(STRONG - WEAK, STRONG, WEAK, sc, wc)
    assert curve.cost is not None
    assert curve.cost[0] == pytest.approx(6.0) and curve.cost[-1] == pytest.approx(40.0)
    # First strong call replaces one of the two tied-difficulty rows (weak cost 1 or 2): expected 1.5.
    assert curve.cost_at(0.25) == pytest.approx(6.0 - 1.5 + 10.0)
    assert math.isnan(routing_curve(STRONG - WEAK, STRONG, WEAK).cost_at(0.5))


def test_decile_apgr_matches_exact_when_every_knot_is_a_decile() -> None:
    rng = np.random.default_rng(11)
    d = rng.permutation(10).astype(float)
    s = np.array([1, 1, 0, 1, 1, 1, 0, 1, 1, 1], dtype=float)
    w = np.array([0, 1, 0, 0, 1, 0, 1, 1, 0, 1], dtype=float)
    assert apgr_decile_thresholds(d, s, w) == pytest.approx(apgr(routing_curve(d, s, w)))
    assert apgr_decile_thresholds(np.zeros(10), s, w) == pytest.approx(0.5)


def _tiers() -> TierOutcomes:
    # Three rows, tiers cheap -> strong. Row 0: all right; row 1: only mid and strong; row 2: only strong.
    score = np.array([[1.0, 1.0, 1.0], [0.0, 1.0, 1.0], [0.0, 0.0, 1.0]])
    cost = np.array([[1.0, 2.0, 10.0], [1.0, 2.0, 10.0], [1.0, 2.0, 10.0]])
    return TierOutcomes(models=("cheap", "mid", "strong"), score=score, cost=cost)


def test_plan_quality_and_cascade_cost() -> None:
    t = _tiers()
    routed = evaluate_plan(t, [0, 1, 2])
    assert routed.quality == pytest.approx(1.0) and routed.cost_usd == pytest.approx(13.0)
    assert routed.tier_share == pytest.approx((1 / 3, 1 / 3, 1 / 3))
    # A cascade that tried cheap on every row and escalated rows 1 and 2 pays for every call.
    called = [[True, False, False], [True, True, False], [True, False, True]]
    cascade = evaluate_plan(t, [0, 1, 2], called)
    assert cascade.cost_usd == pytest.approx(1.0 + 3.0 + 11.0)
    strong_only = single_model_points(t)["strong"]
    assert cascade.relative_to(strong_only) == pytest.approx((1.0, 0.5))


def test_plan_validation() -> None:
    t = _tiers()
    with pytest.raises(ValueError, match="answering tier"):
        evaluate_plan(t, [0, 1, 2], [[True, False, False]] * 3)
    with pytest.raises(ValueError, match="tier indices"):
        evaluate_plan(t, [0, 1, 3])
    unpriced = TierOutcomes(models=t.models, score=t.score, cost=None)
    assert math.isnan(evaluate_plan(unpriced, [2, 2, 2]).cost_usd)


def test_oracle_cheapest_picks_the_cheapest_best_tier() -> None:
    np.testing.assert_array_equal(oracle_cheapest(_tiers()), [0, 1, 2])


def test_assign_by_shares_sends_easiest_rows_to_the_cheapest_tier() -> None:
    d = np.array([0.9, 0.1, 0.5, 0.3])
    np.testing.assert_array_equal(assign_by_shares(d, [0.5, 0.25, 0.25]), [2, 0, 1, 0])
    with pytest.raises(ValueError, match="sum to 1"):
        assign_by_shares(d, [0.5, 0.4])


def test_gap_recovered_and_pareto_front() -> None:
    assert gap_recovered(0.9, 0.8, 1.0) == pytest.approx(0.5)
    assert math.isnan(gap_recovered(0.9, 0.8, 0.8))
    points = [(1.0, 0.5), (2.0, 0.4), (3.0, 0.9), (3.0, 0.8), (0.5, 0.2)]
    assert pareto_front(points) == [4, 0, 2]
