"""Running a routed request's cascade: the calls of each step in parallel, the pure judge in between.

`router.cascade.Cascade` decides (accept, escalate with a reason, or fail); this module only makes the
calls it asks for, through the relay's unary path (replica picking, retries before the first byte,
breakers), and answers the client with the accepted call's body. A client that leaves cancels the
handler task, which cancels every call in flight (their upstream connections close, the pools abort).

Each call's usage is checked against its share of the reservation (gateway.budget.usage) before the
judge or the bill sees it. Whatever ends the cascade (an answer, every call failing, the client
leaving, an error), what the calls made so far cost is recorded in the request's answer part
(gateway.record.Answer) for settlement; a call cut off in flight is charged its input estimate (its
prompt was processed).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from gateway.budget.admission import Ticket
from gateway.budget.usage import UsageFaults, checked
from gateway.edge.exchange import JSON_HEADERS, SSE_HEADERS, Kind, Send
from gateway.errors import GatewayError, UpstreamError
from gateway.guardrails.conformance import bind_schema
from gateway.observability.metrics import Metrics
from gateway.observability.tracing import NoTracing, TraceHooks
from gateway.routing.aliases import answer_of, call_body, sse_of, summed_usage
from gateway.routing.route import Route
from gateway.routing.table import Decided
from gateway.upstream.calls import CallSpec, PoolCalls
from pools.fair import Flow
from router.cascade import Accept, Escalate
from router.plan import Answer, Call
from router.tiers import escalation_worth

if TYPE_CHECKING:
    from gateway.record import RequestRecord

# An escalated cascade's answers and the accepted one (gateway.routing.explorer learns from them).
OnEscalated = Callable[[Decided, list[Answer], Answer], None]


class CascadeRunner:
    def __init__(
        self,
        metrics: Metrics,
        calls: PoolCalls,
        tracing: TraceHooks | None = None,
        on_escalated: OnEscalated | None = None,
    ) -> None:
        self._metrics = metrics
        self._calls = calls
        self._on_escalated = on_escalated
        self._trace: TraceHooks = tracing or NoTracing()
        self._faults = UsageFaults(metrics)

    async def _call(
        self, d: Decided, call: Call, body: dict[str, Any], req: RequestRecord, share: tuple[int, int]
    ) -> tuple[Answer, dict[str, Any] | None, GatewayError | None]:
        """One call; `share`: one call's part of the reservation (input, output), what its usage is
        checked against."""
        route = d.routes[call.tier]
        pool = route.pool
        payload = call_body(body, pool.config.model, d.alias.logprobs)
        try:
            headers = {**pool.headers, "x-request-id": req.http.rid.decode()}
            who = req.who
            # Each call waits in its pool's hold queue as its tenant's, at its share of the estimate.
            # Under an SLO class that reroutes or sheds, a call its pool would hold past the TTFT
            # target is refused (pools.slo) and counts as its tier failing: the plan moves on.
            flow = Flow(who.tenant.org, who.tenant.app, who.tenant.tier, share[0], route.slo) if who else None
            spec = CallSpec(Kind.CHAT, payload, headers, pool.key(body), who.rank if who else 0, flow=flow)
            data = await self._calls.unary(pool, spec)
            parsed = orjson.loads(data)
            if not isinstance(parsed, dict):
                raise orjson.JSONDecodeError("not an object", "", 0)
        except GatewayError as err:
            return Answer(call, error=err.message), None, err
        except orjson.JSONDecodeError:
            self._metrics.upstream_errors.labels(pool.config.name, "malformed").inc()
            bad = UpstreamError(f"pool '{pool.config.name}' returned a malformed response")
            return Answer(call, error=bad.message), None, bad
        self._faults.settle_answer(pool.config.name, parsed, *share)
        price = d.alias.policy.tiers[call.tier].price
        return answer_of(call, parsed, price.cost if price is not None else None), parsed, None

    async def run(
        self,
        d: Decided,
        body: dict[str, Any],
        client_usage: bool,
        req: RequestRecord,
        ticket: Ticket,
        send: Send,
    ) -> Route:
        """Answer the client; returns the route of the tier that answered (`req.http.status` is 200
        then). What the calls cost is in `req.answer`."""
        x, answer = req.http, req.answer
        assert answer is not None
        share = (ticket.input_estimate // d.calls, ticket.output_granted // d.calls)
        accepted, bodies, usage = await self._decide(d, body, req, share)
        route = d.routes[accepted.tier]
        escalations = len(accepted.state.escalations)
        obs = req.obs
        if obs is not None and obs.notes is not None:
            obs.notes["escalations"] = escalations
        name = route.pool.config.name
        self._metrics.router_decisions.labels(d.alias.name, name, "true" if escalations else "false").inc()
        route.count_usage(usage["prompt_tokens"], usage["completion_tokens"])
        parsed = {**bodies[accepted.answer.call], "usage": usage}
        extra = [
            (b"x-request-id", x.rid),
            (b"x-llmgw-tier", name.encode()),
            (b"x-llmgw-escalations", str(escalations).encode()),
            *ticket.headers,
        ]
        x.done()
        if body.get("stream"):
            data = sse_of(parsed, usage if client_usage else None)
            await send({"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *extra]})
        else:
            data = orjson.dumps(parsed)
            start = [*JSON_HEADERS, (b"content-length", str(len(data)).encode()), *extra]
            await send({"type": "http.response.start", "status": 200, "headers": start})
        if answer.capture is not None:
            answer.capture.append(data)
        await send({"type": "http.response.body", "body": data, "more_body": False})
        x.status = 200
        return route

    @staticmethod
    def _worth(d: Decided, step: int) -> bool:
        """Whether the plan's later steps are predicted to buy quality over step `step`'s tiers (the
        success policy's probabilities, router/tiers.py; without them the scorers alone decide)."""
        if d.success is None:
            return True
        steps = d.plan.steps
        here = [c.tier for c in steps[step].calls]
        later = [c.tier for s in steps[step + 1 :] for c in s.calls]
        return escalation_worth(d.success, here, later)

    async def _decide(
        self, d: Decided, body: dict[str, Any], req: RequestRecord, share: tuple[int, int]
    ) -> tuple[Accept, dict[Call, dict[str, Any]], dict[str, int]]:
        """Make the plan's calls, step by step, until the judge accepts one (or every call of the last
        step failed: that failure is raised). What every call cost is recorded in `req.answer`
        whatever ends the cascade, the client leaving included."""
        # Schema scorers judge this request's response_format schema (gateway/guardrails/conformance.py).
        cascade, name = bind_schema(d.alias.cascade, body), d.alias.name
        bodies: dict[Call, dict[str, Any]] = {}
        made: list[Answer] = []  # every call that returned, in order
        state, step = cascade.start(d.plan)
        offset = d.alias.guard.threshold_offset() if d.alias.guard is not None else 0.0
        in_flight = 0
        try:
            while True:
                in_flight = len(step.calls)
                results = await asyncio.gather(*(self._call(d, c, body, req, share) for c in step.calls))
                in_flight = 0
                made.extend(a for a, _, _ in results)
                errors = [err for _, _, err in results if err is not None]
                for answer, parsed, _ in results:
                    if parsed is not None:
                        bodies[answer.call] = parsed
                answers = [a for a, _, _ in results]
                with self._trace.span("cascade.judge"):
                    decision = cascade.judge(d.plan, state, d.prompt, answers, offset)
                    if isinstance(decision, Escalate) and not self._worth(d, state.step):
                        # No later tier is predicted to answer better: keep the best answer in hand
                        # (an error or an empty answer still escalates: judged again at no threshold).
                        decision = cascade.judge(d.plan, state, d.prompt, answers, math.inf)
                        if not isinstance(decision, Escalate) and req.obs is not None:
                            if req.obs.notes is not None:
                                req.obs.notes["escalation_skipped"] = "no_better_tier"
                if not isinstance(decision, Escalate):
                    break
                self._metrics.router_escalations.labels(name, decision.reason.value).inc()
                state, step = decision.state, decision.step
        except BaseException:
            # Cancelled (the client left) or a step raised: the calls already made are still charged,
            # and the ones cut off in flight their prompt.
            spent = summed_usage(made)
            spent["prompt_tokens"] += in_flight * share[0]
            spent["total_tokens"] += in_flight * share[0]
            _record(req, spent)
            raise
        usage = summed_usage(decision.state.answers)
        _record(req, usage)  # what every call cost, charged to the tenant at settlement
        assert req.answer is not None
        req.answer.costs = [
            (d.routes[a.call.tier].pool.config.name, a.cost_usd)
            for a in decision.state.answers
            if a.cost_usd is not None
        ]
        if not isinstance(decision, Accept):
            # Every call of the last step failed: the client gets that failure, usage is still settled.
            raise errors[0] if errors else UpstreamError(f"routed model '{name}' has no answer")
        escalated = bool(decision.state.escalations)
        d.alias.settle_cost(decision.state.answers, decision.answer, escalated)
        if escalated and self._on_escalated is not None:
            self._on_escalated(d, list(decision.state.answers), decision.answer)
        return decision, bodies, usage


def _record(req: RequestRecord, usage: dict[str, int]) -> None:
    """The calls' summed usage as the request's, checked against its reservation (gateway.budget.usage)."""
    answer, budget = req.answer, req.budget
    assert answer is not None and budget is not None
    answer.usage_in, answer.usage_out, answer.fault = checked(usage, budget.reserved_in, budget.granted_out)
    answer.reported = True
