"""The request hot path: OpenAI request in, pool answer out, as a bare ASGI handler.

`Relay.handle` runs one request through named stages over one request record (gateway.record: the
HTTP exchange, and one typed part per stage that writes it):

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
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from time import perf_counter
from typing import TYPE_CHECKING, Any

import orjson

from gateway.budget.admission import Admissions
from gateway.budget.labels import end_user_of, tags_of
from gateway.budget.pricing import Pricing
from gateway.config import CACHE_POOL, Policy
from gateway.dialects import Dialect
from gateway.dialects.exchange import DialectSend
from gateway.dialects.messages import MessagesDialect, count_request, dropped_tools
from gateway.dialects.responses import ResponsesDialect, hosted_tools, reject_hosted
from gateway.dialects.seal import Sealer
from gateway.edge.exchange import (
    JSON_HEADERS,
    ClientGone,
    Exchange,
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
from gateway.record import Answer, Ask, Budget, RequestRecord
from gateway.relay._admit import Admit
from gateway.relay._answer import AnswerReader
from gateway.relay._body import read_body
from gateway.relay._cached import BYPASSED, CacheStage
from gateway.relay._conform import Conform
from gateway.relay._failure import answer_bug
from gateway.relay._stream import StreamCall
from gateway.relay._unary import UnaryCall
from gateway.relay.normalize import alias_of, input_size, parse_body, prepare
from gateway.relay.response_cache import ResponseCache
from gateway.routing.aliases import RoutedAlias
from gateway.routing.cascade_runner import CascadeRunner
from gateway.routing.explorer import Delivery, Explorer
from gateway.routing.learning import Learning, decode_outcome, encode_outcome
from gateway.routing.route import Route
from gateway.routing.table import Decided, Routes
from gateway.tenancy.auth import Authenticator, Principal
from gateway.upstream.calls import CallSpec, PoolCalls
from gateway.upstream.pool_client import PoolClient
from gateway.upstream.tokens import TokenCounter
from gateway.upstream.transport import Transports
from pools.fair import Flow
from pools.slo import reroute

if TYPE_CHECKING:
    from router.calibration import LiveCalibration  # ddsketch loads only when a live cut is used

__all__ = ["Relay", "RelayParts"]

_log = logging.getLogger("llmgw.relay")
_COUNTING = (Kind.COUNT_TOKENS, Kind.INPUT_TOKENS)  # token counting: nothing is generated
# Client-chosen tool names go into a response header only when they are plain names (no CR/LF, no
# commas), at most _DROPPED_MAX of them.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.:\-]{1,64}")
_DROPPED_MAX = 16


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
    sealer: Sealer | None = None  # signs what the dialects hand out to come back (None: a key of its own)
    pricing: Pricing | None = None  # None: the policy's prices


class Relay:
    def __init__(self, parts: RelayParts) -> None:
        metrics = parts.metrics
        self._metrics = metrics
        self._max_body = parts.max_body_bytes
        self._max_depth = parts.max_json_depth
        self._auth = parts.auth
        self._ids = parts.ids
        self._running = 0  # requests between arrival and their last byte (gates speculative admission)
        # The loop serving the app, found on the first request (and again if a test closed it):
        # asyncio.get_running_loop() is a getpid() system call on Python 3.11, twice per request.
        self._loop: asyncio.AbstractEventLoop | None = None
        observer = self.observer = parts.observer or Observer(parts.policy, metrics)
        trace = self._trace = observer.tracing
        # The request log keeps every answer's bytes when it writes their text.
        self._keep_text = observer.log is not None and observer.log.text
        self._observe = observer.per_request  # `Observer.start`/`begin` do something
        self._routes = Routes(parts.policy, parts.pools, metrics, parts.routed)
        calls = PoolCalls(parts.transports, metrics, trace)
        self._tokens = TokenCounter(calls)  # the token-counting endpoints only
        self._reject_hosted = frozenset(
            m.name for m in parts.policy.models if m.route.hosted_tools == "reject"
        )
        self._admissions = parts.admissions
        self._admit = Admit(
            parts.admissions,
            parts.ids,
            parts.policy.limits.input_bytes_per_token,
            trace,
            parts.pricing or Pricing(parts.policy),
        )
        self._max_tags = parts.policy.limits.max_tags
        answers = AnswerReader(metrics)
        # Input guardrails (gateway/guardrails/): None when the policy sets none, so they cost nothing.
        guards = GuardTable(parts.policy)
        input_guard = InputGuard(guards, metrics, trace)  # also records the json_schema policy's events
        self._guard = input_guard if guards.active else None
        self._conform = Conform(calls, self._admit, answers, input_guard)  # response_format json_schema
        # Only a guardrails profile sets a json_schema policy: without one, no call checks a schema.
        conform = self._conform if guards.active else None
        self._unary = UnaryCall(calls, self._admit, metrics, conform, answers)
        self._stream = StreamCall(calls, self._admit, parts.admissions, metrics, conform)
        self._explorer = Explorer(metrics, calls, parts.admissions)
        self._cascades = CascadeRunner(metrics, calls, trace, self._explorer.escalated)
        self._cached = (
            CacheStage(parts.cache, self._routes, parts.admissions, parts.ids, trace, self._keep_text)
            if parts.cache
            else None
        )
        # Whether an answer's bytes may be kept: for the request log's text, the cache or an explorer.
        self._may_keep = self._keep_text or self._cached is not None or bool(parts.routed)
        # The dialects (gateway.dialects): each endpoint's translation of its request to chat.
        sealer = parts.sealer or Sealer()
        responses, messages = ResponsesDialect(sealer=sealer), MessagesDialect(sealer=sealer)
        self._dialects: dict[Kind, tuple[Dialect, Callable[[dict[str, Any]], dict[str, Any]]]] = {
            Kind.RESPONSES: (responses, responses.to_chat),
            Kind.MESSAGES: (messages, messages.to_chat),
            Kind.COUNT_TOKENS: (messages, partial(count_request, sealer=sealer)),
            Kind.INPUT_TOKENS: (responses, responses.input_tokens_request),
        }

    async def handle(self, kind: Kind, scope: Scope, receive: Receive, send: Send) -> None:
        t0 = perf_counter()
        h = RequestHeaders(scope)
        dialect = self._dialects.get(kind)
        reply = None
        if dialect is not None:
            # Every answer from here on, errors included, in the dialect's own shape.
            send = reply = DialectSend(send, *dialect)
        loop = self._loop
        if loop is None or loop.is_closed():
            loop = self._loop = asyncio.get_running_loop()
        x = Exchange(self._ids.accept(h.request_id), kind, h, t0, reply, loop)
        req = RequestRecord(x)
        if self._observe:
            self.observer.start(req, kind, scope["headers"])
        self._running += 1  # decremented in the `finally` below
        try:
            await self._serve(req, receive, send)
        except GatewayError as err:
            x.status = err.status
            x.done()
            await send_error(send, err, x.rid)
        except ClientGone:
            x.status = 499
        except asyncio.CancelledError:
            if not await self._cancelled(req, send):
                raise  # shutdown or an outer timeout: not ours to swallow
        except Exception:  # a bug of ours: logged with its traceback, answered in the API's error shape
            x.status = 500
            x.done()
            _log.exception("request %s failed", x.rid.decode(errors="replace"))
            await answer_bug(send, x)
        finally:
            self._running -= 1
            self._end(req)

    async def _serve(self, req: RequestRecord, receive: Receive, send: Send) -> None:
        """The stages, in order; each writes its part of `req` and raises a GatewayError to refuse the
        request."""
        x = req.http
        principal = await self._authenticate(req)  # the key, from the headers: before the body is read
        refused = self._admissions.refused_early(principal.tenant)  # its request rate, from memory
        if refused is not None:
            raise refused
        # Stage 2, read: the body (bounded), parsed (a dialect's translated), its alias and the adapter
        # it names (`alias:adapter`).
        raw = await read_body(x.headers.content_length, receive, self._max_body, self._max_depth)
        body = self._parsed(req, raw)
        alias, adapter = self._routes.split_adapter(alias_of(body))
        ask = req.ask = Ask(body, alias, adapter)
        # Tags and end user (gateway.budget.labels), read only when the request names any.
        if x.headers.tags is not None or "metadata" in body:
            known = self._admissions.known_tags()
            ask.tags = tags_of(x.headers.tags, body, self._max_tags, known, principal.tenant.tags)
        if "user" in body:
            ask.end_user = end_user_of(body)
        pools = self._permit(principal, alias)
        if x.reply is not None:
            self._tools_dropped(req, ask, x.reply)
        if x.endpoint in _COUNTING:
            await self._count(req, ask)
            return
        if self._observe:
            self.observer.begin(req, x.kind, body)
        if self._guard is not None:
            self._screen(req, ask)  # raises a refusal
        if self._cached is not None and adapter is None:  # `alias:adapter` is never cached
            if await self._cached.serve(req, ask, send, pools):
                return
        else:
            req.cache = BYPASSED
        try:
            route = await self._route(req, ask, pools)
        except ModelNotFoundError:
            # Probing model names still spends the key's request rate (a refusal answers instead).
            await self._admissions.charge_request(self._ids.new().decode(), principal.tenant)
            raise
        open_ended = self._normalize(req, ask, route)
        budget = await self._admit.reserve(req, route, open_ended, self._running)
        x.watch(receive, self._loop)
        inflight = route.metrics.inflight
        inflight.inc()
        try:
            await self._call(req, route, budget, send)
        finally:
            inflight.dec()
        if self._cached is not None:
            self._cached.remember(req)
        decided = req.decided
        if decided is not None and decided.alias.learning is not None:
            self._learn(req, decided)

    def _learn(self, req: RequestRecord, decided: Decided) -> None:
        """A routed alias that learns: the answer's outcome record (for feedback), and exploration."""
        answer, prep, budget = req.answer, req.prep, req.budget
        if req.http.status != 200 or answer is None or answer.broken or answer.route is None or prep is None:
            return
        alias = decided.alias
        tier = alias.pools.index(answer.route.pool.config.name)
        if decided.embedding is not None:
            answer.outcome = encode_outcome(alias.name, tier, decided.embedding)
        price = alias.policy.tiers[tier].price
        cost = price.cost(answer.usage_in, answer.usage_out) if price is not None else 0.0
        ticket = budget.ticket if budget is not None else None
        self._explorer.after(decided, Delivery(tier, req.http.rid, prep.body, answer.capture, ticket, cost))

    def on_rated(self, org: str, request_id: str, accepted: bool, score: float | None, d: Delivered) -> None:
        """Feedback (gateway.observability.feedback) on a routed answer teaches its alias's memory."""
        outcome = decode_outcome(d.extra) if d.extra else None
        learning = self._routes.learning(outcome.alias) if outcome is not None else None
        if outcome is not None and learning is not None:
            learning.rated(outcome, accepted, org)

    def learnings(self) -> dict[str, Learning]:
        """Every routed alias that learns, by name (for sharing outcomes between replicas)."""
        return self._routes.learnings()

    def calibrations(self) -> dict[str, LiveCalibration]:
        """Every routed alias's live calibration, by name (for sharing sketches between replicas)."""
        return self._routes.calibrations()

    async def close(self) -> None:
        """Shutdown: background exploration is cancelled (its budget is settled)."""
        await self._explorer.close()

    def _parsed(self, req: RequestRecord, raw: bytes) -> dict[str, Any]:
        """The request body as JSON; a dialect's translated to a chat request (its original kept for
        the answer's translation)."""
        body = parse_body(raw)
        reply = req.http.reply
        if reply is None:
            return body
        reply.request = body
        req.http.kind = req.http.endpoint.asked
        return reply.to_chat(body)

    async def _count(self, req: RequestRecord, ask: Ask) -> None:
        """`/v1/messages/count_tokens`, `/v1/responses/input_tokens`: the prompt counted by the alias's
        (first) pool's tokenizer (gateway.upstream.tokens); when the pool cannot count, its input
        estimate calibrated from the prompt tokens it reports (gateway.budget.estimate), and
        `x-llmgw-token-count` says which. It spends the key's request rate."""
        x, who = req.http, req.who
        reply = x.reply
        assert reply is not None and who is not None
        try:
            route = self._routes.any_route(ask.alias)
        except KeyError:
            raise ModelNotFoundError.of(ask.alias) from None
        await self._admissions.charge_request(self._ids.new().decode(), who.tenant)
        tokens = await self._tokens.count(route.pool, ask.body, x.rid.decode())
        how = b"exact"
        if tokens is None:
            tokens, how = (
                self._admit.count(route.pool.config.name, input_size(Kind.CHAT, ask.body)),
                b"estimate",
            )
        answer: dict[str, Any] = {"input_tokens": tokens}
        if x.endpoint is Kind.INPUT_TOKENS:
            answer = {"object": "response.input_tokens", "input_tokens": tokens}
        data = orjson.dumps(answer)
        x.done()
        head = [
            *JSON_HEADERS,
            (b"content-length", str(len(data)).encode()),
            (b"x-request-id", x.rid),
            (b"x-llmgw-token-count", how),
            *reply.headers,
        ]
        await reply.raw({"type": "http.response.start", "status": 200, "headers": head})
        await reply.raw({"type": "http.response.body", "body": data, "more_body": False})
        x.status = 200

    def _tools_dropped(self, req: RequestRecord, ask: Ask, reply: DialectSend) -> None:
        """A dialect request's tools the pool cannot run (hosted / Anthropic-defined tools): refused
        when the alias's `hosted_tools` is `reject` (Responses), else left out by the translation and
        named in `x-llmgw-dropped-tools`, the trace and the request log."""
        endpoint, request = req.http.endpoint, reply.request
        if endpoint in (Kind.RESPONSES, Kind.INPUT_TOKENS):
            dropped = hosted_tools(request)
            if dropped and ask.alias in self._reject_hosted:
                raise reject_hosted(dropped, request)
        else:
            dropped = dropped_tools(request)
        if not dropped:
            return
        names = [n if _TOOL_NAME.fullmatch(n) else "?" for n in dropped[:_DROPPED_MAX]]
        reply.headers.append((b"x-llmgw-dropped-tools", ",".join(names).encode()))
        obs = req.obs
        if obs is not None:
            if obs.span is not None:
                self._trace.event(obs.span, "llmgw.tools_dropped", {"llmgw.tools": names})
            if obs.notes is not None:
                obs.notes["dropped_tools"] = names

    async def _authenticate(self, req: RequestRecord) -> Principal:
        """Stage 1: the caller (`req.who`), from its key alone: a bad key costs no body read or parse."""
        h = req.http.headers
        try:
            with self._trace.span("auth"):
                principal = await self._auth.identify(h.authorization, api_key=h.api_key)
        except AuthenticationError as err:
            self._metrics.auth_failures.labels(str(err.code)).inc()
            raise
        req.who = principal
        return principal

    def _permit(self, principal: Principal, alias: str) -> frozenset[str]:
        """The pools the caller's key may use (empty: any), checked against the alias here, before the
        cache can answer."""
        try:
            self._auth.permit(principal, alias)
            self._routes.check_pools(alias, principal.pools)
        except PermissionDeniedError as err:
            self._metrics.auth_failures.labels(str(err.code)).inc()
            raise
        return principal.pools

    def _screen(self, req: RequestRecord, ask: Ask) -> None:
        """The input guardrails (`ask.guard`, and `ask.schema` for a json_schema output policy): the body
        screened, redacted in place, or refused."""
        assert self._guard is not None
        kind = req.http.kind
        guard = ask.guard = self._guard.screen(req, kind, ask.alias, ask.body)  # raises a refusal
        if guard is not None and guard.json_schema is not None and kind is Kind.CHAT:
            ask.schema = schema_check(ask.body)  # a 400 for a schema that is not one

    async def _route(self, req: RequestRecord, ask: Ask, pools: frozenset[str]) -> Route:
        """Stage 4: the direct alias's route, or a routed alias's plan (cut to `pools`) and its first tier."""
        route = req.route = self._routes.direct(ask.alias, pools, ask.adapter)
        if route is not None:
            if route.slo is not None and route.slo.action == "reroute":
                route = req.route = self._reroute(req, ask, route, pools)
            return route
        x = req.http
        with self._trace.span("routing") as span:
            org = req.who.tenant.org if req.who is not None else ""
            decided = req.decided = await self._routes.decide(
                x.kind, ask.alias, ask.body, x.headers, pools, org
            )
            if span is not None and decided.success is not None:  # a success policy: per tier
                span.set_attribute("llmgw.route.success", list(decided.success))
                span.set_attribute("llmgw.route.tolerance", decided.tolerance)
        route = req.route = decided.first
        if decided.direct and route.slo is not None and route.slo.action == "reroute":
            moved = req.route = self._reroute(req, ask, route, pools)
            if moved is not route:
                decided.headers[:] = [h if h[0] != b"x-llmgw-tier" else moved.tier for h in decided.headers]
                route = moved
        obs = req.obs
        if obs is not None and obs.notes is not None:
            notes: dict[str, Any] = {
                "difficulty": decided.difficulty,
                "cascade": decided.plan.cascade,
                "start": route.pool.config.name,
            }
            if decided.success is not None:
                # Per tier, cheap -> strong, beside the tiers' pools: which tier was within the
                # tolerance of the best is readable from the line alone.
                notes["success"] = [round(p, 4) for p in decided.success]
                notes["tiers"] = list(decided.alias.pools)
                notes["tolerance"] = decided.tolerance
            obs.notes["route"] = notes
        return route

    def _reroute(self, req: RequestRecord, ask: Ask, route: Route, pools: frozenset[str]) -> Route:
        """`on_unattainable: reroute`: another pool of the alias when this one would hold the request
        past its SLO's TTFT and that one would not (`pools.slo.reroute`); else `route` (its pool's
        admission sheds it if it still would)."""
        assert route.slo is not None and req.who is not None
        tenant, rank = req.who.tenant, req.who.rank
        flow = Flow(tenant.org, tenant.app, tenant.tier)
        current = route.pool.replicas.predict(rank, flow)
        if current is None or current <= route.slo.ttft_s:
            return route
        kind = req.http.kind.value
        others = [r for r in self._routes.others(ask.alias, route, pools) if kind in r.pool.config.serves]
        chosen = reroute(current, [r.pool.replicas.predict(rank, flow) for r in others], route.slo.ttft_s)
        if chosen is None:
            return route
        route.pool.replicas.stats.count_refused(rank, tenant.org, "rerouted")
        return others[chosen]

    def _normalize(self, req: RequestRecord, ask: Ask, route: Route) -> bool:
        """Stage 5: the body for the pool (`req.prep`: validated, defaults and caps applied; rewritten in
        place). Returns whether the client left its output open-ended (no max_tokens), for admission."""
        x = req.http
        kind = x.kind
        if kind.value not in route.pool.config.serves:
            raise InvalidRequestError(
                f"the model '{ask.alias}' does not support the {kind.value} endpoint", param="model"
            )
        body, reply = ask.body, x.reply
        open_ended = body.get("max_completion_tokens", body.get("max_tokens")) is None or (
            reply is not None and reply.dialect.max_tokens_is_ceiling
        )
        prep = req.prep = prepare(kind, body, route.model, route.upstream_model)
        x.stream = prep.stream
        return open_ended

    async def _call(self, req: RequestRecord, route: Route, budget: Budget, send: Send) -> None:
        """Stage 7: the pool's answer (`req.answer`), relayed: unary, stream, or a routed plan's cascade."""
        x, prep, who = req.http, req.prep, req.who
        assert prep is not None and who is not None
        decided = req.decided
        capture: list[bytes] | None = None
        if self._may_keep and self._keeps(req):
            capture = []
        answer = req.answer = Answer(route, capture)
        if decided is not None and not decided.direct:
            ticket = budget.ticket
            assert ticket is not None  # routed plans never speculate
            answer.route = await self._cascades.run(decided, prep.body, prep.client_usage, req, ticket, send)
            return
        payload = orjson.dumps(prep.body)
        headers = {**route.pool.headers, "x-request-id": x.rid.decode()}
        tenant = who.tenant
        flow = Flow(tenant.org, tenant.app, tenant.tier, budget.reserved_in, route.slo)
        key = route.pool.key(prep.body)
        call = CallSpec(x.kind, payload, headers, key, who.rank, adapter=route.adapter, flow=flow)
        if x.stream:
            if self._guard is not None and _retries_schema(req.ask):
                await self._conform.buffered(req, route, call, send)  # judged whole, replayed as SSE
                return
            await self._stream.call(req, answer, budget, route, call, send)
        else:
            await self._unary.call(req, answer, budget, route, call, send)

    def _keeps(self, req: RequestRecord) -> bool:
        """Whether the answer's bytes are kept (`Answer.capture`): the request log writes their text, the
        cache stores a miss's, a routed alias's explorer judges a cheap answer drawn for it."""
        cache, decided = req.cache, req.decided
        return (
            self._keep_text
            or (cache is not None and cache.look is not None)
            or (decided is not None and decided.explore)
        )

    async def _cancelled(self, req: RequestRecord, send: Send) -> bool:
        """Whether a cancellation was this request's own (the client left, or a speculative admission
        was refused while the pool was being called); False: not ours, re-raise it."""
        x, budget = req.http, req.budget
        speculation = budget.speculation if budget is not None else None
        refusal = speculation.refusal if speculation is not None else None
        if not x.client_gone and refusal is None:
            return False
        if x.task is not None:
            x.task.uncancel()
        if x.client_gone or refusal is None:
            x.status = 499
            return True
        # The call is cancelled (vLLM aborts it) and the client gets the refusal, as if it came first.
        x.status = refusal.status
        x.done()
        await send_error(send, refusal, x.rid)
        return True

    def _end(self, req: RequestRecord) -> None:
        """Settle, count, observe: once per request, whatever ended it. The served labels (alias, pool,
        adapter) come from the tier that answered (a hit: the alias and the cache; only a route's
        adapter, never a name the client made up)."""
        x = req.http
        if not x.finished:
            x.done()
        budget = req.budget
        if budget is not None:  # (a speculative refusal arriving from now on finds the exchange done)
            self._admit.settle(req, budget)
        answer = req.answer
        route = req.route if answer is None else answer.route
        if route is not None:
            model, pool, adapter = route.served
            if x.status == 499:
                self._metrics.client_disconnects.labels(model, pool).inc()
        elif req.cache is not None and req.cache.hit and req.ask is not None:
            model, pool, adapter = req.ask.alias, CACHE_POOL, None  # metrics label the alias, pool "cache"
        else:
            model, pool, adapter = "-", "-", None
        e2e = x.e2e = perf_counter() - x.t0
        self._metrics.finished(model, pool, x.endpoint.value, x.status, x.stream, e2e)
        self.observer.finish(req, model, pool, adapter)


def _retries_schema(ask: Ask | None) -> bool:
    """Whether the request's answer is judged against its schema under `json_schema: retry_once`."""
    guard = ask.guard if ask is not None and ask.schema is not None else None
    return guard is not None and guard.json_schema == "retry_once"
