"""Running a routed request's cascade: the calls of each step in parallel, the pure judge in between.

`router.cascade.Cascade` decides (accept, escalate with a reason, or fail); this module only makes the
calls it asks for, through the relay's unary path (replica picking, retries before the first byte,
breakers), and answers the client with the accepted call's body. A client that leaves cancels the
handler task, which cancels every call in flight (their upstream connections close, the pools abort).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.budget.admission import Ticket
from gateway.edge.exchange import Exchange, Send
from gateway.errors import GatewayError, UpstreamError
from gateway.observability.metrics import Metrics
from gateway.observability.tracing import NoTracing, TraceHooks
from gateway.routing.aliases import RoutedAlias, answer_of, call_body, sse_of, summed_usage
from gateway.routing.route import Route
from router.cascade import Accept, Escalate
from router.plan import Answer, Call, Plan

_JSON = (b"content-type", b"application/json")
_SSE = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]

# (route, payload, headers, prefix key, priority) -> the pool's 200 body; raises GatewayError.
UnaryCall = Callable[[Route, bytes, dict[str, str], int | None, int], Awaitable[bytes]]


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

    @property
    def calls(self) -> int:
        """Calls the plan may make at most (what admission reserves for)."""
        return sum(len(s.calls) for s in self.plan.steps) if self.plan.cascade else 1


class CascadeRunner:
    def __init__(self, metrics: Metrics, unary: UnaryCall, tracing: TraceHooks | None = None) -> None:
        self._metrics = metrics
        self._unary = unary
        self._trace: TraceHooks = tracing or NoTracing()

    async def _call(
        self, d: Decided, call: Call, body: dict[str, Any], headers: dict[str, str], priority: int
    ) -> tuple[Answer, dict[str, Any] | None, GatewayError | None]:
        route = d.routes[call.tier]
        pool = route.pool
        payload = call_body(body, pool.config.model, d.alias.logprobs)
        try:
            data = await self._unary(route, payload, {**pool.headers, **headers}, pool.key(body), priority)
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
        self,
        d: Decided,
        body: dict[str, Any],
        client_usage: bool,
        rid: bytes,
        send: Send,
        req: Exchange,
        ticket: Ticket,
        priority: int,
    ) -> tuple[int, Route]:
        """Answer the client; returns (status, the route of the tier that answered)."""
        cascade, name = d.alias.cascade, d.alias.name
        headers = {"x-request-id": rid.decode()}
        bodies: dict[Call, dict[str, Any]] = {}
        state, step = cascade.start(d.plan)
        while True:
            results = await asyncio.gather(*(self._call(d, c, body, headers, priority) for c in step.calls))
            errors = [err for _, _, err in results if err is not None]
            for answer, parsed, _ in results:
                if parsed is not None:
                    bodies[answer.call] = parsed
            with self._trace.span("cascade.judge"):
                decision = cascade.judge(d.plan, state, d.prompt, [a for a, _, _ in results])
            if isinstance(decision, Escalate):
                self._metrics.router_escalations.labels(name, decision.reason.value).inc()
                state, step = decision.state, decision.step
                continue
            break
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
        route = d.routes[decision.tier]
        escalations = len(decision.state.escalations)
        escalated = "true" if escalations else "false"
        if req.notes is not None:
            req.notes["escalations"] = escalations
        self._metrics.router_decisions.labels(name, route.pool.config.name, escalated).inc()
        route.metrics.input_tokens.inc(usage["prompt_tokens"])
        route.metrics.output_tokens.inc(usage["completion_tokens"])
        parsed = {**bodies[decision.answer.call], "usage": usage}
        extra = [
            (b"x-request-id", rid),
            (b"x-llmgw-tier", route.pool.config.name.encode()),
            (b"x-llmgw-escalations", str(escalations).encode()),
            *ticket.headers,
        ]
        req.done()
        if body.get("stream"):
            data = sse_of(parsed, usage if client_usage else None)
            await send({"type": "http.response.start", "status": 200, "headers": [*_SSE, *extra]})
        else:
            data = orjson.dumps(parsed)
            start = [_JSON, (b"content-length", str(len(data)).encode()), *extra]
            await send({"type": "http.response.start", "status": 200, "headers": start})
        if req.capture is not None:
            req.capture.append(data)
        await send({"type": "http.response.body", "body": data, "more_body": False})
        return 200, route
