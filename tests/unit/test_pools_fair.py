"""pools.fair: the hold queue's order -- VTC between tenants, minimum shares between bands, the bound."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from pools.config import Fairness
from pools.fair import FairQueue, Flow, band_shares, band_weights, lifted, next_tenant, tenant_of


def drain(q: FairQueue[str], n: int) -> list[str]:
    """Dispatch `n` heads; each is charged its estimate only (no corrections)."""
    out = []
    for _ in range(n):
        e = q.head()
        assert e is not None
        q.pop(e)
        out.append(e.item)
    return out


def test_a_lone_tenant_is_served_in_arrival_order() -> None:
    q: FairQueue[str] = FairQueue({})
    for i in range(5):
        q.push(f"a{i}", 0, "a", 1.0, 100)
    assert drain(q, 5) == ["a0", "a1", "a2", "a3", "a4"] and len(q) == 0


def test_a_tenant_arriving_behind_a_flood_is_served_next_not_last() -> None:
    q: FairQueue[str] = FairQueue({})
    for i in range(50):
        q.push(f"a{i}", 0, "a", 1.0, 100)
    drain(q, 10)  # a is ahead by 1000 tokens, but b was not backlogged: b is lifted, not owed 1000
    for i in range(3):
        q.push(f"b{i}", 0, "b", 1.0, 100)
    # lifted to a's counter: a tie, which the longer wait wins; then they alternate
    assert drain(q, 6) == ["a10", "b0", "a11", "b1", "a12", "b2"]


@pytest.mark.parametrize(
    ("a", "b", "n", "served_a"),
    [
        ((2.0, 100), (1.0, 100), 300, 200),  # weights share tokens in proportion
        ((1.0, 1000), (1.0, 100), 110, 10),  # counted in tokens, not requests
    ],
)
def test_shares_follow_weights_in_tokens(
    a: tuple[float, int], b: tuple[float, int], n: int, served_a: int
) -> None:
    q: FairQueue[str] = FairQueue({})
    for _ in range(n):
        q.push("a", 0, "a", *a)
        q.push("b", 0, "b", *b)
    served = drain(q, n)
    assert served.count("a") == served_a and served.count("b") == n - served_a


def test_settled_usage_corrects_the_estimate() -> None:
    q: FairQueue[str] = FairQueue({})
    for _ in range(20):
        q.push("a", 0, "a", 1.0, 10)
        q.push("b", 0, "b", 1.0, 10)
    first = q.head()
    assert first is not None and first.item == "a"
    q.pop(first)
    q.charge(0, "a", 1.0, 990)  # a's answer was long: it has had 1000 tokens
    assert drain(q, 10) == ["b"] * 10  # b catches up before a is served again (b at 100 of 1000)


def test_a_timed_out_request_leaves_without_a_charge() -> None:
    q: FairQueue[str] = FairQueue({})
    a = q.push("a", 0, "a", 1.0, 500)
    q.push("b", 0, "b", 1.0, 100)
    q.push("c", 0, "c", 1.0, 100)
    q.remove(a)
    q.remove(a)  # twice is harmless
    assert len(q) == 2 and drain(q, 2) == ["b", "c"]


def test_an_empty_queue_starts_a_new_busy_period_with_nothing_owed() -> None:
    q: FairQueue[str] = FairQueue({})
    for _ in range(10):
        q.push("a", 0, "a", 1.0, 100)
    drain(q, 10)
    period = q.period
    q.push("b", 0, "b", 1.0, 100)
    q.push("a", 0, "a", 1.0, 100)
    assert q.period == period + 1
    q.charge(0, "z", 1.0, 10**6)  # a tenant not in this period: ignored
    assert drain(q, 2) == ["b", "a"]


def test_strict_priority_without_a_share() -> None:
    q: FairQueue[str] = FairQueue({})
    for _ in range(20):
        q.push("std", 0, "s", 1.0, 100)
        q.push("prem", 1, "p", 1.0, 100)
    assert drain(q, 20) == ["prem"] * 20 and drain(q, 20) == ["std"] * 20


def test_a_lower_band_keeps_its_minimum_share_of_tokens() -> None:
    q: FairQueue[str] = FairQueue({0: 0.1})
    for _ in range(1000):
        q.push("prem", 1, "p", 1.0, 100)
        q.push("std", 0, "s", 1.0, 100)
    served = drain(q, 1000)
    assert 99 <= served.count("std") <= 101
    # the background band (no share) waits for both
    q.push("bg", -1, "x", 1.0, 1)
    assert "bg" not in drain(q, 10)


def test_a_lower_band_alone_takes_everything() -> None:
    q: FairQueue[str] = FairQueue({0: 0.1})
    for _ in range(10):
        q.push("std", 0, "s", 1.0, 100)
    assert drain(q, 10) == ["std"] * 10


def test_a_band_back_from_idle_is_not_owed_its_idle_time() -> None:
    q: FairQueue[str] = FairQueue({0: 0.1})
    for _ in range(200):
        q.push("prem", 1, "p", 1.0, 100)
    drain(q, 100)
    for _ in range(20):
        q.push("std", 0, "s", 1.0, 100)
    assert drain(q, 20).count("std") <= 3


def _simulate(
    weights: dict[str, float], slots: int, rng: random.Random, steps: int = 4000, big: int = 1000
) -> float:
    """Two always-backlogged tenants, `slots` requests in flight, sizes up to `big` (input estimate
    charged at dispatch, output when a random in-flight request ends). Returns the largest observed
    difference of weighted real service over any interval starting after both became backlogged."""
    q: FairQueue[tuple[str, int, int]] = FairQueue({})
    served = dict.fromkeys(weights, 0.0)  # real tokens of dispatched requests, counted whole

    def push(t: str) -> None:
        total = rng.randint(1, big)
        inp = rng.randint(1, total)
        q.push((t, inp, total), 0, t, weights[t], inp)

    for t in weights:
        for _ in range(slots + 2):
            push(t)
    inflight: list[tuple[str, int, int]] = []
    diffs = []
    f, g = weights
    for _ in range(steps):
        while len(inflight) < slots:
            e = q.head()
            assert e is not None
            q.pop(e)
            t, inp, total = e.item
            served[t] += total
            inflight.append(e.item)
            push(t)  # stays backlogged
        diffs.append(served[f] / weights[f] - served[g] / weights[g])
        done = inflight.pop(rng.randrange(len(inflight)))
        q.charge(0, done[0], weights[done[0]], done[2] - done[1])
    return max(diffs) - min(diffs)


@pytest.mark.parametrize("w", [(1.0, 1.0), (3.0, 1.0), (1.0, 5.0)])
def test_the_fairness_bound_with_one_request_in_flight(w: tuple[float, float]) -> None:
    weights = {"f": w[0], "g": w[1]}
    spread = _simulate(weights, 1, random.Random(7))
    assert spread <= 2 * max(1000 / w[0], 1000 / w[1])


@pytest.mark.parametrize("slots", [2, 4, 8])
def test_the_fairness_bound_with_k_requests_in_flight(slots: int) -> None:
    weights = {"f": 2.0, "g": 1.0}
    spread = _simulate(weights, slots, random.Random(slots))
    assert spread <= 2 * (slots + 1) * 1000 / 1.0


def test_fifo_would_break_the_bound() -> None:
    """The bound is not vacuous: arrival order lets a flood run ahead without limit."""
    q: FairQueue[str] = FairQueue({})
    for _ in range(200):
        q.push("a", 0, "", 1.0, 1000)  # fairness off: one tenant for everyone
    q.push("b", 0, "", 1.0, 1000)
    assert drain(q, 200).count("b") == 0


def test_tenant_identity_and_weight() -> None:
    f = Fairness(by="app", tier_weights={"premium": 4}, org_weights={"acme": 2})
    assert tenant_of(Flow("acme", "web", "premium"), f) == ("acme/web", 2.0)
    assert tenant_of(Flow("other", "web", "premium"), f) == ("other/web", 4.0)
    assert tenant_of(Flow("other", "web", "standard"), Fairness()) == ("other", 1.0)
    assert tenant_of(Flow("acme", "web"), Fairness(enabled=False)) == ("", 1.0)
    assert tenant_of(None, Fairness()) == ("", 1.0)


def test_band_shares_and_weights() -> None:
    assert band_shares(Fairness()) == {0: 0.05}
    assert band_shares(Fairness(enabled=False)) == {}
    assert band_shares(Fairness(min_share={"standard": 0.2, "background": 0})) == {0: 0.2}
    assert band_weights([1, 0, -1], {0: 0.2}) == {1: 0.8, 0: 0.2}
    assert band_weights([0, -1], {0: 0.2, -1: 0.1}) == {0: 0.9, -1: 0.1}


def test_pure_helpers() -> None:
    assert next_tenant({"a": 5.0, "b": 5.0}, {"a": 9, "b": 3}) == "b"
    assert lifted(None, [3.0, 7.0], 0.0) == 3.0 and lifted(10.0, [3.0], 0.0) == 10.0
    assert lifted(1.0, [], 4.0) == 4.0


def test_fairness_config_is_strict() -> None:
    with pytest.raises(ValidationError):
        Fairness(min_share={"standard": 0.6, "background": 0.5})
    with pytest.raises(ValidationError):
        Fairness.model_validate({"weights": {}})
    with pytest.raises(ValidationError):
        Fairness.model_validate({"min_share": {"premium": 0.1}})
    with pytest.raises(ValidationError):
        Fairness(tier_weights={"premium": 0})
