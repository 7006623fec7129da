"""The request hot path: OpenAI request in, pool answer out, as a bare ASGI handler.

`Relay.handle` runs one request through named stages over one `RequestContext`:

    authenticate (tenancy.auth) -> read body (relay._body) -> translate (gateway.dialects: Responses,
    Messages) -> normalize (relay.normalize)
    -> cache lookup (relay._cached) -> route (routing.table) -> admit (relay._admit)
    -> call: unary (relay._unary) | stream (relay._stream) | cascade (routing.cascade_runner)
    -> settle (relay._admit) -> observe (observability.observer)

Every failure before the response starts is a clean JSON error with the right status; every failure
after a stream started ends it with an error event (relay._stream). A watcher (edge.exchange) waits on
the ASGI receive channel for `http.disconnect`; when the client leaves, the handler task is cancelled,
which closes the upstream connection, which makes vLLM abort the request and free its KV cache. The
handler is a plain ASGI callable rather than a FastAPI route: measured here, routing, dependency
injection and Response objects cost more than the relay itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter
from typing import TYPE_CHECKING, Any

import orjson

from gateway.budget.admission import Admissions
from gateway.config import Policy
from gateway.dialects import Dialect
from gateway.dialects.exchange import DialectSend
from gateway.dialects.messages import MessagesDialect, count_request
from gateway.dialects.responses import ResponsesDialect
from gateway.edge.exchange import (
    JSON_HEADERS,
    ClientGone,
    Kind,
    Receive,
    RequestHeaders,
    RequestIds,
    Scope,
    Send,
    send_error,
)
from gateway.errors import (
    AuthenticationError,
    GatewayError,
    InvalidRequestError,
    ModelNotFoundError,
    PermissionDeniedError,
)
from gateway.guardrails.conformance import schema_check
from gateway.guardrails.plan import GuardTable
from gateway.guardrails.stage import InputGuard
from gateway.observability.feedback_shared import Delivered
from gateway.observability.metrics import Metrics
from gateway.observability.observer import Observer
from gateway.relay._admit import Admit
from gateway.relay._answer import AnswerReader
from gateway.relay._body import read_body
from gateway.relay._cached import CacheStage
from gateway.relay._conform import Conform
from gateway.relay._context import RequestContext
from gateway.relay._failure import answer_bug
from gateway.relay._stream import StreamCall
from gateway.relay._unary import UnaryCall
from gateway.relay.normalize import alias_of, input_size, parse_body, prepare
from gateway.relay.response_cache import BYPASS, ResponseCache
from gateway.routing.aliases import RoutedAlias
from gateway.routing.cascade_runner import CascadeRunner
from gateway.routing.explorer import Delivery, Explorer
from gateway.routing.learning import Learning, decode_outcome, encode_outcome
from gateway.routing.route import Route
from gateway.routing.table import Decided, Routes
from gateway.tenancy.auth import Authenticator, Principal
from gateway.upstream.calls import CallSpec, PoolCalls
from gateway.upstream.pool_client import PoolClient
from gateway.upstream.transport import Transports

if TYPE_CHECKING:
    from router.calibration import LiveCalibration  # ddsketch loads only when a live cut is used

__all__ = ["Relay", "RelayParts"]

_log = logging.getLogger("llmgw.relay")
# Held requests (pool admission) are served by tier priority, then in arrival order.
_PRIORITY = {"premium": 1, "standard": 0}


@dataclass(frozen=True, slots=True)
class RelayParts:
    """What the relay is built from (the app lifespan builds them)."""

    policy: Policy
    pools: dict[str, PoolClient]
    transports: Transports  # how each replica is reached (gateway.upstream.transport)
    metrics: Metrics
    auth: Authenticator
    admissions: Admissions
    ids: RequestIds
    max_body_bytes: int
    max_json_depth: int = 64
    routed: dict[str, RoutedAlias] | None = None
    observer: Observer | None = None
    cache: ResponseCache | None = None


class Relay:
    def __init__(self, parts: RelayParts) -> None:
        metrics = parts.metrics
        self._metrics = metrics
        self._max_body = parts.max_body_bytes
        self._max_depth = parts.max_json_depth
        self._auth = parts.auth
        self._ids = parts.ids
        self._running = 0  # requests between arrival and their last byte (gates speculative admission)
        self.observer = parts.observer or Observer(parts.policy, metrics)
        trace = self._trace = self.observer.tracing
        self._routes = Routes(parts.policy, parts.pools, metrics, parts.routed)
        calls = PoolCalls(parts.transports, metrics, trace)
        self._admissions = parts.admissions
        self._admit = Admit(parts.admissions, parts.ids, parts.policy.limits.input_bytes_per_token, trace)
        answers = AnswerReader(metrics)
        # Input guardrails (gateway/guardrails/): None when the policy sets none, so they cost nothing.
        guards = GuardTable(parts.policy)
        input_guard = InputGuard(guards, metrics, trace)  # also records the json_schema policy's events
        self._guard = input_guard if guards.active else None
        self._conform = Conform(calls, self._admit, answers, input_guard)  # response_format json_schema
        self._unary = UnaryCall(calls, self._admit, metrics, self._conform, answers)
        self._stream = StreamCall(calls, self._admit, parts.admissions, metrics, self._conform)
        self._explorer = Explorer(metrics, calls, parts.admissions)
        self._cascades = CascadeRunner(metrics, calls, trace, self._explorer.escalated)
        self._cached = (
            CacheStage(parts.cache, self._routes, parts.admissions, parts.ids, trace) if parts.cache else None
        )
        # The dialects (gateway.dialects): each endpoint's translation of its request to chat.
        responses, messages = ResponsesDialect(), MessagesDialect()
        self._dialects: dict[Kind, tuple[Dialect, Callable[[dict[str, Any]], dict[str, Any]]]] = {
            Kind.RESPONSES: (responses, responses.to_chat),
            Kind.MESSAGES: (messages, messages.to_chat),
            Kind.COUNT_TOKENS: (messages, count_request),
        }

    async def handle(self, kind: Kind, scope: Scope, receive: Receive, send: Send) -> None:
        t0 = perf_counter()
        h = RequestHeaders(scope)
        ctx = RequestContext(kind, h, self._ids.accept(h.request_id), t0)
        dialect = self._dialects.get(kind)
        if dialect is not None:
            # Every answer from here on, errors included, in the dialect's own shape.
            send = ctx.reply = DialectSend(send, *dialect)
        self.observer.start(ctx, kind, scope["headers"])
        self._running += 1  # decremented in the `finally` below
        try:
            await self._serve(ctx, receive, send)
        except GatewayError as err:
            ctx.status = err.status
            ctx.done()
            await send_error(send, err, ctx.rid)
        except ClientGone:
            ctx.status = 499
        except asyncio.CancelledError:
            if not await self._cancelled(ctx, send):
                raise  # shutdown or an outer timeout: not ours to swallow
        except Exception:  # a bug of ours: logged with its traceback, answered in the API's error shape
            ctx.status = 500
            ctx.done()
            _log.exception("request %s failed", ctx.rid.decode(errors="replace"))
            await answer_bug(send, ctx)
        finally:
            self._running -= 1
            self._end(ctx)

    async def _serve(self, ctx: RequestContext, receive: Receive, send: Send) -> None:
        """The stages, in order; each raises a GatewayError to refuse the request."""
        principal = await self._authenticate(ctx)  # the key, from the headers: before the body is read
        refused = self._admissions.refused_early(principal.tenant)  # its request rate, from memory
        if refused is not None:
            raise refused
        raw = await read_body(ctx.headers.content_length, receive, self._max_body, self._max_depth)
        body = ctx.body = self._parsed(ctx, raw)
        ctx.alias, ctx.adapter = self._routes.split_adapter(alias_of(body))
        pools = self._permit(ctx, principal)
        if ctx.endpoint is Kind.COUNT_TOKENS:
            await self._count(ctx, send)
            return
        self.observer.begin(ctx, ctx.kind, body)
        if self._guard is not None:
            guard = ctx.guard = self._guard(ctx, ctx.kind, ctx.alias, body)  # raises a refusal
            if guard is not None and guard.json_schema is not None and ctx.kind is Kind.CHAT:
                ctx.schema = schema_check(body)  # a 400 for a schema that is not one
        if self._cached is not None and ctx.adapter is None:  # `alias:adapter` is never cached
            if await self._cached.serve(ctx, send, pools):
                return
        else:
            ctx.cache = BYPASS
        try:
            route = await self._route(ctx, pools)
        except ModelNotFoundError:
            # Probing model names still spends the key's request rate (a refusal answers instead).
            await self._admissions.charge_request(self._ids.new().decode(), principal.tenant)
            raise
        self._normalize(ctx, route)
        await self._admit(ctx, route, self._running)
        ctx.watch(receive)
        inflight = route.metrics.inflight
        inflight.inc()
        try:
            await self._call(ctx, route, send)
        finally:
            inflight.dec()
        if self._cached is not None:
            self._cached.remember(ctx)
        decided = ctx.decided
        if decided is not None and decided.alias.learning is not None:
            self._learn(ctx, decided)

    def _learn(self, ctx: RequestContext, decided: Decided) -> None:
        """A routed alias that learns: the answer's outcome record (for feedback), and exploration."""
        route = ctx.route
        if ctx.status != 200 or ctx.broken or route is None or ctx.prep is None:
            return
        alias = decided.alias
        tier = alias.pools.index(route.pool.config.name)
        if decided.embedding is not None:
            ctx.outcome = encode_outcome(alias.name, tier, decided.embedding)
        price = alias.policy.tiers[tier].price
        cost = price.cost(ctx.usage_in, ctx.usage_out) if price is not None else 0.0
        self._explorer.after(decided, Delivery(tier, ctx.rid, ctx.prep.body, ctx.capture, ctx.ticket, cost))

    def on_rated(self, org: str, request_id: str, accepted: bool, score: float | None, d: Delivered) -> None:
        """Feedback (gateway.observability.feedback) on a routed answer teaches its alias's memory."""
        outcome = decode_outcome(d.extra) if d.extra else None
        learning = self._routes.learning(outcome.alias) if outcome is not None else None
        if outcome is not None and learning is not None:
            learning.rated(outcome, accepted)

    def learnings(self) -> dict[str, Learning]:
        """Every routed alias that learns, by name (for sharing outcomes between replicas)."""
        return self._routes.learnings()

    def calibrations(self) -> dict[str, LiveCalibration]:
        """Every routed alias's live calibration, by name (for sharing sketches between replicas)."""
        return self._routes.calibrations()

    async def close(self) -> None:
        """Shutdown: background exploration is cancelled (its budget is settled)."""
        await self._explorer.close()

    def _parsed(self, ctx: RequestContext, raw: bytes) -> dict[str, Any]:
        """The request body as JSON; a dialect's translated to a chat request (its original kept for
        the answer's translation)."""
        body = parse_body(raw)
        reply = ctx.reply
        if reply is None:
            return body
        reply.request = body
        ctx.kind = ctx.endpoint.asked
        return reply.to_chat(body)

    async def _count(self, ctx: RequestContext, send: Send) -> None:
        """`/v1/messages/count_tokens`: the input estimate of the alias's (first) pool, calibrated from
        the prompt tokens it reports (gateway.budget.estimate). It spends the key's request rate."""
        reply, tenant = ctx.reply, ctx.tenant
        assert reply is not None and tenant is not None
        try:
            route = self._routes.any_route(ctx.alias)
        except KeyError:
            raise ModelNotFoundError.of(ctx.alias) from None
        tokens = self._admit.count(route.pool.config.name, input_size(Kind.CHAT, ctx.body))
        await self._admissions.charge_request(self._ids.new().decode(), tenant)
        data = orjson.dumps({"input_tokens": tokens})
        ctx.done()
        head = [*JSON_HEADERS, (b"content-length", str(len(data)).encode()), (b"x-request-id", ctx.rid)]
        await reply.raw({"type": "http.response.start", "status": 200, "headers": head})
        await reply.raw({"type": "http.response.body", "body": data, "more_body": False})
        ctx.status = 200

    async def _authenticate(self, ctx: RequestContext) -> Principal:
        """The caller (on the context), from its key alone: a bad key costs no body read or parse."""
        h = ctx.headers
        try:
            with self._trace.span("auth"):
                principal = await self._auth.identify(h.authorization, api_key=h.api_key)
        except AuthenticationError as err:
            self._metrics.auth_failures.labels(str(err.code)).inc()
            raise
        ctx.tenant = principal.tenant
        ctx.priority = _PRIORITY.get(principal.tenant.priority, 0)
        return principal

    def _permit(self, ctx: RequestContext, principal: Principal) -> frozenset[str]:
        """The pools the caller's key may use (empty: any), checked against the alias here, before the
        cache can answer."""
        try:
            self._auth.permit(principal, ctx.alias)
            self._routes.check_pools(ctx.alias, principal.pools)
        except PermissionDeniedError as err:
            self._metrics.auth_failures.labels(str(err.code)).inc()
            raise
        return principal.pools

    async def _route(self, ctx: RequestContext, pools: frozenset[str]) -> Route:
        """The direct alias's route, or a routed alias's plan (cut to `pools`) and its first tier."""
        route = ctx.route = self._routes.direct(ctx.alias, pools, ctx.adapter)
        if route is not None:
            return route
        with self._trace.span("routing"):
            decided = ctx.decided = await self._routes.decide(
                ctx.kind, ctx.alias, ctx.body, ctx.headers, pools
            )
        route = ctx.route = decided.first
        if decided.explore and ctx.capture is None:
            ctx.capture = []  # the cheap answer's bytes, for the judge
        if ctx.notes is not None:
            ctx.notes["route"] = {
                "difficulty": decided.difficulty,
                "cascade": decided.plan.cascade,
                "start": route.pool.config.name,
            }
        return route

    def _normalize(self, ctx: RequestContext, route: Route) -> None:
        """The body for the pool (validated, defaults and caps applied; rewritten in place)."""
        kind = ctx.kind
        if kind.value not in route.pool.config.serves:
            raise InvalidRequestError(
                f"the model '{ctx.alias}' does not support the {kind.value} endpoint", param="model"
            )
        body, reply = ctx.body, ctx.reply
        ctx.open_ended = body.get("max_completion_tokens", body.get("max_tokens")) is None or (
            reply is not None and reply.dialect.max_tokens_is_ceiling
        )
        prep = ctx.prep = prepare(kind, body, route.model, route.upstream_model)
        ctx.stream = prep.stream

    async def _call(self, ctx: RequestContext, route: Route, send: Send) -> None:
        prep, decided = ctx.prep, ctx.decided
        assert prep is not None
        if decided is not None and not decided.direct:
            assert ctx.ticket is not None  # routed plans never speculate
            ctx.route = await self._cascades.run(decided, prep.body, prep.client_usage, ctx, ctx.ticket, send)
            return
        payload = orjson.dumps(prep.body)
        ctx.key = route.pool.key(prep.body)
        headers = {**route.pool.headers, "x-request-id": ctx.rid.decode()}
        call = CallSpec(ctx.kind, payload, headers, ctx.key, ctx.priority, adapter=route.adapter)
        if ctx.stream and ctx.schema is not None and ctx.guard is not None:
            if ctx.guard.json_schema == "retry_once":
                await self._conform.buffered(ctx, route, call, send)  # judged whole, replayed as SSE
                return
        if ctx.stream:
            await self._stream(ctx, route, call, send)
        else:
            await self._unary(ctx, route, call, send)

    async def _cancelled(self, ctx: RequestContext, send: Send) -> bool:
        """Whether a cancellation was this request's own (the client left, or a speculative admission
        was refused while the pool was being called); False: not ours, re-raise it."""
        refusal = ctx.refusal
        if not ctx.client_gone and refusal is None:
            return False
        if ctx.task is not None:
            ctx.task.uncancel()
        if ctx.client_gone or refusal is None:
            ctx.status = 499
            return True
        # The call is cancelled (vLLM aborts it) and the client gets the refusal, as if it came first.
        ctx.status = refusal.status
        ctx.done()
        await send_error(send, refusal, ctx.rid)
        return True

    def _end(self, ctx: RequestContext) -> None:
        """Settle, count, observe: once per request, whatever ended it."""
        ctx.done()
        ctx.speculating = False
        self._admit.settle(ctx)
        route = ctx.route
        # Only a route's adapter labels metrics (never a name the client made up).
        ctx.adapter = None
        if not ctx.hit and route is not None:
            ctx.model, ctx.pool = route.model.name, route.pool.config.name
            ctx.adapter = route.adapter.name if route.adapter is not None else None
        if ctx.status == 499 and route is not None:
            self._metrics.client_disconnects.labels(ctx.model, ctx.pool).inc()
        ctx.e2e = perf_counter() - ctx.t0
        self._metrics.finished(ctx.model, ctx.pool, ctx.endpoint.value, ctx.status, ctx.stream, ctx.e2e)
        self.observer.finish(ctx)
