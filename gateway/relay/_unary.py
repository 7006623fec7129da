"""Stage 7, call (unary): one pool call, its answer relayed as the pool's bytes.

The answer is parsed once, for its usage only (`_answer.AnswerReader`: checked against the reservation);
the client gets the bytes the pool sent (or, under a `json_schema: retry_once` policy whose first answer
violates the request's schema, the retry's: gateway/relay/_conform.py).
"""

from __future__ import annotations

from time import perf_counter

from gateway.edge.exchange import JSON_HEADERS, Send
from gateway.observability.metrics import Metrics
from gateway.record import Answer, Budget, RequestRecord
from gateway.relay._admit import Admit
from gateway.relay._answer import AnswerReader
from gateway.relay._conform import Conform
from gateway.routing.route import Route
from gateway.upstream.calls import CallSpec, PoolCalls


class UnaryCall:
    def __init__(
        self,
        calls: PoolCalls,
        admit: Admit,
        metrics: Metrics,
        conform: Conform | None,
        answers: AnswerReader,
    ) -> None:
        self._calls = calls
        self._conform = conform  # None: no guardrails profile, so no json_schema policy
        self._admit = admit
        self._metrics = metrics
        self._answers = answers

    async def call(
        self, req: RequestRecord, answer: Answer, budget: Budget, route: Route, call: CallSpec, send: Send
    ) -> None:
        """One call to `route`'s pool; its `answer` (`req.answer`: usage, capture) relayed as it came,
        its usage checked against `budget`."""
        x = req.http
        pool = route.pool
        overhead = perf_counter() - x.t0
        data = await self._calls.unary(pool, call)
        ticket = await self._admit.granted(req, budget)
        t_back = perf_counter()
        parsed = self._answers.read(answer, budget, pool.config.name, data)
        if self._conform is not None and req.ask is not None and req.ask.schema is not None:
            # The alias's json_schema policy: pass, retry once, or refuse.
            retried = await self._conform.unary(req, route, call, parsed)
            if retried is not None:
                data = retried[0]
        route.count_usage(answer.usage_in, answer.usage_out)
        if call.flow is not None:  # a held request's hold-queue charge, corrected to what it used
            pool.replicas.settle(call.flow, answer.usage_in + answer.usage_out)
        if answer.capture is not None:
            answer.capture.append(data)
        x.done()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    *JSON_HEADERS,
                    (b"content-length", str(len(data)).encode()),
                    (b"x-request-id", x.rid),
                    *ticket.headers,
                ],
            }
        )
        await send({"type": "http.response.body", "body": data, "more_body": False})
        self._metrics.overhead_of(x.endpoint.value).observe(overhead + perf_counter() - t_back)
        x.status = 200
