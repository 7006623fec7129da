"""What a request costs in dollars: reserved at its worst case before the call, settled to its cost.

Prices are USD per million tokens (a pool's `price`, a routed tier's, a LoRA adapter's), which is
exactly micro-dollars per token: a request's cost is computed once, as an integer number of
micro-dollars, at settlement (`Admit._settle`), and the same integer is charged to the dollar
budgets, counted in `llmgw_cost_usd_total` (per pool, divided by 10^6) and written to the spend
ledger, so the three sum to the same figure.

The reservation is the most the request can cost: its input estimate and its granted output (every
multiplier, a cascade's calls included) at the highest input and output price of any pool or adapter
its alias may reach. An alias without any price costs nothing (unknown is not zero for the metrics,
which then count nothing; a dollar budget cannot limit what has no price, and config validation warns).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from gateway.config import Policy
from router.config import Price


@dataclass(frozen=True, slots=True)
class Spend:
    """A request's cost in micro-dollars, and its parts per pool (a cascade's calls on several pools)."""

    micro: int
    parts: tuple[tuple[str, int], ...]


NOTHING = Spend(0, ())
NO_USD = (0, 0.0)  # an alias without a price: no dollars reserved


def micro(price: Price, input_tokens: int, output_tokens: int, cached: int = 0) -> int:
    """Micro-dollars of a usage; `cached` of the input tokens at the cached-input price, if any."""
    cost = input_tokens * price.input_per_mtok + output_tokens * price.output_per_mtok
    if cached and price.cached_input_per_mtok is not None:
        cost -= cached * (price.input_per_mtok - price.cached_input_per_mtok)
    return round(cost)


class Pricing:
    def __init__(self, policy: Policy, hosted: Callable[[str], Price | None] | None = None) -> None:
        """`hosted`: the price of a hosted model the policy gives none (`engine: litellm` pools:
        LiteLLM's bundled cost map, gateway.upstream.hosted.bundled_price)."""
        pool_price = {
            p.name: p.price
            if p.price is not None or hosted is None or p.engine != "litellm"
            else hosted(p.model)
            for p in policy.pools
        }
        # The price of each (alias, pool); None = no price configured for it.
        self.prices: dict[tuple[str, str], Price | None] = {}
        for m in policy.models:
            if m.route.policy is not None:
                for t in m.route.policy.tiers:
                    self.prices[(m.name, t.pool)] = t.price or pool_price.get(t.pool)
            else:  # one pool, or a speculative alias's two
                for pool in m.route.pools:
                    self.prices[(m.name, pool)] = pool_price.get(pool)
        # A LoRA adapter's price overrides its pool's (pools[].lora.adapters[].price).
        self.adapter_prices: dict[tuple[str, str], Price | None] = {
            (p.name, a.name): a.price or p.price
            for p in policy.pools
            for a in (p.lora.adapters if p.lora is not None else ())
        }
        # Per alias, the highest input and output price it may be charged at (micro-dollars per token).
        self.worst: dict[str, tuple[float, float]] = {}
        for (alias, pool), price in self.prices.items():
            candidates = [price, *(ap for (p, _), ap in self.adapter_prices.items() if p == pool)]
            for c in candidates:
                if c is None:
                    continue
                w_in, w_out = self.worst.get(alias, (0.0, 0.0))
                self.worst[alias] = (max(w_in, c.input_per_mtok), max(w_out, c.output_per_mtok))

    def reserve(self, alias: str, input_tokens: int, output_tokens: int) -> int:
        """The most a request of `alias` can cost (micro-dollars, rounded up)."""
        w = self.worst.get(alias)
        if w is None:
            return 0
        return math.ceil(input_tokens * w[0] + output_tokens * w[1])

    def admission(self, alias: str, input_tokens: int) -> tuple[int, float]:
        """What an admission of `alias` reserves in dollars: its input at the worst price (micro-dollars,
        rounded up) and the micro-dollars per output token its output is reserved at."""
        w = self.worst.get(alias)
        return (math.ceil(input_tokens * w[0]), w[1]) if w is not None else NO_USD

    def output_rate(self, alias: str) -> float:
        """Micro-dollars per output token at the alias's worst price (a stream's top-up)."""
        w = self.worst.get(alias)
        return w[1] if w is not None else 0.0

    def spent(
        self,
        model: str,
        pool: str,
        adapter: str | None,
        input_tokens: int,
        output_tokens: int,
        calls: list[tuple[str, float]] | None = None,
        cached: int = 0,
    ) -> Spend:
        """The cost of what a request used: a cascade's priced calls (`calls`, USD each), else its
        usage at the price of the tier (or adapter) that served it."""
        if calls is not None:
            parts = tuple((p, round(usd * 1_000_000)) for p, usd in calls)
            return Spend(sum(m for _, m in parts), parts)
        if not input_tokens and not output_tokens:
            return NOTHING
        price = (
            self.prices.get((model, pool)) if adapter is None else self.adapter_prices.get((pool, adapter))
        )
        if price is None:
            return NOTHING
        m = micro(price, input_tokens, output_tokens, cached)
        return Spend(m, ((pool, m),))
