"""Admission of a request against its token budgets, and everything that follows from it.

The relay calls `Admissions.admit` once per request (one limiter call = one Redis round trip),
gets a `Ticket`, and hands the ticket back at the end with the usage the pool reported
(`settle`, fire-and-forget: the Redis backend carries it on its next admission, the failover
limiter retries what Redis could not take). Streams without a client
`max_tokens` hold only `stream_chunk_tokens` of output at a time and `top_up` as tokens arrive.
In-flight tickets are renewed in one batched call every `lease_s / 3`, so a lease only runs out
when this process is gone.

The same module turns decisions into OpenAI's `x-ratelimit-*` headers (for the tightest level) and
a refusal into a 429 that names the level and dimension that refused. A request that can never fit
(its cost in a dimension over the tightest enforced limit there: `over_limit`, checked here before
any round trip; or over what a day / month quota has left, as the backend reports) is a 429
`request_too_large` that a retry cannot help: no Retry-After, `x-should-retry: false`.

Each admission carries its pool's failure mode (`modes`, pool -> fail_open / fail_closed, built from
the policy by `gateway.parts`): the failover limiter decides per call.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from time import monotonic, perf_counter
from typing import Any
from urllib.parse import unquote

from gateway.budget.early import EarlyRefusals
from gateway.budget.headers import dollars, rate_limit_headers
from gateway.budget.overrides import BudgetOverrides
from gateway.errors import RateLimitError, RequestOverLimitError, UpstreamUnavailableError
from gateway.observability.metrics import Metrics
from ratelimit.errors import BackendUnavailable, EveryMinute
from ratelimit.model import (
    USD_DIMENSIONS,
    Admission,
    Ceilings,
    Decision,
    Dimension,
    Level,
    Limiter,
    LimitsConfig,
    OnBackendError,
    Overrides,
    Priority,
    Reservation,
    Rule,
    Tenant,
    ceilings,
    over_limit,
)
from ratelimit.rules import NO_OVERRIDES, known_tags, request_cost, request_rules, resolve_rules, usage_cost
from ratelimit.windows import SETTLE_RETRY_MS

NO_POOL = "-"  # the pool of a request that reached none (an unknown model)
_QUOTA_DIMS = frozenset((Dimension.TOKENS_DAY, Dimension.TOKENS_MONTH, *USD_DIMENSIONS))
_BUDGET_NAME = {
    Dimension.USD_DAY: "usd_per_day",
    Dimension.USD_MONTH: "usd_per_month",
    Dimension.USD_TOTAL: "usd_total",
}
MAX_BUDGET_ORGS = 1000  # org label values of llmgw_budget_used_ratio (orgs are operator-made, but bounded)
log = logging.getLogger("llmgw.ratelimit")
_DIM_TEXT = {
    Dimension.REQUESTS: "requests per minute",
    Dimension.INPUT_TOKENS: "input tokens per minute",
    Dimension.OUTPUT_TOKENS: "output tokens per minute",
    Dimension.TOKENS: "tokens per minute",
    Dimension.CONCURRENT: "concurrent requests",
    Dimension.TOKENS_DAY: "tokens per day",
    Dimension.TOKENS_MONTH: "tokens per month",
    Dimension.USD_DAY: "USD per day",
    Dimension.USD_MONTH: "USD per month",
    Dimension.USD_TOTAL: "USD in total (never reset)",
}


def _describe(rule: Rule) -> str:
    # A user's scope holds its org and app (escaped): name the level only, never echo the id back.
    where = (
        "global"
        if rule.scope == "*"
        else "end user"
        if rule.level is Level.USER
        else f"{rule.level.value} '{rule.scope}'"
    )
    return f"{where} on {_DIM_TEXT[rule.dimension]}"


def too_large(rule: Rule, amount: int, limit: int, left: int | None = None) -> RequestOverLimitError:
    """The 429 of a request over a limit (`left` None) or over what a quota has left."""
    unit = _DIM_TEXT[rule.dimension].split(" ")[0] if rule.dimension in USD_DIMENSIONS else None
    if unit is None:
        unit = _DIM_TEXT[rule.dimension].split(" per ")[0]
    fmt = _amount(rule.dimension)
    if left is None:
        why = f"it needs {fmt(amount)} {unit}, more than the limit of {fmt(limit)}: it can never be admitted"
    else:
        why = f"it needs {fmt(amount)} {unit}, and {fmt(left)} of the limit of {fmt(limit)} are left" + (
            " (it never resets)" if rule.dimension is Dimension.USD_TOTAL else " until the quota resets"
        )
    err = RequestOverLimitError(f"Request too large for {_describe(rule)}: {why}.")
    err.param = f"{rule.level.value}.{rule.dimension.value}"
    return err


def _amount(dim: Dimension) -> Callable[[int], str]:
    """How a limit's amounts are written in messages: micro-dollars as USD, counts as they are."""
    return dollars if dim in USD_DIMENSIONS else str


@dataclass(frozen=True, slots=True)
class _RuleSet:
    """A key's resolved rules on a pool, their ceilings, and whether any is a dollar budget of its org
    (then each admission updates `llmgw_budget_used_ratio`)."""

    rules: tuple[Rule, ...]
    limits: Ceilings
    org_usd: bool

    @classmethod
    def of(cls, rules: tuple[Rule, ...], priority: Priority) -> _RuleSet:
        org_usd = any(r.level is Level.ORG and r.dimension in USD_DIMENSIONS for r in rules)
        return cls(rules, ceilings(rules, priority), org_usd)


@dataclass(slots=True)
class Ticket:
    """An admitted request's hold on its budgets."""

    reservation: Reservation
    input_estimate: int
    output_reserved: int
    output_granted: int  # what the pool may generate (the alias's default/cap applied)
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    settled: bool = False
    usd_rate: float = 0.0  # micro-dollars per output token a top-up reserves (the alias's worst price)

    @property
    def topping_up(self) -> bool:
        return self.output_reserved < self.output_granted


class Admissions:
    def __init__(
        self,
        config: LimitsConfig,
        limiter: Limiter,
        metrics: Metrics,
        modes: Mapping[str, OnBackendError] | None = None,
        overrides: BudgetOverrides | None = None,
    ) -> None:
        """`modes`: pool -> its failure mode; a pool not in it (the cache's) gets the limiter's own.
        `overrides`: budgets changed at run time (the admin API), on top of `config`'s."""
        self._config = config
        self.overrides = overrides
        self._rules_version = 0  # the overrides' version the rule cache was built from
        self._budget_children: dict[tuple[str, Dimension], Any] = {}
        self._limiter = limiter
        self._metrics = metrics
        self._modes = dict(modes or {})
        self._rules: OrderedDict[tuple[str, str, str], _RuleSet] = OrderedDict()
        self._report = EveryMinute(log)
        # Hot-path children, labelled once.
        self._allowed = metrics.limit_decisions.labels("all", "all", "allowed")
        self._degraded = metrics.limit_decisions.labels("all", "all", "degraded")
        self._reserved = metrics.limit_tokens.labels("reserved")
        self._settled = metrics.limit_tokens.labels("settled")
        spec = config.speculative
        # Overlapping admission with the pool call only pays when admission is a network round trip.
        self._speculate = spec.enabled and config.backend == "redis"
        self._min_headroom = spec.min_headroom
        self._memory_s = spec.memory_s
        self._max_inflight = spec.max_inflight
        self._recent: OrderedDict[str, float] = OrderedDict()  # key id -> until when it may speculate
        self._spec_admitted = metrics.limit_speculation.labels("admitted")
        self._spec_refused = metrics.limit_speculation.labels("refused")
        self._active: dict[str, Reservation] = {}
        self._early = EarlyRefusals(_describe)

    @property
    def stream_chunk_tokens(self) -> int:
        return self._config.stream_chunk_tokens

    def rules_for(self, tenant: Tenant, pool: str) -> tuple[Rule, ...]:
        """Resolved rules, cached (merging limit overrides is far slower than a dict lookup).

        Keyed by key id: a key's record (tier, overrides) never changes; revoking makes a new key.
        """
        return self._rule_set(tenant, pool).rules

    def _rule_set(self, tenant: Tenant, pool: str) -> _RuleSet:
        overrides = self._overrides()
        key = (tenant.key_id, tenant.tier, pool)
        found = self._rules.get(key)
        if found is None:
            rules = resolve_rules(self._config, tenant, pool, overrides)
            found = self._rules[key] = _RuleSet.of(rules, tenant.priority)
            if len(self._rules) > 10_000:
                self._rules.popitem(last=False)
        return found

    def _overrides(self) -> Overrides:
        """The run-time overrides; a changed version empties the rule cache (one attribute read else)."""
        if self.overrides is None:
            return NO_OVERRIDES
        current = self.overrides.current
        if current.version != self._rules_version:
            self._rules.clear()
            self._rules_version = current.version
        return current

    def request_rules(self, tenant: Tenant, tags: tuple[str, ...], end_user: str | None) -> tuple[Rule, ...]:
        """The rules a request's tags and end user add to its key's (none for most requests)."""
        if not tags and end_user is None:
            return ()
        return request_rules(self._config, tenant, tags, end_user, self._overrides())

    def known_tags(self) -> Mapping[str, object]:
        return known_tags(self._config, self._overrides())

    async def admit(
        self,
        request_id: str,
        tenant: Tenant,
        pool: str,
        input_estimate: int,
        output_granted: int,
        stream_topup: bool,
        usd: tuple[int, float] = (0, 0.0),
        extra: tuple[Rule, ...] = (),
    ) -> Ticket:
        """`usd`: (the worst case of its input estimate in micro-dollars, micro-dollars per output
        token); `extra`: the rules of its tags and end user (`request_rules`)."""
        output = min(output_granted, self._config.stream_chunk_tokens) if stream_topup else output_granted
        found = self._rule_set(tenant, pool)
        rules, limits = found.rules, found.limits
        if extra:
            rules = rules + extra
            limits = ceilings(rules, tenant.priority)
        usd_in, usd_rate = usd
        cost = request_cost(
            input_estimate, output, usd_in + math.ceil(output * usd_rate) if usd_in or usd_rate else 0
        )
        if (over := over_limit(limits, cost)) is not None:
            rule, limit, amount = over
            self._metrics.limit_decisions.labels(rule.level.value, rule.dimension.value, "too_large").inc()
            raise too_large(rule, amount, limit)
        admission = Admission(request_id, rules, cost, tenant.priority, self._modes.get(pool))
        t = perf_counter()
        try:
            decision = await self._limiter.admit(admission)
        except BackendUnavailable:
            self._metrics.limiter_latency.observe(perf_counter() - t)
            self._metrics.limit_decisions.labels("all", "all", "backend_unavailable").inc()
            raise UpstreamUnavailableError(
                "rate limiter unavailable (fail_closed): try again shortly", code="rate_limiter_unavailable"
            ) from None
        self._metrics.limiter_latency.observe(perf_counter() - t)
        self._count(decision)
        if found.org_usd:
            self._budget_gauges(decision)
        if self._speculate:
            self._remember_headroom(tenant.key_id, decision)
        headers = rate_limit_headers(decision.states)
        if not decision.allowed or decision.reservation is None:
            self._early.remember(tenant.key_id, decision)
            raise self._refusal(decision, headers, cost)
        self._active[request_id] = decision.reservation
        self._reserved.inc(input_estimate + output)
        return Ticket(
            decision.reservation, input_estimate, output, output_granted, headers, usd_rate=usd_rate
        )

    def _budget_gauges(self, decision: Decision) -> None:
        """`llmgw_budget_used_ratio` of the org's dollar budgets, as this admission saw them."""
        for state in decision.states:
            rule = state.rule
            if rule.level is not Level.ORG or rule.dimension not in USD_DIMENSIONS or rule.limit <= 0:
                continue
            child = self._budget_children.get((rule.scope, rule.dimension))
            if child is None:
                if len(self._budget_children) >= MAX_BUDGET_ORGS * 3:
                    continue
                org = unquote(rule.scope)
                child = self._budget_children[(rule.scope, rule.dimension)] = (
                    self._metrics.budget_used.labels(org, _BUDGET_NAME[rule.dimension])
                )
            child.set(1.0 - state.remaining / rule.limit)

    def refused_early(self, tenant: Tenant) -> RateLimitError | None:
        """The refusal the key's request is sure to get (its request rate), known without the limiter."""
        err = self._early.refusal(tenant.key_id)
        if err is not None:
            self._metrics.limit_decisions.labels("all", "requests", "refused_early").inc()
        return err

    async def charge_request(self, request_id: str, tenant: Tenant) -> None:
        """One request and nothing else against the key's limits (a 404 still counts); raises a refusal."""
        try:
            ticket = await self.admit(request_id, tenant, NO_POOL, 0, 0, False)
        except UpstreamUnavailableError:
            return  # fail_closed with the limiter down: the 404 says more than a 503 would
        self.settle(ticket, 0, 0)

    def may_speculate(self, tenant: Tenant, running: int) -> bool:
        """True when the key's last admission here, at most `memory_s` ago, left every rule at least
        `min_headroom` of its limit: its next admission will almost surely be granted too, so the pool
        call need not wait for it (a refusal then still cancels the call before anything is sent).
        Only while at most `max_inflight` requests (`running`: every request this process is
        handling, from arrival to its last byte, this one included) are here: a busy loop has other work
        to do during the round trip, and then the extra task is pure cost. (Counting only admitted
        requests let 98 % of requests at concurrency 8 speculate: each spends much of its time outside
        its reservation.)"""
        if not self._speculate or running > self._max_inflight:
            return False
        until = self._recent.get(tenant.key_id)
        return until is not None and until > monotonic()

    def _remember_headroom(self, key_id: str, decision: Decision) -> None:
        share = self._min_headroom
        if (
            decision.allowed
            and not decision.degraded
            and all(s.rule.shadow or s.remaining >= share * s.rule.limit for s in decision.states)
        ):
            self._recent[key_id] = monotonic() + self._memory_s
            self._recent.move_to_end(key_id)
            if len(self._recent) > 10_000:
                self._recent.popitem(last=False)
        else:
            self._recent.pop(key_id, None)

    def speculate(self, admission: Coroutine[Any, Any, Ticket]) -> asyncio.Task[Ticket]:
        """Run an `admit(...)` call as a task, for a caller that calls the pool meanwhile and awaits the
        ticket before anything reaches its client. Never cancel it: a granted ticket must be settled."""
        task = asyncio.ensure_future(admission)
        task.add_done_callback(self._count_speculation)
        return task

    def granted(self, admitting: asyncio.Task[Ticket], then: Callable[[Ticket], None]) -> Ticket | None:
        """The ticket of a speculative admission whose request has ended: None if it was refused; if it
        is still in flight (the request ended first), None now and `then(ticket)` once it is granted,
        since a granted reservation must be settled whoever is left to care."""
        if not admitting.done():
            admitting.add_done_callback(
                lambda t: None if t.cancelled() or t.exception() else then(t.result())
            )
            return None
        if admitting.cancelled() or admitting.exception() is not None:
            return None
        return admitting.result()

    def _count_speculation(self, task: asyncio.Task[Ticket]) -> None:
        if not task.cancelled():
            (self._spec_refused if task.exception() is not None else self._spec_admitted).inc()

    def _count(self, decision: Decision) -> None:
        """Allowed and shadow refusals (`_refusal` counts refusals)."""
        m = self._metrics.limit_decisions
        if decision.allowed:
            (self._degraded if decision.degraded else self._allowed).inc()
        for rule in decision.shadow_refusals:
            m.labels(rule.level.value, rule.dimension.value, "shadow_refused").inc()

    def _refusal(
        self, decision: Decision, headers: list[tuple[bytes, bytes]], cost: Mapping[Dimension, int]
    ) -> RateLimitError:
        rule = decision.refused_by
        state = next((s for s in decision.states if s.rule == rule), None)
        if rule is not None:
            # More than a quota has left, running requests' reservations aside (the limiter then says
            # retry within a second: they settle below what they reserved): waiting cannot help.
            over = (
                rule.dimension in _QUOTA_DIMS
                and state is not None
                and cost.get(rule.dimension, 0) > state.remaining
                and decision.retry_after_s > SETTLE_RETRY_MS / 1000
            )
            outcome = "too_large" if over else "refused"
            self._metrics.limit_decisions.labels(rule.level.value, rule.dimension.value, outcome).inc()
            if over and state is not None:
                big = too_large(rule, cost.get(rule.dimension, 0), rule.limit, max(0, state.remaining))
                big.headers.update({k.decode(): v.decode() for k, v in headers})
                return big
        retry = max(1, int(decision.retry_after_s + 0.999))
        what = _describe(rule) if rule is not None else "a limit"
        fmt = _amount(rule.dimension) if rule is not None else str
        detail = (
            f" (limit {fmt(rule.limit)}, remaining {fmt(max(0, state.remaining))})" if rule and state else ""
        )
        err = RateLimitError(
            f"Rate limit reached for {what}{detail}. Please try again in {retry}s.",
            code="rate_limit_exceeded",
            headers={
                "retry-after": str(retry),
                "retry-after-ms": str(max(1, int(decision.retry_after_s * 1000))),
                **{k.decode(): v.decode() for k, v in headers},
            },
        )
        if rule is not None:
            err.param = f"{rule.level.value}.{rule.dimension.value}"
        return err

    async def top_up(self, ticket: Ticket) -> bool:
        """Reserve the next chunk of output tokens for a stream; False = the budget refuses."""
        more = min(self._config.stream_chunk_tokens, ticket.output_granted - ticket.output_reserved)
        if more <= 0:
            return False
        extra = {
            Dimension.OUTPUT_TOKENS: more,
            Dimension.TOKENS: more,
            Dimension.TOKENS_DAY: more,
            Dimension.TOKENS_MONTH: more,
        }
        if ticket.usd_rate:
            usd = math.ceil(more * ticket.usd_rate)
            extra[Dimension.USD_DAY] = extra[Dimension.USD_MONTH] = extra[Dimension.USD_TOTAL] = usd
        try:
            ok = await self._limiter.top_up(ticket.reservation, extra)
        except BackendUnavailable:
            ok = False  # fail_closed: end the stream cleanly rather than run unmetered
        if ok:
            ticket.output_reserved += more
            self._reserved.inc(more)
        else:
            self._metrics.limit_decisions.labels("all", "output_tokens", "top_up_refused").inc()
        return ok

    def settle(self, ticket: Ticket, input_tokens: int, output_tokens: int, usd_micro: int = 0) -> None:
        """Replace the reservation with real usage, in the background: with the Redis backend the next
        admission's script call carries it (a finished request costs no round trip of its own), or it
        goes out within a few milliseconds; the failover limiter retries what Redis could not take."""
        if ticket.settled:
            return
        ticket.settled = True
        self._active.pop(ticket.reservation.request_id, None)
        self._settled.inc(input_tokens + output_tokens)
        self._limiter.settle_soon(ticket.reservation, usage_cost(input_tokens, output_tokens, usd_micro))

    async def renew_forever(self) -> None:
        """Keep the leases of running requests alive (one batched call per round). A round that fails,
        whatever the error, is counted (`llmgw_ratelimit_decisions{outcome="renew_failed"}`), logged at
        most once a minute per kind of error, and the next round tries again: if this task ended, every
        running request's lease would lapse after `lease_s` and its usage go uncharged."""
        interval = self._config.lease_s / 3
        failed = self._metrics.limit_decisions.labels("all", "all", "renew_failed")
        while True:
            await asyncio.sleep(interval)
            if not self._active:
                continue
            try:
                await self._limiter.renew(list(self._active.values()))
            except Exception as e:  # noqa: BLE001 - one bad round must not end the renewals for good
                failed.inc()
                level = logging.WARNING if isinstance(e, BackendUnavailable) else logging.ERROR
                name = type(e).__name__
                self._report(
                    name, level, "renewing leases failed: %s: %s (next round in %.3g s)", name, e, interval
                )

    async def drain(self) -> None:
        """Wait for queued settlements (shutdown)."""
        await self._limiter.flush()
