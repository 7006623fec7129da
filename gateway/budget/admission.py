"""Admission of a request against its token budgets, and everything that follows from it.

The relay calls `Admissions.admit` once per request (one limiter call = one Redis round trip),
gets a `Ticket`, and hands the ticket back at the end with the usage the pool reported
(`settle`, fire-and-forget: the Redis backend carries it on its next admission, the failover
limiter retries what Redis could not take). Streams without a client
`max_tokens` hold only `stream_chunk_tokens` of output at a time and `top_up` as tokens arrive.
In-flight tickets are renewed in one batched call every `lease_s / 3`, so a lease only runs out
when this process is gone.

The same module turns decisions into OpenAI's `x-ratelimit-*` headers (for the tightest level) and
a refusal into a 429 that names the level and dimension that refused.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from time import monotonic, perf_counter
from typing import Any

from gateway.errors import RateLimitError, UpstreamUnavailableError
from gateway.observability.metrics import Metrics
from ratelimit.errors import BackendUnavailable
from ratelimit.model import (
    Admission,
    Decision,
    Dimension,
    Limiter,
    LimitsConfig,
    Reservation,
    Rule,
    RuleState,
    Tenant,
)
from ratelimit.rules import request_cost, resolve_rules, usage_cost

_TOKEN_DIMS = frozenset((Dimension.TOKENS, Dimension.INPUT_TOKENS, Dimension.OUTPUT_TOKENS))
_DIM_TEXT = {
    Dimension.REQUESTS: "requests per minute",
    Dimension.INPUT_TOKENS: "input tokens per minute",
    Dimension.OUTPUT_TOKENS: "output tokens per minute",
    Dimension.TOKENS: "tokens per minute",
    Dimension.CONCURRENT: "concurrent requests",
    Dimension.TOKENS_DAY: "tokens per day",
    Dimension.TOKENS_MONTH: "tokens per month",
}


def go_duration(seconds: float) -> str:
    """OpenAI's reset format: Go-style durations (`12ms`, `1s`, `6m0s`, `2m59.56s`), to 10 ms from 1 s.

    Integer arithmetic on hundredths instead of float formatting (`:g`): this runs twice per request."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    cs = round(seconds * 100)
    if cs < 6000:
        return _seconds(cs)
    minutes, cs = divmod(cs, 6000)
    if minutes < 60:
        return f"{minutes}m{_seconds(cs)}"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes}m{_seconds(cs)}"


def _seconds(cs: int) -> str:
    """Hundredths of a second as Go prints seconds: `6s`, `6.5s`, `6.05s`."""
    whole, frac = divmod(cs, 100)
    if frac == 0:
        return f"{whole}s"
    if frac % 10 == 0:
        return f"{whole}.{frac // 10}s"
    return f"{whole}.{frac:02d}s"


def _headers(suffix: bytes, s: RuleState) -> list[tuple[bytes, bytes]]:
    return [
        (b"x-ratelimit-limit-" + suffix, str(s.rule.limit).encode()),
        (b"x-ratelimit-remaining-" + suffix, str(max(0, s.remaining)).encode()),
        (b"x-ratelimit-reset-" + suffix, go_duration(s.reset_s).encode()),
    ]


def rate_limit_headers(states: tuple[RuleState, ...]) -> list[tuple[bytes, bytes]]:
    """OpenAI's `x-ratelimit-*` headers for the tightest enforced request rule and token rule."""
    req: RuleState | None = None
    tok: RuleState | None = None
    for s in states:
        rule = s.rule
        if rule.shadow:
            continue
        if rule.dimension == Dimension.REQUESTS:
            if req is None or s.remaining < req.remaining:
                req = s
        elif rule.dimension in _TOKEN_DIMS and (tok is None or s.remaining < tok.remaining):
            tok = s
    out = _headers(b"requests", req) if req is not None else []
    if tok is not None:
        out += _headers(b"tokens", tok)
    return out


def _describe(rule: Rule) -> str:
    where = "global" if rule.scope == "*" else f"{rule.level.value} '{rule.scope}'"
    return f"{where} on {_DIM_TEXT[rule.dimension]}"


@dataclass(slots=True)
class Ticket:
    """An admitted request's hold on its budgets."""

    reservation: Reservation
    input_estimate: int
    output_reserved: int
    output_granted: int  # what the pool may generate (the alias's default/cap applied)
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    settled: bool = False

    @property
    def topping_up(self) -> bool:
        return self.output_reserved < self.output_granted


class Admissions:
    def __init__(self, config: LimitsConfig, limiter: Limiter, metrics: Metrics) -> None:
        self._config = config
        self._limiter = limiter
        self._metrics = metrics
        self._rules: OrderedDict[tuple[str, str, str], tuple[Rule, ...]] = OrderedDict()
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

    @property
    def stream_chunk_tokens(self) -> int:
        return self._config.stream_chunk_tokens

    def rules_for(self, tenant: Tenant, pool: str) -> tuple[Rule, ...]:
        """Resolved rules, cached (merging limit overrides is far slower than a dict lookup).

        Keyed by key id: a key's record (tier, overrides) never changes; revoking makes a new key.
        """
        key = (tenant.key_id, tenant.tier, pool)
        rules = self._rules.get(key)
        if rules is None:
            rules = resolve_rules(self._config, tenant, pool)
            self._rules[key] = rules
            if len(self._rules) > 10_000:
                self._rules.popitem(last=False)
        return rules

    async def admit(
        self,
        request_id: str,
        tenant: Tenant,
        pool: str,
        input_estimate: int,
        output_granted: int,
        stream_topup: bool,
    ) -> Ticket:
        output = min(output_granted, self._config.stream_chunk_tokens) if stream_topup else output_granted
        admission = Admission(
            request_id, self.rules_for(tenant, pool), request_cost(input_estimate, output), tenant.priority
        )
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
        if self._speculate:
            self._remember_headroom(tenant.key_id, decision)
        headers = rate_limit_headers(decision.states)
        if not decision.allowed or decision.reservation is None:
            raise self._refusal(decision, headers)
        self._active[request_id] = decision.reservation
        self._reserved.inc(input_estimate + output)
        return Ticket(decision.reservation, input_estimate, output, output_granted, headers)

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
        m = self._metrics.limit_decisions
        if decision.allowed:
            (self._degraded if decision.degraded else self._allowed).inc()
        elif decision.refused_by is not None:
            m.labels(decision.refused_by.level.value, decision.refused_by.dimension.value, "refused").inc()
        for rule in decision.shadow_refusals:
            m.labels(rule.level.value, rule.dimension.value, "shadow_refused").inc()

    def _refusal(self, decision: Decision, headers: list[tuple[bytes, bytes]]) -> RateLimitError:
        rule = decision.refused_by
        retry = max(1, int(decision.retry_after_s + 0.999))
        what = _describe(rule) if rule is not None else "a limit"
        state = next((s for s in decision.states if s.rule == rule), None)
        detail = f" (limit {rule.limit}, remaining {max(0, state.remaining)})" if rule and state else ""
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

    def settle(self, ticket: Ticket, input_tokens: int, output_tokens: int) -> None:
        """Replace the reservation with real usage, in the background: with the Redis backend the next
        admission's script call carries it (a finished request costs no round trip of its own), or it
        goes out within a few milliseconds; the failover limiter retries what Redis could not take."""
        if ticket.settled:
            return
        ticket.settled = True
        self._active.pop(ticket.reservation.request_id, None)
        self._settled.inc(input_tokens + output_tokens)
        self._limiter.settle_soon(ticket.reservation, usage_cost(input_tokens, output_tokens))

    async def renew_forever(self) -> None:
        """Keep the leases of running requests alive (one batched call per round)."""
        interval = self._config.lease_s / 3
        while True:
            await asyncio.sleep(interval)
            if self._active:
                with contextlib.suppress(BackendUnavailable):
                    await self._limiter.renew(list(self._active.values()))

    async def drain(self) -> None:
        """Wait for queued settlements (shutdown)."""
        await self._limiter.flush()
