"""A routed alias with `target_strong_share` learns its cut from the traffic it sees (live calibration)."""

from __future__ import annotations

import asyncio
import random
from typing import Any, cast

from gateway.routing.aliases import RoutedAlias, _live_calibration
from router.cascade import Cascade
from router.config import RoutingPolicy


class _Scores:
    """Stands in for DifficultyModel.score: difficulties of a domain the artifact never saw."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    async def score(self, text: str) -> float:
        return 0.8 + 0.2 * self._rng.random()  # all above the artifact's cut


def _alias(calibration: Any) -> RoutedAlias:
    policy = RoutingPolicy.model_validate(
        {
            "tiers": [{"pool": "small"}, {"pool": "large"}],
            "difficulty": {"target_strong_share": 0.3, "calibration": calibration},
        }
    )
    return RoutedAlias(
        name="auto",
        policy=policy,
        pools=("small", "large"),
        thresholds=(0.5,),  # the artifact's cut: would send everything strong
        cascade=Cascade.from_config(None, None),
        difficulty=cast(Any, _Scores(7)),
        fallback=None,
        logprobs=False,
        calibration=_live_calibration(policy),
    )


async def _strong_share(alias: RoutedAlias, n: int) -> float:
    starts = []
    for _ in range(n):
        planned = await alias.plan([{"role": "user", "content": "q"}], None, (), False)
        starts.append(planned.plan.start_tier)
    return sum(1 for s in starts if s == 1) / n


def test_the_live_cut_follows_the_target_share_on_unseen_traffic() -> None:
    alias = _alias({"window": 200, "min_samples": 50})
    assert alias.calibration is not None
    asyncio.run(_strong_share(alias, 400))  # warm up: the artifact's cut, then the live one
    share = asyncio.run(_strong_share(alias, 400))
    assert 0.22 <= share <= 0.38, share
    assert alias.calibration.cut() is not None


def test_without_live_calibration_the_artifact_cut_stands() -> None:
    alias = _alias(None)
    assert alias.calibration is None
    assert asyncio.run(_strong_share(alias, 100)) == 1.0


def _guarded(price: dict[str, float] | None) -> RoutedAlias:
    from gateway.routing.aliases import _cost_guard

    tiers: list[dict[str, Any]] = [{"pool": "small"}, {"pool": "large"}]
    if price is not None:
        tiers = [
            {"pool": "small", "price": {"input_per_mtok": 0.1, "output_per_mtok": 0.1}},
            {"pool": "large", "price": price},
        ]
    policy = RoutingPolicy.model_validate(
        {"tiers": tiers, "cascade": {"scorers": [{"kind": "logprob"}], "cost_budget": 0.4}}
    )
    return RoutedAlias(
        name="auto",
        policy=policy,
        pools=("small", "large"),
        thresholds=None,
        cascade=Cascade.from_config(policy.cascade, None),
        difficulty=None,
        fallback=None,
        logprobs=True,
        guard=_cost_guard(policy),
    )


def test_a_finished_cascade_feeds_the_cost_guard_against_strong_only_cost() -> None:
    from router.plan import Answer, Call

    alias = _guarded({"input_per_mtok": 1.0, "output_per_mtok": 1.0})
    assert alias.guard is not None
    cheap = Answer(Call(0), "a", input_tokens=100, output_tokens=100, cost_usd=0.00002)
    strong = Answer(Call(1), "b", input_tokens=100, output_tokens=100, cost_usd=0.0002)
    alias.settle_cost([cheap, strong], strong, escalated=True)  # 0.00022 of 0.0002
    share = alias.guard.realized_cost_share()
    assert share is not None and abs(share - 1.1) < 1e-9
    assert alias.guard.escalation_rate() == 1.0


def test_without_prices_the_cost_guard_is_not_fed() -> None:
    from router.plan import Answer, Call

    alias = _guarded(None)
    assert alias.guard is not None
    answer = Answer(Call(0), "a", input_tokens=10, output_tokens=10)
    alias.settle_cost([answer], answer, escalated=False)
    assert alias.guard.realized_cost_share() is None and alias.guard.window_n() == 0
