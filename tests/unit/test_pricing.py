"""A request's cost in micro-dollars (gateway.budget.pricing): the worst case it reserves, the cost it
settles, cached input, adapters, cascades; and the cached-token count read from a pool's usage."""

from __future__ import annotations

from gateway.budget.pricing import Pricing, micro
from gateway.budget.usage import cached_of
from gateway.config import Policy
from router.config import Price


def _policy() -> Policy:
    return Policy.model_validate(
        {
            "pools": [
                {
                    "name": "small",
                    "model": "m",
                    "endpoints": {"static": ["http://a:1"]},
                    "price": {"input_per_mtok": 0.5, "output_per_mtok": 1.5, "cached_input_per_mtok": 0.05},
                },
                {
                    "name": "large",
                    "model": "m",
                    "endpoints": {"static": ["http://b:1"]},
                    "price": {"input_per_mtok": 5, "output_per_mtok": 15},
                },
                {"name": "free", "model": "m", "endpoints": {"static": ["http://c:1"]}},
            ],
            "models": [
                {"name": "small", "route": {"pool": "small"}},
                {"name": "free", "route": {"pool": "free"}},
                {
                    "name": "auto",
                    "route": {
                        "policy": {"tiers": [{"pool": "small"}, {"pool": "large"}], "fallback_tier": 0}
                    },
                },
            ],
        }
    )


def test_micro_dollars_are_tokens_times_the_price_per_million() -> None:
    p = Price(input_per_mtok=0.5, output_per_mtok=1.5, cached_input_per_mtok=0.05)
    assert micro(p, 1000, 100) == 650  # 500 + 150
    assert micro(p, 1000, 100, cached=800) == 290  # 200 x 0.5 + 800 x 0.05 + 150
    assert (
        micro(Price(input_per_mtok=0.5, output_per_mtok=1.5), 1000, 100, cached=800) == 650
    )  # no cached rate


def test_the_reservation_is_the_worst_price_the_alias_may_reach() -> None:
    pricing = Pricing(_policy())
    assert pricing.reserve("small", 1000, 100) == 650
    assert pricing.reserve("auto", 1000, 100) == 5000 + 1500  # the large tier's prices
    assert pricing.output_rate("auto") == 15
    assert pricing.reserve("free", 1000, 100) == 0 and pricing.output_rate("free") == 0
    assert pricing.reserve("unknown", 1000, 100) == 0


def test_the_settled_cost_is_the_answering_tier_or_the_cascade_calls() -> None:
    pricing = Pricing(_policy())
    small = pricing.spent("auto", "small", None, 1000, 100, cached=1000)
    assert (small.micro, small.parts) == (200, (("small", 200),))  # 1000 x 0.05 + 150
    cascade = pricing.spent("auto", "large", None, 9, 9, [("small", 0.000650), ("large", 0.0065)])
    assert cascade.micro == 650 + 6500 and cascade.parts == (("small", 650), ("large", 6500))
    assert pricing.spent("free", "free", None, 10, 10).micro == 0
    assert pricing.spent("small", "small", None, 0, 0).parts == ()


def test_cached_tokens_are_read_only_when_sane() -> None:
    assert cached_of({"prompt_tokens_details": {"cached_tokens": 64}}, 100) == 64
    for usage in (
        None,
        {},
        {"prompt_tokens_details": None},
        {"prompt_tokens_details": {"cached_tokens": 101}},  # more than the input charged
        {"prompt_tokens_details": {"cached_tokens": -1}},
        {"prompt_tokens_details": {"cached_tokens": True}},
        {"prompt_tokens_details": {"cached_tokens": "5"}},
    ):
        assert cached_of(usage, 100) == 0, usage


def test_a_hosted_pool_without_a_price_is_priced_from_litellms_bundled_map() -> None:
    from gateway.upstream.hosted import bundled_price

    mini = bundled_price("openai/gpt-4o-mini")
    assert mini is not None
    assert (mini.input_per_mtok, mini.output_per_mtok) == (0.15, 0.6)
    assert mini.cached_input_per_mtok == 0.075
    assert bundled_price("no-such-provider/no-such-model") is None
    policy = Policy.model_validate(
        {
            "pools": [{"name": "hosted", "engine": "litellm", "model": "openai/gpt-4o-mini"}],
            "models": [{"name": "mini", "route": {"pool": "hosted"}}],
        }
    )
    assert Pricing(policy).reserve("mini", 1_000_000, 0) == 0  # without the map: no price
    assert Pricing(policy, bundled_price).reserve("mini", 1_000_000, 1_000_000) == 750_000
