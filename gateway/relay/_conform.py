"""Stage 7, call: the output-conformance policy of a direct alias (gateway/guardrails/conformance.py).

`Conform.unary` judges a unary answer: a conforming one goes out as it came; a violation is counted and
then let through (`pass`), answered with 502 `output_schema_violation` (`error`), or retried once on
the same pool (`retry_once`; the retry's answer goes out if it conforms, else the 502). Both calls'
tokens are charged. `Conform.buffered` serves a stream under `retry_once`: the pool is called unary
(the answer must be whole before it can be judged, and a retry must not follow half a stream), then
the accepted answer is replayed as SSE, as a buffered cascade does. Streams under `pass` and `error`
are relayed live and judged at their end (gateway/relay/_stream.py with `StreamCheck`).
"""

from __future__ import annotations

from typing import Any

from gateway.edge.exchange import SSE_HEADERS, Send
from gateway.errors import OutputSchemaError
from gateway.guardrails.conformance import Check, StreamCheck, answers_conform
from gateway.guardrails.screen import Event
from gateway.guardrails.stage import InputGuard
from gateway.record import RequestRecord
from gateway.relay._admit import Admit
from gateway.relay._answer import AnswerReader
from gateway.routing.aliases import call_body, sse_of
from gateway.routing.route import Route
from gateway.upstream.calls import CallSpec, PoolCalls

_VIOLATION = "the model's answer does not conform to the request's response_format JSON schema"


class Conform:
    def __init__(self, calls: PoolCalls, admit: Admit, answers: AnswerReader, guard: InputGuard) -> None:
        self._calls = calls
        self._admit = admit
        self._answers = answers
        self._guard = guard

    def count(self, req: RequestRecord, action: str) -> None:
        """One json_schema event, recorded as the input guardrails' are (counter, request log, trace;
        never the answer's text)."""
        self._guard.record(req, [Event("json_schema", action, "response")])

    def failure(self, req: RequestRecord) -> OutputSchemaError:
        self.count(req, "failed")
        return OutputSchemaError(_VIOLATION + " (the gateway's json_schema guardrail)")

    def stream_check(self, req: RequestRecord, check: Check) -> StreamCheck:
        """A live stream's end-of-stream judge (`error`: a final error event; `pass`: counted only)."""
        guard = req.ask.guard if req.ask is not None else None
        fails = guard is not None and guard.json_schema == "error"
        return StreamCheck(check, OutputSchemaError(_VIOLATION).body() if fails else None)

    def streamed(self, req: RequestRecord, check: StreamCheck) -> None:
        """Count a live stream's verdict once it ended."""
        if check.violated:
            self.count(req, "failed" if check.fails else "passed")

    async def unary(
        self, req: RequestRecord, route: Route, call: CallSpec, parsed: dict[str, Any]
    ) -> tuple[bytes, dict[str, Any]] | None:
        """None: `parsed` may go out as the pool sent it. Else the retry's (bytes, body) to send instead;
        raises the 502 when the policy says so."""
        ask, answer, budget = req.ask, req.answer, req.budget
        assert ask is not None and answer is not None and budget is not None
        check, guard = ask.schema, ask.guard
        if check is None or guard is None or answers_conform(parsed, check):
            return None
        if guard.json_schema == "pass":
            self.count(req, "passed")
            return None
        if guard.json_schema != "retry_once":
            raise self.failure(req)
        self.count(req, "retried")
        first = answer.usage_in, answer.usage_out  # the first answer's, as its caller recorded them
        data = await self._calls.unary(route.pool, call)
        retry = self._answers.read(answer, budget, route.pool.config.name, data)
        answer.usage_in += first[0]  # the first call's tokens were spent too
        answer.usage_out += first[1]
        if not answers_conform(retry, check):
            raise self.failure(req)
        return data, retry

    async def buffered(self, req: RequestRecord, route: Route, call: CallSpec, send: Send) -> None:
        """A stream under `retry_once`: judged whole, replayed as SSE."""
        x, prep, answer, budget = req.http, req.prep, req.answer, req.budget
        assert prep is not None and answer is not None and budget is not None
        payload = call_body(prep.body, str(prep.body.get("model")), False)
        unary = CallSpec(
            call.kind, payload, call.headers, call.key, call.priority, adapter=call.adapter, flow=call.flow
        )
        data = await self._calls.unary(route.pool, unary)
        ticket = await self._admit.granted(req, budget)
        parsed = self._answers.read(answer, budget, route.pool.config.name, data)
        retried = await self.unary(req, route, unary, parsed)
        if retried is not None:
            parsed = retried[1]
        usage = {"prompt_tokens": answer.usage_in, "completion_tokens": answer.usage_out}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        route.count_usage(answer.usage_in, answer.usage_out)
        body = sse_of(parsed, usage if prep.client_usage else None)
        if answer.capture is not None:
            answer.capture.append(body)
        x.done()
        head = [*SSE_HEADERS, (b"x-request-id", x.rid), *ticket.headers]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        await send({"type": "http.response.body", "body": body, "more_body": False})
        x.status = 200
