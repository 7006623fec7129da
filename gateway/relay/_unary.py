"""Stage 7, call (unary): one pool call, its answer relayed as the pool's bytes.

The answer is parsed once, for its usage only (`_answer.AnswerReader`: checked against the reservation);
the client gets the bytes the pool sent (or, under a `json_schema: retry_once` policy whose first answer
violates the request's schema, the retry's: gateway/relay/_conform.py).
"""

from __future__ import annotations

from time import perf_counter

from gateway.edge.exchange import JSON_HEADERS, Send
from gateway.observability.metrics import Metrics
from gateway.relay._admit import Admit
from gateway.relay._answer import AnswerReader
from gateway.relay._conform import Conform
from gateway.relay._context import RequestContext
from gateway.routing.route import Route
from gateway.upstream.calls import CallSpec, PoolCalls


class UnaryCall:
    def __init__(
        self, calls: PoolCalls, admit: Admit, metrics: Metrics, conform: Conform, answers: AnswerReader
    ) -> None:
        self._calls = calls
        self._conform = conform
        self._admit = admit
        self._metrics = metrics
        self._answers = answers

    async def __call__(self, ctx: RequestContext, route: Route, call: CallSpec, send: Send) -> None:
        pool = route.pool
        overhead = perf_counter() - ctx.t0
        data = await self._calls.unary(pool, call)
        ticket = await self._admit.granted(ctx)
        t_back = perf_counter()
        parsed = self._answers.read(ctx, pool.config.name, data)
        if ctx.schema is not None:  # the alias's json_schema policy: pass, retry once, or refuse
            retried = await self._conform.unary(ctx, route, call, parsed)
            if retried is not None:
                data = retried[0]
        route.count_usage(ctx.usage_in, ctx.usage_out)
        if ctx.capture is not None:
            ctx.capture.append(data)
        ctx.done()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    *JSON_HEADERS,
                    (b"content-length", str(len(data)).encode()),
                    (b"x-request-id", ctx.rid),
                    *ticket.headers,
                ],
            }
        )
        await send({"type": "http.response.body", "body": data, "more_body": False})
        self._metrics.overhead_of(ctx.endpoint.value).observe(overhead + perf_counter() - t_back)
        ctx.status = 200
