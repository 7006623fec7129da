import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.config import Cascade as CascadeConfig
from router.cost_guard import (
    TOLERANCE,
    CostGuard,
    CostPrior,
    CostPriorError,
    _SlidingMax,
    cascade_key,
    read_priors,
    shipped_prior,
    write_priors,
)


def test_offset_rises_when_over_budget_and_returns_to_zero() -> None:
    guard = CostGuard(0.4, window=50)
    for _ in range(100):
        guard.record(0.8, 1.0, escalated=True)
    assert guard.threshold_offset() > 0.3
    for _ in range(2000):
        guard.record(0.05, 1.0, escalated=False)
    assert guard.threshold_offset() == 0.0


def test_closed_loop_keeps_share_under_budget() -> None:
    # Toy cascade: cheap costs 0.1, escalation 1.1; a request escalates when its score < 0.7 - offset.
    guard = CostGuard(0.4)
    for i in range(5000):
        score = (i * 0.6180339887) % 1.0
        escalated = score < 0.7 - guard.threshold_offset()
        guard.record(1.1 if escalated else 0.1, 1.0, escalated)
    share = guard.realized_cost_share()
    assert share is not None and share <= 0.4
    assert share > 0.3  # it spends the budget rather than starving quality


def test_stats() -> None:
    guard = CostGuard(1.0, window=4)
    assert guard.realized_cost_share() is None and guard.escalation_rate() is None
    for e in (True, False, True, True, True):
        guard.record(0.5, 1.0, e)
    assert guard.realized_cost_share() == pytest.approx(0.5)
    assert guard.escalation_rate() == 0.75 and guard.window_n() == 4
    assert guard.threshold_offset() == 0.0  # under budget: configured behaviour


def test_budget_range() -> None:
    with pytest.raises(ValueError):
        CostGuard(0.0)
    with pytest.raises(ValueError):
        CostGuard(1.5)


def test_window_figures_follow_the_last_window_exactly() -> None:
    # The guard keeps running counts: they must equal the figures recomputed from the last `window`.
    guard = CostGuard(0.5, window=7)
    history: list[tuple[float, float, bool]] = []
    for i in range(40):
        cost, strong, escalated = (i % 5) * 0.1, 1.0 + (i % 3), i % 4 != 0
        guard.record(cost, strong, escalated)
        history.append((cost, strong, escalated))
        last = history[-7:]
        assert guard.window_n() == len(last)
        assert guard.escalation_rate() == pytest.approx(sum(e for _, _, e in last) / len(last))
    assert guard.realized_cost_share() == pytest.approx(
        sum(c for c, _, _ in history) / sum(s for _, s, _ in history)
    )


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -0.1])
def test_a_cost_that_is_not_a_finite_non_negative_number_is_refused(bad: float) -> None:
    guard = CostGuard(0.4)
    for args in ((bad, 1.0), (0.1, bad)):
        with pytest.raises(ValueError):
            guard.record(*args, escalated=False)
    assert guard.window_n() == 0 and guard.realized_cost_share() is None


# --- Issue 45: from the first request (cold-start prior, budget ledger, the any-length bound) ---

PRIOR = CostPrior(
    offsets=(0.0, 0.1, 0.2, 0.3),
    cost_shares=(1.1, 0.6, 0.35, 0.14),
    escalation_rates=(1.0, 0.5, 0.25, 0.0),
    rows=500,
    data=("calibration.jsonl",),
)


def test_the_prior_gives_the_least_offset_that_meets_the_target() -> None:
    assert PRIOR.offset_for(0.6) == 0.1
    assert PRIOR.offset_for(0.38) == 0.2
    assert PRIOR.offset_for(1.2) == 0.0
    assert PRIOR.offset_for(0.1) == 0.3  # nothing meets it: the most the prior knows


def test_a_guard_starts_at_the_priors_offset_for_its_budget_less_margin() -> None:
    assert CostGuard(0.4, prior=PRIOR).initial_offset == 0.2  # 0.35 <= 0.38
    assert CostGuard(0.36, prior=PRIOR).initial_offset == 0.3  # 0.35 > 0.34: the next offset
    assert CostGuard(0.4).initial_offset == 0.0  # no prior: as configured
    guard = CostGuard(0.4, prior=PRIOR)
    for _ in range(3):
        guard.record(0.1, 1.0, escalated=False)
    # Three cheap requests pay for an escalation (0.4 x 4 - 0.3 >= 1.1), judged at the prior's offset
    # (nudged down by the controller: the share so far is under budget).
    assert 0.19 < guard.threshold_offset(1.1, 1.0) < 0.2


def test_the_first_request_never_escalates_when_that_would_break_the_budget() -> None:
    guard = CostGuard(0.4, prior=PRIOR)
    assert guard.threshold_offset(1.1, 1.0) == math.inf  # no credit yet
    assert guard.threshold_offset() == math.inf  # no worst case known either
    assert CostGuard(1.0).threshold_offset(1.0, 1.0) == 0.0  # a 100 % budget affords strong alone


def test_an_adversarial_run_of_expensive_escalations_stays_within_budget_after_every_request() -> None:
    # Every request's scorer rejects at any finite offset and each escalation costs 30x the cheap step,
    # with strong costs swinging over two orders of magnitude: only the ledger stands in the way.
    guard = CostGuard(0.4, prior=PRIOR)
    spent = strong = 0.0
    escalations = 0
    for i in range(3000):
        s = 10.0 ** ((i * 0.37) % 2.0)
        cheap = 0.1 * s
        escalate = guard.threshold_offset(cheap + s, s) != math.inf
        cost = cheap + s if escalate else cheap
        guard.record(cost, s, escalate)
        spent, strong, escalations = spent + cost, strong + s, escalations + escalate
        assert spent / strong <= 0.4 + 1e-12, i
    assert escalations > 0.25 * 3000  # it spends the budget: (0.4 - 0.1) / 1.0 of the rows, about
    assert spent / strong > 0.38


@given(
    budget=st.floats(0.05, 1.0),
    requests=st.lists(
        st.tuples(
            st.floats(1e-4, 1e3),  # strong-only cost of the request
            st.floats(0.0, 1.0),  # first step's cost as a share of (budget + TOLERANCE) of it
            st.floats(0.0, 5.0),  # what escalation adds, over the strong cost (extra samples, retries)
            st.floats(0.0, 1.0),  # the request's score; it escalates when below 0.7 - offset
        ),
        min_size=1,
        max_size=200,
    ),
    prior=st.booleans(),
)
@settings(max_examples=300, deadline=None)
def test_a_run_of_any_length_stays_within_budget_plus_tolerance(
    budget: float, requests: list[tuple[float, float, float, float]], prior: bool
) -> None:
    guard = CostGuard(budget, prior=PRIOR if prior else None)
    spent = strong = 0.0
    for s, first, extra, score in requests:
        cheap = first * (budget + TOLERANCE) * s
        escalation_cost = cheap + s * (1.0 + extra)
        escalate = score < 0.7 - guard.threshold_offset(escalation_cost, s)
        cost = escalation_cost if escalate else cheap
        guard.record(cost, s, escalate)
        spent, strong = spent + cost, strong + s
        assert spent <= (budget + TOLERANCE) * strong * (1 + 1e-9)


def test_without_costs_the_guard_weighs_the_largest_recent_request() -> None:
    guard = CostGuard(0.5, window=10)
    for _ in range(10):
        guard.record(0.1, 1.0, escalated=False)
    # Credit 0.5 * 11 - 1.0 = 4.5 against a worst case of 1.0 + 0.1: affordable.
    assert guard.threshold_offset() == 0.0
    guard.record(8.0, 4.0, escalated=True)  # one big escalated request: it is the new worst case
    # Credit 0.5 * (14 + 4) - 9.0 = 0 < 8.0: refused.
    assert guard.threshold_offset() == math.inf
    for _ in range(10):
        guard.record(0.1, 1.0, escalated=False)
    # The big request has left the window: the worst case is 1.1 again, credit 0.5 * 25 - 10 = 2.5
    # (the offset is the controller's again: raised a little by the overspend, not infinite).
    assert guard.threshold_offset() < 0.05


def test_the_window_maxima_equal_the_maxima_recomputed_from_the_window() -> None:
    window = 7
    maxima = _SlidingMax(window)
    values: list[float] = []
    for i in range(300):
        value = ((i * 0.618) % 1.0) * (1 + i % 5)
        maxima.push(value)
        values.append(value)
        assert maxima.value() == max(values[-window:]), i


def test_a_prior_survives_its_file_and_a_corrupt_one_is_refused(tmp_path: Path) -> None:
    config = CascadeConfig.model_validate({"scorers": [{"kind": "agreement", "mode": "tiers"}]})
    key = cascade_key(["a", "b", "s"], config)
    body = write_priors({key: {"alias": "auto", "tiers": ["a", "b", "s"], "prior": PRIOR.to_dict()}})
    (tmp_path / "p.json").write_text(body)
    assert shipped_prior(["a", "b", "s"], config, tmp_path / "p.json") == PRIOR
    assert shipped_prior(["a", "s"], config, tmp_path / "p.json") is None  # fitted for other tiers
    bad = json.loads(body)
    bad["priors"][key]["prior"]["offsets"] = [0.0, 0.2, 0.1, 0.3]
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(CostPriorError, match="increase"):
        shipped_prior(["a", "b", "s"], config, tmp_path / "bad.json")
    with pytest.raises(CostPriorError):
        read_priors("{}", "x")


def test_the_key_follows_what_decides_escalation_not_the_budget() -> None:
    base = {"scorers": [{"kind": "trained", "accept_threshold": 0.75}], "cost_budget": 0.4}
    key = cascade_key(["a", "s"], CascadeConfig.model_validate(base))
    assert key == cascade_key(["a", "s"], CascadeConfig.model_validate({**base, "cost_budget": 0.3}))
    other = {**base, "scorers": [{"kind": "trained", "accept_threshold": 0.7}]}
    assert key != cascade_key(["a", "s"], CascadeConfig.model_validate(other))
    assert key != cascade_key(["b", "s"], CascadeConfig.model_validate(base))


def test_the_shipped_priors_cover_the_routerbench_aliases() -> None:
    from gateway.config import load_policy

    gw = load_policy(str(Path(__file__).resolve().parents[3] / "config" / "cascade-routerbench.yaml"))
    for model in gw.models:
        rp = model.route.policy
        if rp is not None and rp.cascade is not None:
            prior = shipped_prior([t.pool for t in rp.tiers], rp.cascade)
            assert prior is not None, model.name
            assert prior.rows > 2000 and all(d.startswith("routerbench_") for d in prior.data)
