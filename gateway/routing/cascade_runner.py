"""Running a routed request's cascade: the calls of each step in parallel, the pure judge in between.

`router.cascade.Cascade` decides (accept, escalate with a reason, or fail); this module only makes the
calls it asks for, through the relay's unary path (replica picking, retries before the first byte,
breakers), and answers the client with the accepted call's body. A client that leaves cancels the
handler task, which cancels every call in flight (their upstream connections close, the pools abort).
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from gateway.budget.admission import Ticket
from gateway.edge.exchange import JSON_HEADERS, SSE_HEADERS, Exchange, Kind, Send
from gateway.errors import GatewayError, UpstreamError
from gateway.observability.metrics import Metrics
from gateway.observability.tracing import NoTracing, TraceHooks
from gateway.routing.aliases import answer_of, call_body, sse_of, summed_usage
from gateway.routing.route import Route
from gateway.routing.table import Decided
from gateway.upstream.calls import CallSpec, PoolCalls
from router.cascade import Accept, Escalate
from router.plan import Answer, Call


class CascadeRunner:
    def __init__(self, metrics: Metrics, calls: PoolCalls, tracing: TraceHooks | None = None) -> None:
        self._metrics = metrics
        self._calls = calls
        self._trace: TraceHooks = tracing or NoTracing()

    async def _call(
        self, d: Decided, call: Call, body: dict[str, Any], headers: dict[str, str], priority: int
    ) -> tuple[Answer, dict[str, Any] | None, GatewayError | None]:
        route = d.routes[call.tier]
        pool = route.pool
        payload = call_body(body, pool.config.model, d.alias.logprobs)
        try:
            spec = CallSpec(Kind.CHAT, payload, {**pool.headers, **headers}, pool.key(body), priority)
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
        price = d.alias.policy.tiers[call.tier].price
        return answer_of(call, parsed, price.cost if price is not None else None), parsed, None

    async def run(
        self, d: Decided, body: dict[str, Any], client_usage: bool, req: Exchange, ticket: Ticket, send: Send
    ) -> Route:
        """Answer the client; returns the route of the tier that answered (`req.status` is 200 then)."""
        accepted, bodies, usage = await self._decide(d, body, req)
        route = d.routes[accepted.tier]
        escalations = len(accepted.state.escalations)
        if req.notes is not None:
            req.notes["escalations"] = escalations
        name = route.pool.config.name
        self._metrics.router_decisions.labels(d.alias.name, name, "true" if escalations else "false").inc()
        route.count_usage(usage["prompt_tokens"], usage["completion_tokens"])
        parsed = {**bodies[accepted.answer.call], "usage": usage}
        extra = [
            (b"x-request-id", req.rid),
            (b"x-llmgw-tier", name.encode()),
            (b"x-llmgw-escalations", str(escalations).encode()),
            *ticket.headers,
        ]
        req.done()
        if body.get("stream"):
            data = sse_of(parsed, usage if client_usage else None)
            await send({"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *extra]})
        else:
            data = orjson.dumps(parsed)
            start = [*JSON_HEADERS, (b"content-length", str(len(data)).encode()), *extra]
            await send({"type": "http.response.start", "status": 200, "headers": start})
        if req.capture is not None:
            req.capture.append(data)
        await send({"type": "http.response.body", "body": data, "more_body": False})
        req.status = 200
        return route

    async def _decide(
        self, d: Decided, body: dict[str, Any], req: Exchange
    ) -> tuple[Accept, dict[Call, dict[str, Any]], dict[str, int]]:
        """Make the plan's calls, step by step, until the judge accepts one (or every call of the last
        step failed: that failure is raised). What every call cost is recorded on `req` either way."""
        cascade, name = d.alias.cascade, d.alias.name
        headers = {"x-request-id": req.rid.decode()}
        bodies: dict[Call, dict[str, Any]] = {}
        state, step = cascade.start(d.plan)
        while True:
            results = await asyncio.gather(
                *(self._call(d, c, body, headers, req.priority) for c in step.calls)
            )
            errors = [err for _, _, err in results if err is not None]
            for answer, parsed, _ in results:
                if parsed is not None:
                    bodies[answer.call] = parsed
            with self._trace.span("cascade.judge"):
                decision = cascade.judge(d.plan, state, d.prompt, [a for a, _, _ in results])
            if not isinstance(decision, Escalate):
                break
            self._metrics.router_escalations.labels(name, decision.reason.value).inc()
            state, step = decision.state, decision.step
        usage = summed_usage(decision.state.answers)
        req.record(usage)  # what every call cost, charged to the tenant at settlement
        req.costs = [
            (d.routes[a.call.tier].pool.config.name, a.cost_usd)
            for a in decision.state.answers
            if a.cost_usd is not None
        ]
        if not isinstance(decision, Accept):
            # Every call of the last step failed: the client gets that failure, usage is still settled.
            raise errors[0] if errors else UpstreamError(f"routed model '{name}' has no answer")
        return decision, bodies, usage
