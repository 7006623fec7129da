"""Stage 7, call (stream): a pool's SSE stream relayed event by event, without re-serializing.

The response starts only when the first upstream event is in hand (gateway.upstream.calls), so every
failure before it is a clean JSON error; every failure after it (a `TransportError` from the read)
ends the stream with an error event and `[DONE]`. A stream metered as it runs is topped up each time
it reaches its reservation; when the budget refuses more, the pool is stopped and the stream ends as
`max_tokens` would end it (`length_tail`). A stream the client stops reading, or leaves, closes the
upstream connection: vLLM then aborts the request.

The stream's policy is the relay's, set here on the splitter (gateway.sse) the call reads with: the
usage-only chunk is cut unless the client asked for usage, per-chunk usage is stripped when the
gateway asked for it to meter the stream. A dialect's request gets a `KeepingSplitter`: the events
it found go to the dialect's translator with the bytes (`"events"` of the body message), which then
does not split them again (gateway.dialects.exchange).
"""

from __future__ import annotations

import asyncio
import contextlib
from time import perf_counter
from typing import Any

import orjson

from gateway.budget.admission import Admissions, Ticket
from gateway.budget.usage import UsageFaults, cached_of, checked
from gateway.edge.exchange import SSE_HEADERS, Kind, Message, Send
from gateway.errors import TransportError, UpstreamError, UpstreamUnavailableError
from gateway.guardrails.conformance import StreamCheck
from gateway.observability.metrics import Metrics
from gateway.record import Answer, Budget, RequestRecord
from gateway.relay._admit import Admit
from gateway.relay._conform import Conform
from gateway.routing.route import Route
from gateway.sse import DONE, KeepingSplitter, SSESplitter, error_event
from gateway.upstream.calls import CallSpec, OpenStream, PoolCalls

_SHUTDOWN_TAIL = error_event(
    UpstreamUnavailableError("the gateway is shutting down; retry the request").body()
)


class StreamCall:
    def __init__(
        self,
        calls: PoolCalls,
        admit: Admit,
        admissions: Admissions,
        metrics: Metrics,
        conform: Conform | None,
    ) -> None:
        self._calls = calls
        self._conform = conform  # None: no guardrails profile, so no json_schema policy
        self._admit = admit
        self._admissions = admissions
        self._metrics = metrics
        self._faults = UsageFaults(metrics)

    async def call(
        self, req: RequestRecord, answer: Answer, budget: Budget, route: Route, call: CallSpec, send: Send
    ) -> None:
        """One streamed call to `route`'s pool, relayed event by event; its usage, capture and timings
        in `answer` (`req.answer`), checked and topped up against `budget`."""
        x = req.http
        pool = route.pool
        overhead = perf_counter() - x.t0
        splitter = self._splitter(req, budget, pool.config.name, call)
        opened: OpenStream | None = None
        ticket: Ticket | None = None
        verdict, t_first, t_last = "neutral", 0.0, 0.0
        try:
            opened = await self._calls.open_stream(pool, call, splitter)
            ticket = await self._admit.granted(req, budget)
            # The alias's json_schema policy (pass / error), judged at the stream's end (which may be
            # in the first read already).
            check = self._check(req) if self._conform is not None else None
            first = checked_first = opened.first
            if check is not None:
                checked_first = check.feed(first)
            t_first = t_last = await self._start(
                req, answer, route, ticket, send, _body(checked_first, splitter, checked_first is first)
            )
            overhead += perf_counter() - t_first
            verdict, t_out, relay_cost = await self._relay(
                req, answer, budget, route, opened, splitter, ticket, check, send
            )
            t_last = t_out or t_first
            overhead += relay_cost
            x.status = 200
        finally:
            if opened is not None:
                # One call ends the stream: its connection (reused only when complete) and the lease.
                opened.close(verdict, splitter.saw_done, t_first - x.t0 if t_first else None)
                self._end(answer, budget, route, splitter, ticket, (verdict, t_first, t_last))
                if call.flow is not None:  # a held request's hold-queue charge, corrected to what it used
                    pool.replicas.settle(call.flow, answer.usage_in + answer.usage_out, answer.ttft)
                self._metrics.overhead_of(x.endpoint.value).observe(overhead)

    def _check(self, req: RequestRecord) -> StreamCheck | None:
        """The end-of-stream judge of the alias's json_schema policy, when the request has a schema."""
        conform, ask = self._conform, req.ask
        if conform is None or ask is None or ask.schema is None:  # (the caller checked `conform`)
            return None
        return conform.stream_check(req, ask.schema)

    @staticmethod
    def _splitter(req: RequestRecord, budget: Budget, pool: str, call: CallSpec) -> SSESplitter:
        """The stream's policy: cut the usage chunk unless the client asked for usage; strip the
        per-chunk usage the gateway asked for (a stream metered as it runs: `budget.topup`)."""
        strip = not (req.prep is not None and req.prep.client_usage)
        rid = call.headers.get("x-request-id")
        if req.http.reply is not None:  # a dialect's request: its translator takes the events found here
            return KeepingSplitter(strip, budget.topup, pool=pool, rid=rid)
        return SSESplitter(strip, budget.topup, pool=pool, rid=rid)

    async def _start(
        self, req: RequestRecord, answer: Answer, route: Route, ticket: Ticket, send: Send, first: Message
    ) -> float:
        """Send the response head and the first event's body message; returns when (perf_counter)."""
        x = req.http
        t = perf_counter()
        headers = [*SSE_HEADERS, (b"x-request-id", x.rid), *ticket.headers]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send(first)
        if answer.capture is not None:
            answer.capture.append(first["body"])
        ttft = answer.ttft = t - x.t0
        route.metrics.ttft.observe(ttft)
        return t

    async def _relay(
        self,
        req: RequestRecord,
        answer: Answer,
        budget: Budget,
        route: Route,
        opened: OpenStream,
        splitter: SSESplitter,
        ticket: Ticket,
        check: StreamCheck | None,
        send: Send,
    ) -> tuple[str, float, float]:
        """The rest of the stream and its tail: (verdict, time of the last output event, the relay's own
        CPU time). `check`: the schema judge of the alias's json_schema policy."""
        x = req.http
        name = route.pool.config.name
        read, capture = opened.read, answer.capture
        keeping = isinstance(splitter, KeepingSplitter)
        verdict, t_last, overhead, tail = "neutral", 0.0, 0.0, b""
        try:
            while True:
                if budget.topup and ticket.topping_up and splitter.produced >= ticket.output_reserved:
                    if not splitter.saw_done and not await self._admissions.top_up(ticket):
                        # The budget refuses more: stop the pool, end the stream like max_tokens would.
                        prep = req.prep
                        choices = prep.choices if prep is not None else 1
                        client_usage = prep is not None and prep.client_usage
                        tail = length_tail(splitter, x.kind is Kind.CHAT, client_usage, choices)
                        break
                if splitter.saw_done and not x.finished:
                    # The client has the whole answer ([DONE], a dialect's completed event): it may hang
                    # up while the pool's chunked body ends; that is not a client leaving early (499).
                    x.done()
                chunk = await read()
                if not chunk:
                    break
                t = perf_counter()
                out, has_output = splitter.feed(chunk)
                if has_output:
                    t_last = t
                split = out
                if check is not None and out:
                    out = check.feed(out)
                if out:
                    if capture is not None:
                        capture.append(out)
                    overhead += perf_counter() - t
                    if keeping:
                        await send(_body(out, splitter, out is split))
                    else:
                        await send({"type": "http.response.body", "body": out, "more_body": True})
            if not splitter.saw_done and not tail:
                self._metrics.upstream_errors.labels(name, "truncated_stream").inc()
                verdict = "fail"
                err = UpstreamError(f"pool '{name}' ended the stream without [DONE]")
                tail = error_event(err.body())
            elif splitter.saw_done:
                verdict = "ok"
        except TransportError as exc:
            verdict = "fail"
            tail = error_event(self._calls.failed(route.pool, exc, x.rid.decode()).body())
        except asyncio.CancelledError:
            if not x.client_gone:
                # Shutdown after the drain period: end the stream the way the client understands.
                with contextlib.suppress(Exception):
                    await send({"type": "http.response.body", "body": _SHUTDOWN_TAIL, "more_body": False})
            raise
        if check is not None and self._conform is not None:
            self._conform.streamed(req, check)
        x.done()
        await send({"type": "http.response.body", "body": tail, "more_body": False})
        return verdict, t_last, overhead

    def _end(
        self,
        answer: Answer,
        budget: Budget,
        route: Route,
        splitter: SSESplitter,
        ticket: Ticket | None,
        timing: tuple[str, float, float],
    ) -> None:
        """Usage and timings of a stream that started (whatever ended it)."""
        verdict, t_first, t_last = timing
        usage, saw_done = splitter.usage, splitter.saw_done
        if usage is not None or saw_done:
            # The final chunk's usage, or the last cumulative one, checked against the reservation.
            usage_in, usage_out, fault = checked(usage, budget.reserved_in, budget.granted_out)
            if usage is None:
                # A whole stream without usage (asked for on every stream): charged its reservation,
                # the output topped up so far included.
                usage_out = max(splitter.events, ticket.output_reserved if ticket else budget.granted_out)
            answer.usage_in, answer.usage_out, answer.fault = usage_in, usage_out, fault
            answer.usage_cached = cached_of(usage, usage_in)
            answer.reported = True
            if fault is not None:
                self._faults.count(route.pool.config.name, fault, usage)
        else:
            usage_in = answer.usage_in
            usage_out = answer.usage_out = splitter.events  # broken off: what the gateway counted
        route.count_usage(usage_in, usage_out)
        if saw_done and usage_out > 1 and t_last > t_first:
            tpot = answer.tpot = (t_last - t_first) / (usage_out - 1)
            route.metrics.tpot.observe(tpot)
        answer.broken = verdict == "fail"


def _body(out: bytes, splitter: SSESplitter, intact: bool = True) -> Message:
    """A body message of the stream. A dialect's (a KeepingSplitter's) carries the data of the events
    in `out` (gateway.dialects.exchange translates them without splitting `out` again), unless the
    schema check rewrote `out` (not `intact`): then the dialect reads the bytes."""
    if isinstance(splitter, KeepingSplitter):
        events = splitter.take()
        if intact:
            return {"type": "http.response.body", "body": out, "more_body": True, "events": events}
    return {"type": "http.response.body", "body": out, "more_body": True}


def length_tail(splitter: SSESplitter, chat: bool, client_usage: bool, choices: int) -> bytes:
    """The end of a stream cut by the budget: a `finish_reason: "length"` chunk per choice, the usage
    chunk when the client asked for it, [DONE] (the chunks' id/object/created/model: the pool's)."""
    meta = splitter.meta or {}
    head = {k: meta[k] for k in ("id", "object", "created", "model") if k in meta}
    out = b""
    for i in range(choices):
        choice: dict[str, Any] = (
            {"index": i, "delta": {}, "logprobs": None, "finish_reason": "length"}
            if chat
            else {"index": i, "text": "", "logprobs": None, "finish_reason": "length"}
        )
        out += b"data: " + orjson.dumps({**head, "choices": [choice]}) + b"\n\n"
    if client_usage and splitter.usage is not None:
        out += b"data: " + orjson.dumps({**head, "choices": [], "usage": splitter.usage}) + b"\n\n"
    return out + DONE
