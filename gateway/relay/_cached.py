"""Stage 4, cache lookup: answer from the response cache when it may, else mark the request a miss
whose answer is stored once it succeeds (gateway.relay.response_cache decides, looks up, stores).

A hit is validated as a miss would be (the alias's settings, the stream options); it counts against
the tenant's request rates and concurrency (an admission on the `cache` pool) but not its token
budgets. A stored unary answer serves a streamed request as a replayed SSE stream.
"""

from __future__ import annotations

from cache.entry import replay, usage_of
from gateway.budget.admission import Admissions
from gateway.config import CACHE_POOL
from gateway.edge.exchange import JSON_HEADERS, SSE_HEADERS, Kind, RequestIds, Send
from gateway.observability.tracing import TraceHooks
from gateway.relay._context import RequestContext
from gateway.relay.normalize import prepare
from gateway.relay.response_cache import BYPASS, MISS, ResponseCache
from gateway.routing.table import Routes

_TIER = (b"x-llmgw-tier", CACHE_POOL.encode())  # a hit: the cache answered


class CacheStage:
    def __init__(
        self, cache: ResponseCache, routes: Routes, admissions: Admissions, ids: RequestIds, trace: TraceHooks
    ) -> None:
        self._cache = cache
        self._routes = routes
        self._admissions = admissions
        self._ids = ids
        self._trace = trace

    async def serve(self, ctx: RequestContext, send: Send, allowed: frozenset[str]) -> bool:
        """True when the cache answered the request; else it is a miss or bypass (`ctx.cache`).
        `allowed`: the pools the caller's key may use (empty: any)."""
        cache, alias = self._cache, ctx.alias
        assert ctx.tenant is not None
        look = ctx.look = cache.plan(ctx.endpoint, alias, ctx.body, ctx.headers.cache, ctx.tenant, allowed)
        status = BYPASS
        if look is not None:
            with self._trace.span("cache"):
                found = await cache.get(look)
            status = MISS
            if found is not None:
                reply = self._reply(ctx, found[0])
                if reply is not None:
                    ctx.cache = found[1]
                    await self._send_hit(ctx, reply, send)
                    cache.counted(alias, found[1], usage_of(found[0]))
                    return True
            if ctx.capture is None:
                ctx.capture = []  # the answer's bytes, to store it
        cache.counted(alias, status, None)
        ctx.cache = status
        return False

    def remember(self, ctx: RequestContext) -> None:
        """Store a missed request's answer once it succeeded whole."""
        look = ctx.look
        if look is not None and ctx.status == 200 and not ctx.broken:
            self._cache.remember(look, ctx.stream, b"".join(ctx.capture or ()), ctx.usage_in, ctx.usage_out)

    def _reply(self, ctx: RequestContext, entry: bytes) -> bytes | None:
        """The bytes to send for a hit, or None when the entry cannot serve this request (then it is a
        miss). Sets `ctx.stream`. The request is validated as a miss would be (on a copy: the relay's
        own `prepare` rewrites the body for the pool later, on a miss)."""
        route = self._routes.any_route(ctx.alias)
        prep = prepare(ctx.kind, dict(ctx.body), route.model, route.upstream_model)
        if not prep.stream:
            return entry
        sse = replay(ctx.kind is Kind.CHAT, entry, prep.client_usage)
        if sse is not None:
            ctx.stream = True
        return sse

    async def _send_hit(self, ctx: RequestContext, data: bytes, send: Send) -> None:
        ctx.model, ctx.pool, ctx.hit = ctx.alias, CACHE_POOL, True  # metrics label the alias, pool "cache"
        assert ctx.tenant is not None and ctx.cache is not None
        with self._trace.span("rate_limit"):
            ticket = ctx.ticket = await self._admissions.admit(
                self._ids.new().decode(), ctx.tenant, CACHE_POOL, 0, 0, False
            )
        if ctx.stream:
            headers = SSE_HEADERS
        else:
            headers = [*JSON_HEADERS, (b"content-length", str(len(data)).encode())]
        ctx.done()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    *headers,
                    (b"x-request-id", ctx.rid),
                    *ticket.headers,
                    (b"x-llmgw-cache-status", ctx.cache),
                    _TIER,
                ],
            }
        )
        await send({"type": "http.response.body", "body": data, "more_body": False})
        if ctx.capture is not None:
            ctx.capture.append(data)
        ctx.status = 200
