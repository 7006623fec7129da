"""Stage 6, admit; and stage 8, settle: the request against its token budgets (gateway.budget).

The reservation covers every multiplier of output the request may produce (`n`, a cascade's calls)
and the input estimate. A stream without a client `max_tokens` that may outgrow one reserved chunk
is metered as it runs and topped up instead of reserving its whole allowance. A direct request to a
vLLM pool of a key with ample headroom is admitted speculatively (docs/design/017): the pool is
called while the reservation is in flight, and nothing reaches the client before it is granted.
"""

from __future__ import annotations

import asyncio

from gateway.budget.admission import Admissions, Ticket
from gateway.edge.exchange import RequestIds
from gateway.observability.tracing import TraceHooks
from gateway.relay._context import RequestContext
from gateway.relay.normalize import estimate_input_tokens
from gateway.relay.response_cache import BYPASS
from gateway.routing.route import Route


class Admit:
    def __init__(
        self, admissions: Admissions, ids: RequestIds, bytes_per_token: float, trace: TraceHooks
    ) -> None:
        self._admissions = admissions
        self._ids = ids
        self._bytes_per_token = bytes_per_token
        self._trace = trace

    async def __call__(self, ctx: RequestContext, route: Route, running: int) -> None:
        """Reserve for the request (or start a speculative admission); sets `ctx.pending`.
        `running`: the requests this process is handling (gates speculation)."""
        prep, decided, tenant = ctx.prep, ctx.decided, ctx.tenant
        assert prep is not None and tenant is not None
        body = ctx.body
        n = body.get("n") or 1
        calls = decided.calls if decided is not None and decided.plan.cascade else 1
        granted = (prep.max_tokens or 0) * n * calls
        admissions = self._admissions
        ctx.topup = prep.stream and ctx.open_ended and calls == 1 and granted > admissions.stream_chunk_tokens
        if ctx.topup:
            # Meter the stream as it runs (vLLM: cumulative usage on every chunk).
            prep.body["stream_options"]["continuous_usage_stats"] = True
        # Leases need an id unique per admission; a client's x-request-id may repeat.
        lease_id = self._ids.new().decode()
        # A cascade may make several calls: reserve for all of them, settle what was used.
        estimate = estimate_input_tokens(ctx.kind, body, self._bytes_per_token) * calls
        admission = admissions.admit(lease_id, tenant, route.pool.config.name, estimate, granted, ctx.topup)
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
            ticket.headers.extend(decided.headers)

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
        self._admissions.settle(ticket, ctx.usage_in, ctx.usage_out)
