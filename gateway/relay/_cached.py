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
from gateway.record import Answer, Ask, CacheState, RequestRecord
from gateway.relay.normalize import prepare
from gateway.relay.response_cache import BYPASS, MISS, ResponseCache
from gateway.routing.table import Routes

_TIER = (b"x-llmgw-tier", CACHE_POOL.encode())  # a hit: the cache answered
# The cache state of a request the cache stage passes by (no cache, or `alias:adapter`): one shared
# value, as nothing writes a part after the stage that made it.
BYPASSED = CacheState(None, BYPASS, False)


class CacheStage:
    def __init__(
        self,
        cache: ResponseCache,
        routes: Routes,
        admissions: Admissions,
        ids: RequestIds,
        trace: TraceHooks,
        keep_text: bool = False,
    ) -> None:
        self._cache = cache
        self._routes = routes
        self._admissions = admissions
        self._ids = ids
        self._trace = trace
        self._keep_text = keep_text  # the request log writes answers' text: a hit's bytes are kept

    async def serve(self, req: RequestRecord, ask: Ask, send: Send, allowed: frozenset[str]) -> bool:
        """True when the cache answered the request; else it is a miss or bypass (`req.cache`).
        `allowed`: the pools the caller's key may use (empty: any)."""
        cache, alias, x, who = self._cache, ask.alias, req.http, req.who
        assert who is not None
        look = cache.plan(x.endpoint, alias, ask.body, x.headers.cache, who.tenant, allowed)
        status = BYPASS
        if look is not None:
            with self._trace.span("cache"):
                found = await cache.get(look)
            status = MISS
            if found is not None:
                reply = self._reply(req, ask, found[0])
                if reply is not None:
                    req.cache = CacheState(look, found[1], True)
                    await self._send_hit(req, found[1], reply, send)
                    cache.counted(alias, found[1], usage_of(found[0]))
                    return True
        cache.counted(alias, status, None)
        req.cache = CacheState(look, status, False)
        return False

    def remember(self, req: RequestRecord) -> None:
        """Store a missed request's answer once it succeeded whole."""
        look, answer = req.cache.look if req.cache is not None else None, req.answer
        if look is not None and answer is not None and req.http.status == 200 and not answer.broken:
            data = b"".join(answer.capture or ())
            self._cache.remember(look, req.http.stream, data, answer.usage_in, answer.usage_out)

    def _reply(self, req: RequestRecord, ask: Ask, entry: bytes) -> bytes | None:
        """The bytes to send for a hit, or None when the entry cannot serve this request (then it is a
        miss). Sets the stream flag. The request is validated as a miss would be (on a copy: the
        relay's own `prepare` rewrites the body for the pool later, on a miss)."""
        x = req.http
        route = self._routes.any_route(ask.alias)
        prep = prepare(x.kind, dict(ask.body), route.model, route.upstream_model)
        if not prep.stream:
            return entry
        sse = replay(x.kind is Kind.CHAT, entry, prep.client_usage)
        if sse is not None:
            x.stream = True
        return sse

    async def _send_hit(self, req: RequestRecord, status: bytes, data: bytes, send: Send) -> None:
        """Answer from the cache (`req.answer`: no usage). The hit counts against the tenant's request
        rates and concurrency (an admission on the `cache` pool), settled once it is sent."""
        x, who = req.http, req.who
        assert who is not None
        with self._trace.span("rate_limit"):
            lease_id = self._ids.new().decode()
            ticket = await self._admissions.admit(lease_id, who.tenant, CACHE_POOL, 0, 0, False)
        try:
            if x.stream:
                headers = SSE_HEADERS
            else:
                headers = [*JSON_HEADERS, (b"content-length", str(len(data)).encode())]
            x.done()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        *headers,
                        (b"x-request-id", x.rid),
                        *ticket.headers,
                        (b"x-llmgw-cache-status", status),
                        _TIER,
                    ],
                }
            )
            await send({"type": "http.response.body", "body": data, "more_body": False})
            req.answer = Answer(None, [data] if self._keep_text else None)
            x.status = 200
        finally:
            self._admissions.settle(ticket, 0, 0)
