"""The request hot path: OpenAI request in, pool answer out, as a bare ASGI handler.

Flow per request: read the body (bounded) -> parse and normalize (gateway.relay.normalize) -> pick the
pool of the alias -> POST to a replica over the shared aiohttp session -> relay the answer.
Non-streamed answers are passed through as the pool's bytes (parsed once, for usage only). Streams
are relayed event by event without re-serializing (gateway.upstream.sse); the response starts only when the
first upstream chunk is in hand, so every failure before that is a clean JSON error with the right
status, and every failure after it ends the stream with an error event and `[DONE]`.

A watcher (gateway.edge.exchange) waits on the ASGI receive channel for `http.disconnect`; when the client
leaves, the handler task is cancelled, which closes the upstream connection, which makes vLLM abort the
request and free its KV cache. The handler is a plain ASGI callable rather than a FastAPI route:
measured here, routing, dependency injection and Response objects cost more than the relay itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from time import perf_counter
from typing import Any

import aiohttp
import orjson

from cache.entry import replay, usage_of
from gateway.budget.admission import Admissions, Ticket
from gateway.config import CACHE_POOL, Policy
from gateway.edge.exchange import (
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
    RequestTooLargeError,
    UpstreamError,
    UpstreamUnavailableError,
)
from gateway.observability.metrics import Metrics
from gateway.observability.observer import Observer
from gateway.relay.normalize import alias_of, estimate_input_tokens, parse_body, prepare
from gateway.relay.response_cache import BYPASS, MISS, Lookup, ResponseCache
from gateway.routing.aliases import RoutedAlias
from gateway.routing.cascade_runner import CascadeRunner, Decided
from gateway.routing.route import Route
from gateway.tenancy.auth import Authenticator
from gateway.upstream.calls import UPSTREAM_FAILURES, PoolCalls, Upstream
from gateway.upstream.h1 import H1Client
from gateway.upstream.pool_client import PoolClient
from gateway.upstream.sse import SSESplitter, error_event
from pools.replica import Replica
from ratelimit.model import Tenant

_JSON_HEADERS = [(b"content-type", b"application/json")]
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # tell nginx-style proxies in front of us not to buffer the stream
]
# Held requests (pool admission) are served by tier priority, then in arrival order.
_PRIORITY = {"premium": 1, "standard": 0}
_SHUTDOWN_TAIL = error_event(
    UpstreamUnavailableError("the gateway is shutting down; retry the request").body()
)


class Relay:
    def __init__(
        self,
        policy: Policy,
        pools: dict[str, PoolClient],
        session: aiohttp.ClientSession,
        metrics: Metrics,
        max_body_bytes: int,
        auth: Authenticator,
        admissions: Admissions,
        ids: RequestIds,
        routed: dict[str, RoutedAlias] | None = None,
        observer: Observer | None = None,
        cache: ResponseCache | None = None,
        h1: H1Client | None = None,
    ) -> None:
        self._routes = {
            m.name: Route(model=m, pool=pools[m.route.pool], metrics=metrics.by_alias[(m.name, m.route.pool)])
            for m in policy.models
            if m.route.pool is not None
        }
        # Routed aliases: one Route per tier (the alias's settings on that tier's pool).
        self._routed = {
            name: (
                ra,
                tuple(Route(model=m, pool=pools[p], metrics=metrics.by_alias[(name, p)]) for p in ra.pools),
            )
            for name, ra in (routed or {}).items()
            for m in policy.models
            if m.name == name
        }
        for name, ra in (routed or {}).items():
            metrics.router_fallback.labels(name).set(1 if ra.fallback else 0)
        self._metrics = metrics
        self._max_body = max_body_bytes
        self._auth = auth
        self._admissions = admissions
        self._bytes_per_token = policy.limits.input_bytes_per_token
        self._ids = ids
        self._running = 0  # requests between arrival and their last byte (gates speculative admission)
        self.observer = observer or Observer(policy, metrics)
        self._trace = self.observer.tracing
        self._calls = PoolCalls(session, metrics, self._trace, h1)
        self._cascades = CascadeRunner(metrics, self._call_unary, self._trace)
        self._cache = cache

    async def _decide(self, kind: Kind, alias: str, body: dict[str, Any], h: RequestHeaders) -> Decided:
        """A routed alias's plan for this request (difficulty off the event loop, then a pure plan)."""
        entry = self._routed.get(alias)
        if entry is None:
            raise ModelNotFoundError(
                f"the model '{alias}' does not exist or you do not have access to it", param="model"
            )
        routed, routes = entry
        if kind is not Kind.CHAT:
            raise InvalidRequestError(
                f"the routed model '{alias}' serves chat completions only", param="model"
            )
        budget: float | None = None
        if h.latency_budget is not None:
            try:
                budget = float(h.latency_budget)
            except ValueError:
                budget = -1.0
            if not budget > 0:
                raise InvalidRequestError(
                    "x-llmgw-latency-budget-ms must be a positive number of milliseconds"
                )
        risk = [f.strip() for f in h.risk.decode("latin-1").split(",") if f.strip()] if h.risk else []
        t = perf_counter()
        plan, difficulty, prompt = await routed.plan(
            body.get("messages"), budget, risk, bool(body.get("stream"))
        )
        self._metrics.router_seconds.labels(alias).observe(perf_counter() - t)
        headers: list[tuple[bytes, bytes]] = []
        if difficulty is not None:
            headers.append((b"x-llmgw-difficulty", f"{difficulty:.4f}".encode()))
        if routed.fallback is not None:
            headers.append((b"x-llmgw-route", b"fallback"))
        # The relay itself serves a route-only plan when there is nothing to fail over to, and streams
        # (their bytes are relayed as they come); everything else goes through the cascade runner,
        # whose judge also moves a route-only plan to its next tier when a whole pool fails.
        direct = not plan.cascade and (len(plan.steps) == 1 or bool(body.get("stream")))
        if direct:
            tier = routes[plan.first_tier]
            headers.append((b"x-llmgw-tier", tier.pool.config.name.encode()))
            self._metrics.router_decisions.labels(alias, tier.pool.config.name, "false").inc()
        return Decided(routed, routes, plan, difficulty, prompt, headers, direct)

    async def _call_unary(
        self, route: Route, payload: bytes, headers: dict[str, str], key: int | None, priority: int
    ) -> bytes:
        """One unary chat call on a route's pool, with its retries (a cascade step's call)."""
        return await self._calls.unary(route.pool, Kind.CHAT, payload, headers, key, priority)

    async def _read_body(self, content_length: bytes | None, receive: Receive) -> bytes:
        if content_length is not None:
            try:
                declared = int(content_length)
            except ValueError:
                raise InvalidRequestError("invalid Content-Length header") from None
            if declared > self._max_body:
                raise RequestTooLargeError(f"request body exceeds the limit of {self._max_body} bytes")
        chunks: list[bytes] = []
        size = 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                raise ClientGone()
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > self._max_body:
                raise RequestTooLargeError(f"request body exceeds the limit of {self._max_body} bytes")
            if not msg.get("more_body", False):
                if not chunks:
                    return bytes(chunk)
                chunks.append(chunk)
                return b"".join(chunks)
            chunks.append(chunk)

    async def handle(self, kind: Kind, scope: Scope, receive: Receive, send: Send) -> None:
        t0 = perf_counter()
        h = RequestHeaders(scope)
        rid = self._ids.accept(h.request_id)
        req = Exchange()
        self.observer.start(req, kind, scope["headers"])
        route: Route | None = None
        ticket: Ticket | None = None
        admitting: asyncio.Task[Ticket] | None = None  # a speculative admission (limits.speculative)
        tenant: Tenant | None = None
        status = 500
        stream = False
        look: Lookup | None = None
        cache_status = BYPASS
        hit_alias: str | None = None  # set when the cache answered (metrics label the alias, pool "cache")
        self._running += 1  # decremented in the `finally` below
        try:
            raw = await self._read_body(h.content_length, receive)
            body = parse_body(raw)
            alias = alias_of(body)
            try:
                with self._trace.span("auth"):
                    principal = await self._auth.authenticate(h.authorization, alias, api_key=h.api_key)
            except (AuthenticationError, PermissionDeniedError) as err:
                self._metrics.auth_failures.labels(str(err.code)).inc()
                raise
            tenant = principal.tenant
            self.observer.begin(req, kind, body)
            if self._cache is not None:
                look = self._cache.plan(kind, alias, body, h.cache, tenant)
                if look is not None:
                    with self._trace.span("cache"):
                        found = await self._cache.get(look)
                    cache_status = MISS
                    if found is not None:
                        hit = self._cached_reply(kind, alias, body, found[0])
                        if hit is not None:
                            stream, data = hit
                            cache_status = req.cache = found[1]
                            hit_alias = alias
                            with self._trace.span("rate_limit"):
                                # Hits count against request rates and concurrency, not token budgets.
                                ticket = await self._admissions.admit(
                                    self._ids.new().decode(), tenant, CACHE_POOL, 0, 0, False
                                )
                            self._cache.counted(alias, cache_status, usage_of(found[0]))
                            status = await self._send_cached(
                                stream, data, rid, send, req, ticket, cache_status
                            )
                            return
                    if req.capture is None:
                        req.capture = []  # the answer's bytes, to store it
                self._cache.counted(alias, cache_status, None)
            req.cache = cache_status
            route = self._routes.get(alias)
            decided: Decided | None = None
            if route is None:
                with self._trace.span("routing"):
                    decided = await self._decide(kind, alias, body, h)
                route = decided.routes[decided.plan.first_tier]
                if req.notes is not None:
                    req.notes["route"] = {
                        "difficulty": decided.difficulty,
                        "cascade": decided.plan.cascade,
                        "start": route.pool.config.name,
                    }
            if kind.value not in route.pool.config.serves:
                raise InvalidRequestError(
                    f"the model '{alias}' does not support the {kind.value} endpoint", param="model"
                )
            client_max = body.get("max_completion_tokens", body.get("max_tokens"))
            prep = prepare(kind, body, route.model, route.pool.config.model)
            stream = prep.stream
            n = body.get("n") or 1
            calls = decided.calls if decided is not None and decided.plan.cascade else 1
            granted = (prep.max_tokens or 0) * n * calls
            # A stream without a client max_tokens that may outgrow one reserved chunk is metered as it
            # runs and topped up (a smaller one is reserved whole, like any other request).
            topup = (
                stream
                and client_max is None
                and calls == 1
                and granted > self._admissions.stream_chunk_tokens
            )
            if topup:
                # Meter the stream as it runs (vLLM: cumulative usage on every chunk).
                body["stream_options"]["continuous_usage_stats"] = True
            # Leases need an id unique per admission; a client's x-request-id may repeat.
            lease_id = self._ids.new().decode()
            # A cascade may make several calls: reserve for all of them, settle what was used.
            input_estimate = estimate_input_tokens(kind, body, self._bytes_per_token) * calls
            admission = self._admissions.admit(
                lease_id, tenant, route.pool.config.name, input_estimate, granted, topup
            )
            pending: Ticket | asyncio.Task[Ticket]
            if (
                decided is None
                and route.pool.config.engine == "vllm"  # no speculative calls to billed APIs
                and self._admissions.may_speculate(tenant, self._running)
            ):
                # Call the pool while the reservation is in flight (docs/design/017); nothing reaches
                # the client before it is granted, and a refusal cancels the call.
                pending = admitting = self._admissions.speculate(admission)
                req.speculate(admitting)
                # One loop turn lets the admission task write its script call now, so Redis works on
                # it while this task builds and sends the pool request (tasks start a turn later).
                await asyncio.sleep(0)
            else:
                with self._trace.span("rate_limit"):
                    pending = ticket = await admission
                ticket.headers.append((b"x-llmgw-cache-status", cache_status))
                if decided is not None:
                    ticket.headers.extend(decided.headers)
            payload = orjson.dumps(prep.body)
            key = route.pool.key(prep.body)
            priority = _PRIORITY.get(principal.tenant.priority, 0)
            req.watch(receive)
            inflight = route.metrics.inflight
            inflight.inc()
            try:
                if decided is not None and not decided.direct:
                    assert ticket is not None  # routed plans never speculate
                    status, route = await self._cascades.run(
                        decided, prep.body, prep.client_usage, rid, send, req, ticket, priority
                    )
                elif stream:
                    status = await self._stream(
                        route, kind, payload, rid, prep.client_usage, send, req, t0, pending, topup, n, key,
                        priority,
                    )  # fmt: skip
                else:
                    status = await self._unary(
                        route, kind, payload, rid, send, req, t0, pending, key, priority
                    )
            finally:
                inflight.dec()
            if look is not None and status == 200 and not req.broken and self._cache is not None:
                self._cache.remember(look, stream, b"".join(req.capture or ()), req.usage_in, req.usage_out)
        except GatewayError as err:
            status = err.status
            req.done()
            await send_error(send, err, rid)
        except ClientGone:
            status = 499
        except asyncio.CancelledError:
            refusal = req.refusal
            if not req.client_gone and refusal is None:
                raise  # shutdown or an outer timeout: not ours to swallow
            if req.task is not None:
                req.task.uncancel()
            if req.client_gone or refusal is None:
                status = 499
            else:
                # A speculative admission refused while the pool was being called: the call is
                # cancelled (vLLM aborts it) and the client gets the refusal, as if it came first.
                status = refusal.status
                req.done()
                await send_error(send, refusal, rid)
        finally:
            self._running -= 1
            req.done()
            req.speculating = False
            if admitting is not None:
                # Refused: nothing to settle. Still in flight (the request ended first): settle on arrival.
                ticket = self._admissions.granted(admitting, lambda t: self._settle(t, req, status))
            if ticket is not None:
                self._settle(ticket, req, status)
            if hit_alias is not None:
                model, pool = hit_alias, CACHE_POOL
            else:
                model = route.model.name if route else "-"
                pool = route.pool.config.name if route else "-"
            if status == 499 and route is not None:
                self._metrics.client_disconnects.labels(model, pool).inc()
            e2e = perf_counter() - t0
            self._metrics.finished(model, pool, kind.value, status, stream, e2e)
            self.observer.finish(rid, kind.value, model, pool, tenant, status, stream, e2e, req)

    def _settle(self, ticket: Ticket, req: Exchange, status: int) -> None:
        if not req.reported and req.usage_out == 0 and status != 499:
            req.usage_in = 0  # the pool failed before doing work it reported
        elif not req.reported:
            req.usage_in = ticket.input_estimate  # the client left: the prompt was processed
        self._admissions.settle(ticket, req.usage_in, req.usage_out)

    async def _granted(self, pending: Ticket | asyncio.Task[Ticket], req: Exchange) -> Ticket:
        """The ticket, once the pool answered: a speculative admission is awaited here, before anything
        is sent to the client; its refusal is raised (the pool's answer is dropped)."""
        if isinstance(pending, Ticket):
            return pending
        req.speculating = False
        with self._trace.span("rate_limit"):
            ticket = await pending
        ticket.headers.append((b"x-llmgw-cache-status", req.cache or BYPASS))
        return ticket

    def _cached_reply(
        self, kind: Kind, alias: str, body: dict[str, Any], entry: bytes
    ) -> tuple[bool, bytes] | None:
        """(streamed, bytes to send) for a cache hit, or None when the entry cannot serve this request
        (then it is a miss). The request is validated as a miss would be (on a copy: the relay's own
        `prepare` rewrites the body for the pool later, on a miss)."""
        route = self._routes.get(alias)
        if route is None:
            route = self._routed[alias][1][0]
        prep = prepare(kind, dict(body), route.model, route.pool.config.model)
        if not prep.stream:
            return False, entry
        sse = replay(kind is Kind.CHAT, entry, prep.client_usage)
        return (True, sse) if sse is not None else None

    async def _send_cached(
        self, stream: bool, data: bytes, rid: bytes, send: Send, req: Exchange, ticket: Ticket, status: bytes
    ) -> int:
        headers = _SSE_HEADERS if stream else [*_JSON_HEADERS, (b"content-length", str(len(data)).encode())]
        req.done()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    *headers,
                    (b"x-request-id", rid),
                    *ticket.headers,
                    (b"x-llmgw-cache-status", status),
                ],
            }
        )
        await send({"type": "http.response.body", "body": data, "more_body": False})
        if req.capture is not None:
            req.capture.append(data)
        return 200

    async def _unary(
        self,
        route: Route,
        kind: Kind,
        payload: bytes,
        rid: bytes,
        send: Send,
        req: Exchange,
        t0: float,
        pending: Ticket | asyncio.Task[Ticket],
        key: int | None,
        priority: int,
    ) -> int:
        pool = route.pool
        headers = {**pool.headers, "x-request-id": rid.decode()}
        overhead = perf_counter() - t0
        data = await self._calls.unary(pool, kind, payload, headers, key, priority)
        ticket = await self._granted(pending, req)
        t_back = perf_counter()
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError:
            self._metrics.upstream_errors.labels(pool.config.name, "malformed").inc()
            raise UpstreamError(f"pool '{pool.config.name}' returned a malformed response") from None
        if not isinstance(parsed, dict):
            self._metrics.upstream_errors.labels(pool.config.name, "malformed").inc()
            raise UpstreamError(f"pool '{pool.config.name}' returned a malformed response")
        req.record(parsed.get("usage"))
        self._count_usage(route, req)
        if req.capture is not None:
            req.capture.append(data)
        req.done()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    *_JSON_HEADERS,
                    (b"content-length", str(len(data)).encode()),
                    (b"x-request-id", rid),
                    *ticket.headers,
                ],
            }
        )
        await send({"type": "http.response.body", "body": data, "more_body": False})
        self._metrics.overhead_of(kind.value).observe(overhead + perf_counter() - t_back)
        return 200

    def _count_usage(self, route: Route, req: Exchange) -> None:
        route.metrics.input_tokens.inc(req.usage_in)
        route.metrics.output_tokens.inc(req.usage_out)

    async def _stream(
        self,
        route: Route,
        kind: Kind,
        payload: bytes,
        rid: bytes,
        client_usage: bool,
        send: Send,
        req: Exchange,
        t0: float,
        pending: Ticket | asyncio.Task[Ticket],
        topup: bool,
        choices: int,
        key: int | None,
        priority: int,
    ) -> int:
        pool = route.pool
        cfg = pool.config
        headers = {**pool.headers, "x-request-id": rid.decode()}
        overhead = perf_counter() - t0
        splitter = SSESplitter(strip_usage=not client_usage, strip_continuous=topup)
        resp: Upstream | None = None
        replica: Replica | None = None
        verdict = "neutral"
        t_first = t_last = 0.0
        try:
            strip = (not client_usage, topup)
            opened = await self._calls.open_stream(pool, kind, payload, headers, strip, key, priority)
            replica, resp, first, splitter = opened.replica, opened.resp, opened.first, opened.splitter
            read = opened.read
            ticket = await self._granted(pending, req)
            t = perf_counter()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [*_SSE_HEADERS, (b"x-request-id", rid), *ticket.headers],
                }
            )
            await send({"type": "http.response.body", "body": first, "more_body": True})
            capture = req.capture
            if capture is not None:
                capture.append(first)
            t_first = t_last = t
            route.metrics.ttft.observe(t - t0)
            req.ttft = t - t0
            overhead += perf_counter() - t
            tail = b""
            try:
                while True:
                    if (
                        topup
                        and ticket.topping_up
                        and splitter.produced >= ticket.output_reserved
                        and not splitter.saw_done
                    ):
                        if not await self._admissions.top_up(ticket):
                            # The budget refuses more: stop the pool, end the stream like max_tokens would.
                            tail = splitter.length_tail(kind is Kind.CHAT, client_usage, choices)
                            break
                    chunk = await read()
                    if not chunk:
                        break
                    t = perf_counter()
                    out, has_output = splitter.feed(chunk)
                    if has_output:
                        t_last = t
                    if out:
                        if capture is not None:
                            capture.append(out)
                        overhead += perf_counter() - t
                        await send({"type": "http.response.body", "body": out, "more_body": True})
                if not splitter.saw_done and not tail:
                    self._metrics.upstream_errors.labels(cfg.name, "truncated_stream").inc()
                    verdict = "fail"
                    tail = error_event(
                        UpstreamError(f"pool '{cfg.name}' ended the stream without [DONE]").body()
                    )
                elif splitter.saw_done:
                    verdict = "ok"
            except UPSTREAM_FAILURES as exc:
                verdict = "fail"
                tail = error_event(self._calls.failed(pool, exc).body())
            except asyncio.CancelledError:
                if not req.client_gone:
                    # Shutdown after the drain period: end the stream the way the client understands.
                    with contextlib.suppress(Exception):
                        await send({"type": "http.response.body", "body": _SHUTDOWN_TAIL, "more_body": False})
                raise
            req.done()
            await send({"type": "http.response.body", "body": tail, "more_body": False})
            return 200
        finally:
            if replica is not None:
                pool.replicas.release(replica, verdict, t_first - t0 if t_first else None)
            if splitter.usage is not None:
                req.record(splitter.usage)
            else:
                req.usage_out = splitter.events
            if resp is not None:
                self._count_usage(route, req)
                ct = req.usage_out
                if splitter.saw_done and ct > 1 and t_last > t_first:
                    req.tpot = (t_last - t_first) / (ct - 1)
                    route.metrics.tpot.observe(req.tpot)
                req.broken = verdict == "fail"
                self._metrics.overhead_of(kind.value).observe(overhead)
                # Closing (not releasing) an unfinished response drops the connection, which is how
                # vLLM learns that nobody is reading and aborts the request.
                if splitter.saw_done:
                    resp.release()
                else:
                    resp.close()
