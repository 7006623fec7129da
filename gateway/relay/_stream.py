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
from gateway.budget.usage import UsageFaults
from gateway.edge.exchange import SSE_HEADERS, Kind, Message, Send
from gateway.errors import TransportError, UpstreamError, UpstreamUnavailableError
from gateway.guardrails.conformance import StreamCheck
from gateway.observability.metrics import Metrics
from gateway.relay._admit import Admit
from gateway.relay._conform import Conform
from gateway.relay._context import RequestContext
from gateway.routing.route import Route
from gateway.sse import DONE, KeepingSplitter, SSESplitter, error_event
from gateway.upstream.calls import CallSpec, OpenStream, PoolCalls

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
        splitter = self._splitter(ctx, pool.config.name, call)
        opened: OpenStream | None = None
        ticket: Ticket | None = None
        verdict, t_first, t_last = "neutral", 0.0, 0.0
        try:
            opened = await self._calls.open_stream(pool, call, splitter)
            ticket = await self._admit.granted(ctx)
            # The alias's json_schema policy (pass / error), judged at the stream's end (which may be
            # in the first read already).
            check = self._conform.stream_check(ctx, ctx.schema) if ctx.schema is not None else None
            first = checked = opened.first
            if check is not None:
                checked = check.feed(first)
            t_first = t_last = await self._start(
                ctx, route, ticket, send, _body(checked, splitter, checked is first)
            )
            overhead += perf_counter() - t_first
            verdict, t_out, relay_cost = await self._relay(ctx, route, opened, splitter, ticket, check, send)
            t_last = t_out or t_first
            overhead += relay_cost
            ctx.status = 200
        finally:
            if opened is not None:
                # One call ends the stream: its connection (reused only when complete) and the lease.
                opened.close(verdict, splitter.saw_done, t_first - ctx.t0 if t_first else None)
                self._end(ctx, route, splitter, ticket, (verdict, t_first, t_last))
                self._metrics.overhead_of(ctx.endpoint.value).observe(overhead)

    @staticmethod
    def _splitter(ctx: RequestContext, pool: str, call: CallSpec) -> SSESplitter:
        """The stream's policy: cut the usage chunk unless the client asked for usage; strip the
        per-chunk usage the gateway asked for (a stream metered as it runs: `ctx.topup`)."""
        strip = not (ctx.prep is not None and ctx.prep.client_usage)
        rid = call.headers.get("x-request-id")
        if ctx.reply is not None:  # a dialect's request: its translator takes the events found here
            return KeepingSplitter(strip, ctx.topup, pool=pool, rid=rid)
        return SSESplitter(strip, ctx.topup, pool=pool, rid=rid)

    async def _start(
        self, ctx: RequestContext, route: Route, ticket: Ticket, send: Send, first: Message
    ) -> float:
        """Send the response head and the first event's body message; returns when (perf_counter)."""
        t = perf_counter()
        headers = [*SSE_HEADERS, (b"x-request-id", ctx.rid), *ticket.headers]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send(first)
        if ctx.capture is not None:
            ctx.capture.append(first["body"])
        route.metrics.ttft.observe(t - ctx.t0)
        ctx.ttft = t - ctx.t0
        return t

    async def _relay(
        self,
        ctx: RequestContext,
        route: Route,
        opened: OpenStream,
        splitter: SSESplitter,
        ticket: Ticket,
        check: StreamCheck | None,
        send: Send,
    ) -> tuple[str, float, float]:
        """The rest of the stream and its tail: (verdict, time of the last output event, the relay's own
        CPU time). `check`: the schema judge of the alias's json_schema policy."""
        name = route.pool.config.name
        read, capture = opened.read, ctx.capture
        keeping = isinstance(splitter, KeepingSplitter)
        verdict, t_last, overhead, tail = "neutral", 0.0, 0.0, b""
        try:
            while True:
                if ctx.topup and ticket.topping_up and splitter.produced >= ticket.output_reserved:
                    if not splitter.saw_done and not await self._admissions.top_up(ticket):
                        # The budget refuses more: stop the pool, end the stream like max_tokens would.
                        choices = ctx.prep.choices if ctx.prep is not None else 1
                        tail = length_tail(splitter, ctx.kind is Kind.CHAT, _client_usage(ctx), choices)
                        break
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
        splitter: SSESplitter,
        ticket: Ticket | None,
        timing: tuple[str, float, float],
    ) -> None:
        """Usage and timings of a stream that started (whatever ended it)."""
        verdict, t_first, t_last = timing
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


def _client_usage(ctx: RequestContext) -> bool:
    return ctx.prep is not None and ctx.prep.client_usage


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
