"""The alias -> route table, and a routed alias's decision for one request.

A direct alias has one `Route` (its settings on its pool). A routed alias (`model: auto`) has one
Route per tier; `Routes.decide` asks its routing policy for a plan (difficulty off the event loop,
then a pure plan: `gateway.routing.aliases.RoutedAlias.plan`) and says whether the relay serves it
itself (route only) or the cascade runner does.

Pool restrictions (a key's `pools`, or its tier's `tenancy.tier_pools`): `check_pools` refuses, before
the cache and any call, a direct alias on a pool the key may not use and a routed alias none of whose
tiers it may use (403 naming the alias). A routed alias's plan is then cut to the allowed tiers
(`router.policy.plan_route(allowed_tiers=...)`): a hard prompt from a key allowed only the small pool
is answered by the small pool, whatever its wording makes the router choose.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from time import perf_counter
from typing import TYPE_CHECKING, Any

from gateway.config import Model, Policy
from gateway.config_lora import ADAPTER_SEPARATOR
from gateway.edge.exchange import Kind, RequestHeaders
from gateway.errors import InvalidRequestError, ModelNotFoundError, PermissionDeniedError
from gateway.observability.metrics import Metrics
from gateway.routing.aliases import RoutedAlias
from gateway.routing.learning import Learning
from gateway.routing.route import Route
from gateway.routing.speculative import SpecMetrics, SpeculativeAlias
from gateway.upstream.pool_client import PoolClient
from pools.slo import SloAsk
from router.cost_guard import MISCALIBRATED_MIN_REQUESTS
from router.plan import Call, Plan, Step

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from router.calibration import LiveCalibration
    from router.cost_guard import CostGuard


@dataclass(frozen=True, slots=True)
class Decided:
    """A routed request's plan, with one Route per tier of its alias."""

    alias: RoutedAlias
    routes: tuple[Route, ...]
    plan: Plan
    difficulty: float | None
    prompt: str  # what the scorers see: the last user turn (as in the offline replay)
    headers: list[tuple[bytes, bytes]]
    direct: bool  # route only, served by the relay on the first tier (no runner)
    embedding: npt.NDArray[np.float32] | None = None  # with an outcome memory: what outcomes are keyed by
    explore: bool = False  # drawn for exploration (if a cheap tier answers it)
    # A success policy's per-tier predicted success (cheap -> strong) and the tolerance it used; the
    # header carries only `difficulty` (1 - the cheapest tier's), the span and request log carry these.
    success: tuple[float, ...] | None = None
    tolerance: float | None = None

    @property
    def calls(self) -> int:
        """Calls the plan may make at most (what admission reserves for)."""
        return sum(len(s.calls) for s in self.plan.steps) if self.plan.cascade else 1

    @property
    def first(self) -> Route:
        return self.routes[self.plan.first_tier]


class Routes:
    def __init__(
        self,
        policy: Policy,
        pools: dict[str, PoolClient],
        metrics: Metrics,
        routed: dict[str, RoutedAlias] | None = None,
    ) -> None:
        self._metrics = metrics
        # Learning needs the metrics, so it is bound here (the aliases are built before them).
        routed = {name: _with_learning(ra, metrics) for name, ra in (routed or {}).items()}
        self._direct = {
            m.name: _direct_route(m, pools, metrics, policy) for m in policy.models if m.route.pool
        }
        # `<alias>:<adapter>` of a direct alias on a LoRA pool: one Route per adapter of its pool.
        self._adapted = {
            (name, a.name): dataclasses.replace(route, adapter=a)
            for name, route in self._direct.items()
            if route.adapter is None and (lora := route.pool.config.lora) is not None
            for a in lora.adapters
        }
        self._owners = {
            a.name: p.name for p in policy.pools for a in (p.lora.adapters if p.lora is not None else ())
        }
        # Routed aliases: one Route per tier (the alias's settings on that tier's pool).
        self._routed = {
            name: (
                ra,
                tuple(
                    Route(model=m, pool=pools[p], metrics=metrics.by_alias[(name, p)], slo=slo_ask(policy, m))
                    for p in ra.pools
                ),
            )
            for name, ra in routed.items()
            for m in policy.models
            if m.name == name
        }
        for name, ra in routed.items():
            metrics.router_fallback.labels(name).set(1 if ra.fallback else 0)
            if ra.calibration is not None:
                _export_calibration(metrics, name, ra.calibration)
            if ra.guard is not None:
                _export_guard(metrics, name, ra.guard)
        self._pools: dict[str, tuple[str, ...]] = {m.name: m.route.pools for m in policy.models}
        self._speculative = _speculative_aliases(policy, pools, metrics)

    def learning(self, alias: str) -> Learning | None:
        """A routed alias's learning state (None: it learns nothing, or it is not routed)."""
        entry = self._routed.get(alias)
        return entry[0].learning if entry is not None else None

    def learnings(self) -> dict[str, Learning]:
        return {name: ra.learning for name, (ra, _) in self._routed.items() if ra.learning is not None}

    def calibrations(self) -> dict[str, LiveCalibration]:
        return {name: ra.calibration for name, (ra, _) in self._routed.items() if ra.calibration is not None}

    def split_adapter(self, name: str) -> tuple[str, str | None]:
        """`<alias>:<adapter>` of a direct alias on a LoRA pool -> (alias, adapter); any other name is
        the alias itself (a configured alias whose name has a colon is matched whole first)."""
        if name in self._pools:
            return name, None
        alias, sep, adapter = name.rpartition(ADAPTER_SEPARATOR)
        route = self._direct.get(alias) if sep else None
        if route is None or route.adapter is not None or route.pool.config.lora is None:
            return name, None
        return alias, adapter

    def direct(
        self, alias: str, allowed: frozenset[str] = frozenset(), adapter: str | None = None
    ) -> Route | None:
        """The route of a direct alias (with `adapter`: of that adapter of its pool), or of a
        speculative one (chosen now, among the pools in `allowed`; empty: any); None for a routed
        (or unknown) one."""
        if adapter is not None:
            return self._adapted.get((alias, adapter)) or self._no_adapter(alias, adapter)
        route = self._direct.get(alias)
        if route is None and (spec := self._speculative.get(alias)) is not None:
            return spec.choose(allowed)
        return route

    def _no_adapter(self, alias: str, adapter: str) -> Route:
        """Refuse `<alias>:<adapter>` naming an adapter its pool does not serve: another pool's is the
        caller's mistake (400), any other is a model that does not exist (404)."""
        pool = self._direct[alias].pool.config.name
        owner = self._owners.get(adapter)
        if owner is not None:
            raise InvalidRequestError(
                f"the adapter '{adapter}' is served by pool '{owner}', not by pool '{pool}' of the "
                f"model '{alias}'",
                param="model",
                code="adapter_not_on_pool",
            )
        raise ModelNotFoundError(
            f"The model '{alias}{ADAPTER_SEPARATOR}{adapter}' does not exist: pool '{pool}' serves no "
            f"adapter '{adapter}'.",
            param="model",
        )

    def any_route(self, alias: str) -> Route:
        """A route whose settings validate a request for `alias` (a routed alias's first tier)."""
        route = self._direct.get(alias)
        if route is None and (spec := self._speculative.get(alias)) is not None:
            return spec.speculative
        return route if route is not None else self._routed[alias][1][0]

    def others(self, alias: str, route: Route, allowed: frozenset[str]) -> tuple[Route, ...]:
        """The alias's routes on other pools the key may use (`allowed`; empty: any), in tier order:
        where `on_unattainable: reroute` may send a request (a direct alias has none)."""
        entry = self._routed.get(alias)
        spec = self._speculative.get(alias)
        routes = entry[1] if entry is not None else (spec.speculative, spec.plain) if spec is not None else ()
        return tuple(
            r for r in routes if r.pool is not route.pool and (not allowed or r.pool.config.name in allowed)
        )

    def check_pools(self, alias: str, allowed: frozenset[str]) -> None:
        """Refuse (403) an alias that no pool the key may use serves (`allowed` empty: any pool)."""
        pools = self._pools.get(alias)
        if allowed and pools is not None and not any(p in allowed for p in pools):
            raise _pools_refused(alias, pools, allowed)

    async def decide(
        self,
        kind: Kind,
        alias: str,
        body: dict[str, Any],
        h: RequestHeaders,
        allowed: frozenset[str] = frozenset(),
        org: str = "",
    ) -> Decided:
        """A routed alias's plan for this request (difficulty off the event loop, then a pure plan),
        over the tiers whose pools the key may use (`allowed`; empty: all)."""
        entry = self._routed.get(alias)
        if entry is None:
            raise ModelNotFoundError.of(alias)
        routed, routes = entry
        if kind is not Kind.CHAT and kind is not Kind.COMPLETIONS:
            raise InvalidRequestError(
                f"the routed model '{alias}' serves chat and text completions only", param="model"
            )
        tiers = frozenset(i for i, p in enumerate(routed.pools) if p in allowed) if allowed else None
        if tiers is not None and not tiers:
            raise _pools_refused(alias, routed.pools, allowed)
        budget = _latency_budget(h.latency_budget)
        risk = [f.strip() for f in h.risk.decode("latin-1").split(",") if f.strip()] if h.risk else []
        t = perf_counter()
        stream = bool(body.get("stream"))
        chat = kind is Kind.CHAT
        messages = body.get("messages") if chat else _as_messages(body.get("prompt"))
        planned = await routed.plan(messages, budget, risk, stream, tiers, org)
        plan, difficulty = planned.plan, planned.difficulty
        if not chat:
            plan = _first_tier_only(plan)  # the cascade and its judge read chat answers
        self._metrics.router_seconds.labels(alias).observe(perf_counter() - t)
        headers: list[tuple[bytes, bytes]] = []
        if difficulty is not None:
            headers.append((b"x-llmgw-difficulty", f"{difficulty:.4f}".encode()))
        if routed.fallback is not None:
            headers.append((b"x-llmgw-route", b"fallback"))
        # The relay itself serves a route-only plan when there is nothing to fail over to, and streams
        # (their bytes are relayed as they come); everything else goes through the cascade runner,
        # whose judge also moves a route-only plan to its next tier when a whole pool fails.
        direct = not plan.cascade and (len(plan.steps) == 1 or stream)
        if direct:
            tier = routes[plan.first_tier]
            headers.append((b"x-llmgw-tier", tier.pool.config.name.encode()))
            self._metrics.router_decisions.labels(alias, tier.pool.config.name, "false").inc()
        learning = routed.learning
        explore = learning is not None and chat and learning.explores(plan.first_tier)
        return Decided(
            routed,
            routes,
            plan,
            difficulty,
            planned.prompt,
            headers,
            direct,
            planned.embedding,
            explore,
            planned.success,
            planned.tolerance,
        )


def slo_ask(policy: Policy, m: Model) -> SloAsk | None:
    """What admission does with the alias's requests a saturated pool would hold past their SLO's TTFT
    (pools.slo); None: queue them (no class, no TTFT target, or `on_unattainable: queue`)."""
    c = policy.slo_classes.get(m.slo_class) if m.slo_class is not None else None
    if c is None or c.ttft_ms is None or c.on_unattainable == "queue":
        return None
    return SloAsk(c.ttft_ms / 1000.0, c.on_unattainable)


def _direct_route(m: Model, pools: dict[str, PoolClient], metrics: Metrics, policy: Policy) -> Route:
    """A direct alias's route; with `route.adapter`, served by that adapter of its pool."""
    assert m.route.pool is not None
    pool = pools[m.route.pool]
    lora = pool.config.lora
    adapter = lora.adapter(m.route.adapter) if lora is not None and m.route.adapter else None
    by_alias = metrics.by_alias[(m.name, m.route.pool)]
    return Route(model=m, pool=pool, metrics=by_alias, adapter=adapter, slo=slo_ask(policy, m))


def _speculative_aliases(
    policy: Policy, pools: dict[str, PoolClient], metrics: Metrics
) -> dict[str, SpeculativeAlias]:
    """The speculative aliases (models[].route.speculative); their families exist without any too."""
    spec_metrics = SpecMetrics(metrics.registry)
    out = {}
    for m in (m for m in policy.models if m.route.speculative is not None):
        ask = slo_ask(policy, m)
        a, b = (
            Route(model=m, pool=pools[p], metrics=metrics.by_alias[(m.name, p)], slo=ask)
            for p in m.route.pools
        )
        slo = policy.slo_classes.get(m.slo_class) if m.slo_class is not None else None
        out[m.name] = SpeculativeAlias(m, (a, b), slo, spec_metrics)
    return out


def _as_messages(prompt: Any) -> list[dict[str, Any]]:
    """A completions prompt as the one user turn the router scores (a list: its first prompt; token
    ids have no text, which scores as no difficulty)."""
    if isinstance(prompt, list) and prompt:
        prompt = prompt[0]
    return [{"role": "user", "content": prompt if isinstance(prompt, str) else ""}]


def _first_tier_only(plan: Plan) -> Plan:
    """`plan` served route-only by its first tier (text completions: no cascade, no tier failover)."""
    if len(plan.steps) == 1 and not plan.cascade:
        return plan
    first = Step((Call(plan.first_tier),))
    return Plan(steps=(first,), cascade=False, start_tier=plan.start_tier, notes=(*plan.notes, "route_only"))


def _pools_refused(alias: str, pools: tuple[str, ...], allowed: frozenset[str]) -> PermissionDeniedError:
    return PermissionDeniedError(
        f"The API key is not allowed to use model '{alias}': it may be served only by the pools "
        f"{sorted(allowed)}, and '{alias}' is served by {list(pools)}.",
        param="model",
        code="pool_not_allowed",
    )


def _latency_budget(value: bytes | None) -> float | None:
    """x-llmgw-latency-budget-ms as a number of milliseconds (None when absent)."""
    if value is None:
        return None
    try:
        budget = float(value)
    except ValueError:
        budget = -1.0
    if not budget > 0:
        raise InvalidRequestError("x-llmgw-latency-budget-ms must be a positive number of milliseconds")
    return budget


def _with_learning(ra: RoutedAlias, metrics: Metrics) -> RoutedAlias:
    """The alias with its Learning, when it has an outcome memory or exploration."""
    rp = ra.policy
    memory = rp.difficulty.memory if rp.difficulty is not None and ra.difficulty is not None else None
    if memory is None and rp.explore is None:
        return ra
    dim = ra.difficulty.encoder.identity.dim if ra.difficulty is not None else 0  # no model: no memory
    learning = Learning(ra.name, rp, dim, metrics)
    return dataclasses.replace(ra, learning=learning)


def _export_calibration(metrics: Metrics, alias: str, cal: LiveCalibration) -> None:
    """Read at scrape time: nothing on the request path."""

    def share() -> float:
        value = cal.realized_strong_share()
        return math.nan if value is None else value

    def cut() -> float:
        value = cal.cut()
        return math.nan if value is None else value

    metrics.router_strong_share.labels(alias).set_function(share)
    metrics.router_live_cut.labels(alias).set_function(cut)


def _export_guard(metrics: Metrics, alias: str, guard: CostGuard) -> None:
    def cost() -> float:
        value = guard.realized_cost_share()
        return math.nan if value is None else value

    def escalated() -> float:  # NaN until the window is long enough to call the scorer miscalibrated
        value = guard.escalation_rate()
        return math.nan if value is None or guard.window_n() < MISCALIBRATED_MIN_REQUESTS else value

    metrics.router_cost_share.labels(alias).set_function(cost)
    metrics.router_escalation_rate.labels(alias).set_function(escalated)
