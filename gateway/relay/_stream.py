"""Stage 7, call (stream): a pool's SSE stream relayed event by event, without re-serializing.

The response starts only when the first upstream event is in hand (gateway.upstream.calls), so every
failure before it is a clean JSON error; every failure after it ends the stream with an error event
and `[DONE]`. A stream metered as it runs is topped up each time it reaches its reservation; when the
budget refuses more, the pool is stopped and the stream ends as `max_tokens` would end it. A stream
the client stops reading, or leaves, closes the upstream connection: vLLM then aborts the request.
"""

from __future__ import annotations

import asyncio
import contextlib
from time import perf_counter

from gateway.budget.admission import Admissions, Ticket
from gateway.budget.usage import UsageFaults
from gateway.edge.exchange import SSE_HEADERS, Kind, Send
from gateway.errors import UpstreamError, UpstreamUnavailableError
from gateway.guardrails.conformance import StreamCheck
from gateway.observability.metrics import Metrics
from gateway.relay._admit import Admit
from gateway.relay._conform import Conform
from gateway.relay._context import RequestContext
from gateway.routing.route import Route
from gateway.upstream.calls import UPSTREAM_FAILURES, CallSpec, OpenStream, PoolCalls
from gateway.upstream.sse import error_event

_SHUTDOWN_TAIL = error_event(
    UpstreamUnavailableError("the gateway is shutting down; retry the request").body()
)


class StreamCall:
    def __init__(
        self, calls: PoolCalls, admit: Admit, admissions: Admissions, metrics: Metrics, conform: Conform
    ) -> None:
        self._calls = calls
        self._conform = conform
        self._admit = admit
        self._admissions = admissions
        self._metrics = metrics
        self._faults = UsageFaults(metrics)

    async def __call__(self, ctx: RequestContext, route: Route, call: CallSpec, send: Send) -> None:
        pool = route.pool
        overhead = perf_counter() - ctx.t0
        opened: OpenStream | None = None
        ticket: Ticket | None = None
        verdict, t_first, t_last = "neutral", 0.0, 0.0
        try:
            opened = await self._calls.open_stream(pool, call)
            ticket = await self._admit.granted(ctx)
            # The alias's json_schema policy (pass / error), judged at the stream's end (which may be
            # in the first read already).
            check = self._conform.stream_check(ctx, ctx.schema) if ctx.schema is not None else None
            if check is not None:
                opened.first = check.feed(opened.first)
            t_first = t_last = await self._start(ctx, route, opened, ticket, send)
            overhead += perf_counter() - t_first
            verdict, t_out, relay_cost = await self._relay(ctx, route, opened, (ticket, check), send)
            t_last = t_out or t_first
            overhead += relay_cost
            ctx.status = 200
        finally:
            if opened is not None:
                pool.replicas.release(opened.replica, verdict, t_first - ctx.t0 if t_first else None)
                self._end(ctx, route, opened, ticket, (verdict, t_first, t_last))
                self._metrics.overhead_of(ctx.endpoint.value).observe(overhead)

    async def _start(
        self, ctx: RequestContext, route: Route, opened: OpenStream, ticket: Ticket, send: Send
    ) -> float:
        """Send the response head and the first event; returns when (perf_counter)."""
        t = perf_counter()
        headers = [*SSE_HEADERS, (b"x-request-id", ctx.rid), *ticket.headers]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": opened.first, "more_body": True})
        if ctx.capture is not None:
            ctx.capture.append(opened.first)
        route.metrics.ttft.observe(t - ctx.t0)
        ctx.ttft = t - ctx.t0
        return t

    async def _relay(
        self,
        ctx: RequestContext,
        route: Route,
        opened: OpenStream,
        admitted: tuple[Ticket, StreamCheck | None],
        send: Send,
    ) -> tuple[str, float, float]:
        """The rest of the stream and its tail: (verdict, time of the last output event, the relay's own
        CPU time). `admitted`: the ticket, and the schema judge of the alias's json_schema policy."""
        ticket, check = admitted
        name = route.pool.config.name
        splitter, read, capture = opened.splitter, opened.read, ctx.capture
        verdict, t_last, overhead, tail = "neutral", 0.0, 0.0, b""
        try:
            while True:
                if ctx.topup and ticket.topping_up and splitter.produced >= ticket.output_reserved:
                    if not splitter.saw_done and not await self._admissions.top_up(ticket):
                        # The budget refuses more: stop the pool, end the stream like max_tokens would.
                        choices = ctx.prep.choices if ctx.prep is not None else 1
                        tail = splitter.length_tail(ctx.kind is Kind.CHAT, _client_usage(ctx), choices)
                        break
                chunk = await read()
                if not chunk:
                    break
                t = perf_counter()
                out, has_output = splitter.feed(chunk)
                if has_output:
                    t_last = t
                if check is not None and out:
                    out = check.feed(out)
                if out:
                    if capture is not None:
                        capture.append(out)
                    overhead += perf_counter() - t
                    await send({"type": "http.response.body", "body": out, "more_body": True})
            if not splitter.saw_done and not tail:
                self._metrics.upstream_errors.labels(name, "truncated_stream").inc()
                verdict = "fail"
                err = UpstreamError(f"pool '{name}' ended the stream without [DONE]")
                tail = error_event(err.body())
            elif splitter.saw_done:
                verdict = "ok"
        except UPSTREAM_FAILURES as exc:
            verdict = "fail"
            tail = error_event(self._calls.failed(route.pool, exc, ctx.rid.decode()).body())
        except asyncio.CancelledError:
            if not ctx.client_gone:
                # Shutdown after the drain period: end the stream the way the client understands.
                with contextlib.suppress(Exception):
                    await send({"type": "http.response.body", "body": _SHUTDOWN_TAIL, "more_body": False})
            raise
        if check is not None:
            self._conform.streamed(ctx, check)
        ctx.done()
        await send({"type": "http.response.body", "body": tail, "more_body": False})
        return verdict, t_last, overhead

    def _end(
        self,
        ctx: RequestContext,
        route: Route,
        opened: OpenStream,
        ticket: Ticket | None,
        timing: tuple[str, float, float],
    ) -> None:
        """Usage and timings of a stream that started (whatever ended it), and its connection."""
        verdict, t_first, t_last = timing
        splitter = opened.splitter
        if splitter.usage is not None:
            ctx.record(splitter.usage)  # the final chunk's, or the last cumulative one
        elif splitter.saw_done:
            # A whole stream without usage (asked for on every stream): charged its reservation, the
            # output topped up so far included.
            ctx.record(None)
            ctx.usage_out = max(splitter.events, ticket.output_reserved if ticket else ctx.granted_out)
        else:
            ctx.usage_out = splitter.events  # broken off: what the gateway counted
        if ctx.fault is not None:
            self._faults.count(route.pool.config.name, ctx.fault, splitter.usage)
        route.count_usage(ctx.usage_in, ctx.usage_out)
        ct = ctx.usage_out
        if splitter.saw_done and ct > 1 and t_last > t_first:
            ctx.tpot = (t_last - t_first) / (ct - 1)
            route.metrics.tpot.observe(ctx.tpot)
        ctx.broken = verdict == "fail"
        # Closing (not releasing) an unfinished response drops the connection, which is how
        # vLLM learns that nobody is reading and aborts the request.
        if splitter.saw_done:
            opened.resp.release()
        else:
            opened.resp.close()


def _client_usage(ctx: RequestContext) -> bool:
    return ctx.prep is not None and ctx.prep.client_usage
