"""A speculative alias (`models[].route.speculative`): per request, its speculative or its plain route.

The snapshot is read from the two `ReplicaPool`s (what the scraper last saw, and this gateway's own
in-flight counts) and handed to the pure `router.speculative.choose_pool`; nothing here waits on I/O.
The batch per replica is the larger of the scraped running count and this gateway's in-flight count.
With `learn`, the switch point is where the two pools' scraped TPOT-vs-batch curves cross
(`learned_switch_point`), the configured `switch_batch` until they do.

Every decision is counted in `llmgw_spec_route_decisions_total{model,pool,reason}`, and the switch
point in effect is the gauge `llmgw_spec_route_switch_batch{model}` (docs/design/027).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.config import Model, SloClass
from gateway.config_route import SpeculativeRoute
from gateway.routing.route import Route
from pools.picker import eligible
from pools.pool import ReplicaPool
from pools.tpot_curve import expected_tpot
from router.speculative import SpecRule, SpecSnapshot, Why, choose_pool, learned_switch_point


class SpecMetrics:
    """The rule's families, on the gateway's registry (built once per app)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.decisions = Counter(
            "llmgw_spec_route_decisions",
            "Requests of speculative aliases by the pool chosen and why (memory_bound: speculate; "
            "compute_bound, low_acceptance, unavailable, plain_faster: the plain pool)",
            ["model", "pool", "reason"],
            registry=registry,
        )
        self.switch_batch = Gauge(
            "llmgw_spec_route_switch_batch",
            "Running batch per replica at which a speculative alias switches to its plain pool "
            "(configured, or learned from the pools' TPOT vs batch)",
            ["model"],
            registry=registry,
        )


def batch_of(pool: ReplicaPool, now: float) -> float:
    """Running batch per replica: the larger of the scraped running count (sees every gateway, up to a
    scrape interval late) and this gateway's own in-flight count (current), as the picker's load."""
    if not pool.replicas:
        return 0.0
    stale = pool.balancing.stale_after_s
    per = []
    for r in pool.replicas:
        load = r.fresh_load(now, stale)
        per.append(max(float(r.inflight), load.running if load is not None else 0.0))
    return sum(per) / len(per)


Curves = tuple[Mapping[int, float], Mapping[int, float]]  # TPOT by batch bin: speculative, plain


def snapshot(
    pool: ReplicaPool, plain: ReplicaPool, now: float, cfg: SpeculativeRoute, curves: Curves | None = None
) -> SpecSnapshot:
    """What the rule needs to know: the speculative pool's state (and, learning, both pools' curves;
    `curves` when the caller has them already)."""
    batch = batch_of(pool, now)
    figures = pool.spec_figures(now)
    # A handful of drafts says little: until the window holds enough, the floor does not apply.
    known = figures is not None and figures.increase.draft_tokens >= cfg.min_draft_tokens
    tpot = plain_tpot = None
    if cfg.learn:
        spec_curve, plain_curve = curves or (pool.tpot_curve(), plain.tpot_curve())
        tpot = expected_tpot(spec_curve, batch)
        plain_tpot = expected_tpot(plain_curve, batch_of(plain, now))
    return SpecSnapshot(
        batch=batch,
        acceptance=figures.acceptance_ratio if known and figures is not None else None,
        available=bool(eligible(pool.replicas, pool.saturation, now, pool.balancing.stale_after_s, ())),
        tpot=tpot,
        plain_tpot=plain_tpot,
    )


class SpeculativeAlias:
    def __init__(
        self,
        model: Model,
        routes: tuple[Route, Route],
        slo: SloClass | None,
        metrics: SpecMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        cfg = model.route.speculative
        assert cfg is not None
        self.config: SpeculativeRoute = cfg
        self.name = model.name
        self.speculative, self.plain = routes
        self._latency_sensitive = slo is not None and (slo.ttft_ms is not None or slo.tpot_ms is not None)
        self._clock = clock
        self._metrics = metrics
        # Every reason from 0 on the pool it sends to (memory_bound: speculative; the rest: plain).
        self._counts = {
            why: metrics.decisions.labels(
                self.name, self._route(why is Why.MEMORY_BOUND).pool.config.name, why
            )
            for why in Why
        }
        metrics.switch_batch.labels(self.name).set_function(self.switch_batch)

    def switch_batch(self) -> float:
        """The switch point in effect: learned (with `learn`, once the curves cross) or configured."""
        return self._switch(self._curves())

    def _curves(self) -> Curves | None:
        if not self.config.learn:
            return None
        return self.speculative.pool.replicas.tpot_curve(), self.plain.pool.replicas.tpot_curve()

    def _switch(self, curves: Curves | None) -> float:
        learned = learned_switch_point(*curves) if curves is not None else None
        return learned if learned is not None else self.config.switch_batch

    def choose(self, allowed: frozenset[str] = frozenset()) -> Route:
        """The route of this request; `allowed`: the pools the caller's key may use (empty: any)."""
        if allowed:  # a key limited to one of the two pools gets that one (check_pools refused neither)
            if self.speculative.pool.config.name not in allowed:
                return self.plain
            if self.plain.pool.config.name not in allowed:
                return self.speculative
        cfg = self.config
        curves = self._curves()  # once per request: the switch point and the snapshot both read them
        rule = SpecRule(
            self._switch(curves), cfg.min_acceptance, cfg.throughput_share, self._latency_sensitive
        )
        snap = snapshot(self.speculative.pool.replicas, self.plain.pool.replicas, self._clock(), cfg, curves)
        choice = choose_pool(snap, rule)
        self._counts[choice.why].inc()
        return self._route(choice.speculative)

    def _route(self, speculative: bool) -> Route:
        return self.speculative if speculative else self.plain
