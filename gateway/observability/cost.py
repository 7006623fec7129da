"""Cost per request, per org and pool, and cost per accepted output.

Prices are USD per million input / output tokens: a pool's `price`, or for a routed alias its tier's
price (which defaults to the pool's). A request costs its settled usage at that price; a cascade
costs every call it made, each at its tier's price and counted on that call's pool, failed calls
and rejected answers included (they were paid for). Pools without a price add nothing (unknown is
not zero). The cost is computed once, at settlement (gateway.budget.pricing), in micro-dollars: the
dollar budgets, these counters and the spend ledger get the same figure.

Accepted outputs: every answer delivered with status 200 counts as accepted when it is delivered;
for a routed cascade that is the answer its scorers accepted. Feedback (`POST /v1/feedback`) can
later reject it, which counts it in `llmgw_rejected_outputs_total`. So

    cost per accepted output = rate(llmgw_cost_usd_total) / (rate(llmgw_accepted_outputs_total)
                                                            - rate(llmgw_rejected_outputs_total))

which is what the dashboard plots; `llmgw_cost_per_accepted_output_usd{org}` is the same ratio over
this process's lifetime, computed at scrape time. Labels are org and pool: orgs are created by
operators (policy or admin API), so children are created on first use and kept.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.config import Policy
from gateway.observability.lean import Counter, CounterChild


@dataclass(slots=True)
class _OrgPool:
    """Pre-labelled children of one (org, pool)."""

    cost: CounterChild
    accepted: CounterChild
    rejected: CounterChild
    tokens_in: CounterChild
    tokens_out: CounterChild


@dataclass(slots=True)
class _Totals:
    """Lifetime sums of one org, for the scrape-time ratio (plain floats: no locks needed in asyncio)."""

    cost: float = 0.0
    accepted: int = 0
    rejected: int = 0


class CostMetrics:
    def __init__(self, policy: Policy, registry: CollectorRegistry) -> None:
        self._cost = Counter(
            "llmgw_cost", "Spend in USD at the configured pool prices, by org and pool", ["org", "pool"],
            registry=registry, unit="usd",
        )  # fmt: skip
        self._accepted = Counter(
            "llmgw_accepted_outputs",
            "Answers delivered (status 200; a cascade's accepted answer), by org and answering pool",
            ["org", "pool"],
            registry=registry,
        )
        self._rejected = Counter(
            "llmgw_rejected_outputs",
            "Delivered answers that feedback later rejected, by org and pool",
            ["org", "pool"],
            registry=registry,
        )
        # Per tenant: what the alias/pool counters cannot say (whose tokens, whose 429s).
        self._tokens = Counter(
            "llmgw_org_tokens",
            "Tokens settled per org (what its budgets were charged), by pool and direction",
            ["org", "pool", "direction"],
            registry=registry,
        )
        self._answers = Counter(
            "llmgw_org_requests", "Requests per org by HTTP status (429 = budgets)", ["org", "code"],
            registry=registry,
        )  # fmt: skip
        self._answer_children: dict[tuple[str, int], CounterChild] = {}
        self.feedback = Counter(
            "llmgw_feedback",
            "Feedback received, by pool and verdict",
            ["pool", "accepted"],
            registry=registry,
        )
        self._children: dict[tuple[str, str], _OrgPool] = {}
        self.totals: dict[str, _Totals] = {}
        registry.register(_PerAcceptedCollector(self.totals))

    def _of(self, org: str, pool: str) -> _OrgPool:
        c = self._children.get((org, pool))
        if c is None:
            labels = (org, pool)
            c = _OrgPool(
                self._cost.labels(*labels),
                self._accepted.labels(*labels),
                self._rejected.labels(*labels),
                self._tokens.labels(org, pool, "input"),
                self._tokens.labels(org, pool, "output"),
            )
            self._children[(org, pool)] = c
            self.totals.setdefault(org, _Totals())
        return c

    def count(self, org: str, pool: str, status: int, input_tokens: int, output_tokens: int) -> None:
        """One finished request of `org`: its status, and its settled tokens when it had any."""
        a = self._answer_children.get((org, status))
        if a is None:
            a = self._answer_children[(org, status)] = self._answers.labels(org, str(status))
        a.inc()
        if input_tokens or output_tokens:
            c = self._of(org, pool)
            c.tokens_in.inc(input_tokens)
            c.tokens_out.inc(output_tokens)

    def charge(self, org: str, pool: str, usd: float) -> None:
        self._of(org, pool).cost.inc(usd)
        self.totals[org].cost += usd

    def accept(self, org: str, pool: str) -> None:
        self._of(org, pool).accepted.inc()
        self.totals[org].accepted += 1

    def reject(self, org: str, pool: str) -> None:
        self._of(org, pool).rejected.inc()
        self.totals[org].rejected += 1


class _PerAcceptedCollector(Collector):
    def __init__(self, totals: dict[str, _Totals]) -> None:
        self._totals = totals

    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily(
            "llmgw_cost_per_accepted_output_usd",
            "Spend divided by accepted outputs (delivered minus rejected by feedback), this process's "
            "lifetime, by org; absent until an org has an accepted output",
            labels=["org"],
        )
        for org, t in self._totals.items():
            kept = t.accepted - t.rejected
            if kept > 0:
                g.add_metric([org], t.cost / kept)
        yield g
