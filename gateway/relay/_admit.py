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
from gateway.budget.pricing import NOTHING, Pricing, Spend
from gateway.edge.exchange import RequestIds
from gateway.observability.tracing import TraceHooks
from gateway.record import Answer, Budget, RequestRecord, Speculation
from gateway.relay.response_cache import BYPASS
from gateway.routing.route import Route


class Admit:
    def __init__(
        self,
        admissions: Admissions,
        ids: RequestIds,
        bytes_per_token: float,
        trace: TraceHooks,
        pricing: Pricing,
    ) -> None:
        self._admissions = admissions
        self._pricing = pricing
        self._ids = ids
        self._estimates = InputEstimates(bytes_per_token)
        self._trace = trace

    async def reserve(self, req: RequestRecord, route: Route, open_ended: bool, running: int) -> Budget:
        """Reserve for the request, or start a speculative admission: `req.budget`, returned.
        `open_ended`: the client set no max_tokens; `running`: the requests this process is handling
        (gates speculation)."""
        prep, decided, who, ask = req.prep, req.decided, req.who, req.ask
        assert prep is not None and who is not None and ask is not None
        calls = decided.calls if decided is not None and decided.plan.cascade else 1
        granted = (prep.max_tokens or 0) * prep.outputs * calls
        admissions = self._admissions
        topup = prep.stream and open_ended and calls == 1 and granted > admissions.stream_chunk_tokens
        if topup:
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
        budget = req.budget = Budget(estimate, granted, topup)
        # Dollars: the input at the alias's highest price now, the output as it is reserved.
        usd = self._pricing.admission(ask.alias, estimate)
        extra = (
            admissions.request_rules(who.tenant, ask.tags, ask.end_user)
            if ask.tags or ask.end_user is not None
            else ()
        )
        admission = admissions.admit(lease_id, who.tenant, pool, estimate, granted, topup, usd, extra)
        if (
            decided is None
            and route.pool.config.engine == "vllm"  # no speculative calls to billed APIs
            and admissions.may_speculate(who.tenant, running)
        ):
            budget.speculation = Speculation(req.http, admissions.speculate(admission))
            # One loop turn lets the admission task write its script call now, so Redis works on
            # it while this task builds and sends the pool request (tasks start a turn later).
            await asyncio.sleep(0)
            return budget
        with self._trace.span("rate_limit"):
            ticket = budget.ticket = await admission
        cache = req.cache
        ticket.headers.append((b"x-llmgw-cache-status", cache.status if cache is not None else BYPASS))
        if decided is not None:
            ticket.headers.extend(decided.headers)  # a cascade's runner says which tier answered
        else:
            ticket.headers.append(route.tier)
        return budget

    def count(self, pool: str, size: InputSize) -> int:
        """The input tokens a prompt of `size` is estimated at on `pool` (count_tokens)."""
        return self._estimates.of(pool).tokens(size)

    async def granted(self, req: RequestRecord, budget: Budget) -> Ticket:
        """The ticket of `req`'s `budget`, once the pool answered: a speculative admission is awaited
        here, before anything is sent to the client; its refusal is raised (the pool's answer is
        dropped)."""
        speculation = budget.speculation
        if speculation is None:
            ticket = budget.ticket
            assert ticket is not None
            return ticket
        speculation.speculating = False
        with self._trace.span("rate_limit"):
            ticket = await speculation.admitting
        cache = req.cache
        ticket.headers.append((b"x-llmgw-cache-status", cache.status if cache is not None else BYPASS))
        if req.route is not None:
            ticket.headers.append(req.route.tier)  # speculation: direct aliases only
        return ticket

    def settle(self, req: RequestRecord, budget: Budget) -> None:
        """Stage 8: charge what the request used and release its hold (a speculative admission still
        in flight is settled when it arrives)."""
        if budget.speculation is not None:
            # Refused: nothing to settle. Still in flight (the request ended first): settle on arrival.
            admitting = budget.speculation.admitting
            budget.ticket = self._admissions.granted(admitting, lambda t: self._settle(t, req))
        if budget.ticket is not None:
            self._settle(budget.ticket, req)

    def _settle(self, ticket: Ticket, req: RequestRecord) -> None:
        """Charge `ticket` what the answer used: the pool's reported usage, else what the pool must have
        done (nothing when it failed first; the prompt when the client left). A sane report on one
        pool teaches that pool's input estimate."""
        answer = req.answer
        status = req.http.status
        budget = req.budget
        if answer is None:  # it ended before its call began
            charged = ticket.input_estimate if status == 499 else 0
            spend = self._spent(req, None, charged, 0)
            if budget is not None:
                budget.spend = spend
            self._admissions.settle(ticket, charged, 0, spend.micro)
            return
        if not answer.reported:
            # Before doing work it reported, the pool failed (charged nothing) or the client left (the
            # prompt was processed).
            answer.usage_in = 0 if answer.usage_out == 0 and status != 499 else ticket.input_estimate
        elif answer.fault is None and status == 200:
            # One call to one pool only: a cascade's usage is a sum over pools.
            route, prep, decided = answer.route, req.prep, req.decided
            if route is not None and prep is not None and (decided is None or not decided.plan.cascade):
                self._estimates.of(route.pool.config.name).observe(prep.size, answer.usage_in)
        spend = self._spent(req, answer, answer.usage_in, answer.usage_out)
        if budget is not None:
            budget.spend = spend
        self._admissions.settle(ticket, answer.usage_in, answer.usage_out, spend.micro)

    def _spent(self, req: RequestRecord, answer: Answer | None, used_in: int, used_out: int) -> Spend:
        """What the request cost, computed once: charged to its dollar budgets here, counted by the
        observer and written to the ledger from `Budget.spend`."""
        route = answer.route if answer is not None and answer.route is not None else req.route
        if route is None or not self._pricing.worst:  # no price anywhere in the policy
            return NOTHING
        model, pool, adapter = route.served
        calls = answer.costs if answer is not None else None
        cached = min(answer.usage_cached, used_in) if answer is not None else 0
        return self._pricing.spent(model, pool, adapter, used_in, used_out, calls, cached)
