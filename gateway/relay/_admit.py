"""Stage 6, admit; and stage 8, settle: the request against its token budgets (gateway.budget).

The reservation covers every multiplier of output the request may produce (prompts, `n`, `best_of`,
a cascade's calls: `Prepared.outputs` x calls) and the input estimate, calibrated per pool from the
prompt tokens the pool settles (gateway.budget.estimate, docs/design/019). A stream without a
client `max_tokens` that may outgrow one reserved chunk is metered as it runs and topped up instead
of reserving its whole allowance. A direct request to a vLLM pool of a key with ample headroom is
admitted speculatively (docs/design/017): the pool is called while the reservation is in flight,
and nothing reaches the client before it is granted.
"""

from __future__ import annotations

import asyncio

from gateway.budget.admission import Admissions, Ticket
from gateway.budget.estimate import InputEstimates, InputSize
from gateway.edge.exchange import RequestIds
from gateway.observability.tracing import TraceHooks
from gateway.relay._context import RequestContext
from gateway.relay.response_cache import BYPASS
from gateway.routing.route import Route


class Admit:
    def __init__(
        self, admissions: Admissions, ids: RequestIds, bytes_per_token: float, trace: TraceHooks
    ) -> None:
        self._admissions = admissions
        self._ids = ids
        self._estimates = InputEstimates(bytes_per_token)
        self._trace = trace

    async def __call__(self, ctx: RequestContext, route: Route, running: int) -> None:
        """Reserve for the request (or start a speculative admission); sets `ctx.pending`.
        `running`: the requests this process is handling (gates speculation)."""
        prep, decided, tenant = ctx.prep, ctx.decided, ctx.tenant
        assert prep is not None and tenant is not None
        calls = decided.calls if decided is not None and decided.plan.cascade else 1
        granted = (prep.max_tokens or 0) * prep.outputs * calls
        admissions = self._admissions
        ctx.topup = prep.stream and ctx.open_ended and calls == 1 and granted > admissions.stream_chunk_tokens
        if ctx.topup:
            # Meter the stream as it runs (vLLM: cumulative usage on every chunk).
            prep.body["stream_options"]["continuous_usage_stats"] = True
        # Leases need an id unique per admission; a client's x-request-id may repeat.
        lease_id = self._ids.new().decode()
        pool = route.pool.config.name
        if calls == 1:
            estimate = self._estimates.of(pool).tokens(prep.size)
        else:
            # A cascade may make several calls, on pools of other tokenizers: reserve for all of them
            # at the highest estimate, settle what was used.
            assert decided is not None
            estimate = max(self._estimates.of(r.pool.config.name).tokens(prep.size) for r in decided.routes)
            estimate *= calls
        ctx.reserved_in, ctx.granted_out = estimate, granted
        admission = admissions.admit(lease_id, tenant, pool, estimate, granted, ctx.topup)
        if (
            decided is None
            and route.pool.config.engine == "vllm"  # no speculative calls to billed APIs
            and admissions.may_speculate(tenant, running)
        ):
            ctx.pending = ctx.admitting = admissions.speculate(admission)
            ctx.speculate(ctx.admitting)
            # One loop turn lets the admission task write its script call now, so Redis works on
            # it while this task builds and sends the pool request (tasks start a turn later).
            await asyncio.sleep(0)
            return
        with self._trace.span("rate_limit"):
            ticket = ctx.pending = ctx.ticket = await admission
        ticket.headers.append((b"x-llmgw-cache-status", ctx.cache or BYPASS))
        if decided is not None:
            ticket.headers.extend(decided.headers)  # a cascade's runner says which tier answered
        else:
            ticket.headers.append(route.tier)

    def count(self, pool: str, size: InputSize) -> int:
        """The input tokens a prompt of `size` is estimated at on `pool` (count_tokens)."""
        return self._estimates.of(pool).tokens(size)

    async def granted(self, ctx: RequestContext) -> Ticket:
        """The ticket, once the pool answered: a speculative admission is awaited here, before anything
        is sent to the client; its refusal is raised (the pool's answer is dropped)."""
        pending = ctx.pending
        if isinstance(pending, Ticket):
            return pending
        assert pending is not None
        ctx.speculating = False
        with self._trace.span("rate_limit"):
            ticket = await pending
        ticket.headers.append((b"x-llmgw-cache-status", ctx.cache or BYPASS))
        if ctx.route is not None:
            ticket.headers.append(ctx.route.tier)  # speculation: direct aliases only
        return ticket

    def settle(self, ctx: RequestContext) -> None:
        """Stage 8: charge what the request used and release its hold (a speculative admission still
        in flight is settled when it arrives)."""
        if ctx.admitting is not None:
            # Refused: nothing to settle. Still in flight (the request ended first): settle on arrival.
            ctx.ticket = self._admissions.granted(ctx.admitting, lambda t: self._settle(t, ctx))
        if ctx.ticket is not None:
            self._settle(ctx.ticket, ctx)

    def _settle(self, ticket: Ticket, ctx: RequestContext) -> None:
        if not ctx.reported and ctx.usage_out == 0 and ctx.status != 499:
            ctx.usage_in = 0  # the pool failed before doing work it reported
        elif not ctx.reported:
            ctx.usage_in = ticket.input_estimate  # the client left: the prompt was processed
        elif ctx.fault is None and ctx.status == 200:
            self._calibrate(ctx)
        self._admissions.settle(ticket, ctx.usage_in, ctx.usage_out)

    def _calibrate(self, ctx: RequestContext) -> None:
        """Teach the pool's estimate the prompt tokens it reported (one call to one pool only: a
        cascade's usage is a sum over pools)."""
        decided, route, prep = ctx.decided, ctx.route, ctx.prep
        if (decided is None or not decided.plan.cascade) and route is not None and prep is not None:
            self._estimates.of(route.pool.config.name).observe(prep.size, ctx.usage_in)
