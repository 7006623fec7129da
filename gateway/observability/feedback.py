"""`POST /v1/feedback {request_id, accepted, score?}`: a tenant rates one of its own answers.

Each delivered answer is remembered for a while (request id -> org, app, answering pool) in a bounded
in-memory map: `LLMGW_FEEDBACK_TTL_S` (default 1 h) and at most `LLMGW_FEEDBACK_MAX_ENTRIES`
(oldest first out). Entries are keyed by (org, request id): a client may choose its own
`x-request-id`, so two orgs can use the same id without seeing each other's answers, and a caller
from another org gets 404, exactly as for an unknown id (existence is not revealed).

One verdict per answer: a second rating gets 409, so the accepted / rejected counters never need to
be undone. `accepted: false` counts the answer in `llmgw_rejected_outputs_total`; `score` (0..1) is
kept in a histogram per pool.

Several replicas: with Redis configured (`LLMGW_REDIS_URL`) each delivered answer is also shared
through Redis (gateway.observability.feedback_shared: buffered, flushed in the background, same TTL),
so feedback may reach any replica: the local ring is asked first, then Redis. "Rated once" holds
across replicas (a rated marker set with NX). Redis failing while a non-local answer is rated: 503;
an answer the replica itself served is still rated locally. Without Redis the map is per replica:
feedback must reach the replica that served the request, or it gets 404.

`on_rated(callback)` registers `callback(org, request_id, accepted, score, delivered)`, called once
per accepted rating (the router turns ratings of routed answers into outcomes); its errors are logged.
"""

from __future__ import annotations

import logging
import time
from array import array
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Request
from prometheus_client import CollectorRegistry, Histogram
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.edge.exchange import RequestHeaders
from gateway.edge.openapi import error_responses
from gateway.edge.small_body import small_body
from gateway.errors import ConflictError, InvalidRequestError, NotFoundError, UpstreamUnavailableError
from gateway.observability.cost import CostMetrics
from gateway.observability.feedback_shared import Delivered, FeedbackStoreUnavailable, SharedFeedback
from gateway.tenancy.auth import Authenticator
from ratelimit.model import Tenant

__all__ = ["Delivered", "Feedback", "FeedbackAck", "FeedbackRequest", "FeedbackStore", "OnRated"]

OnRated = Callable[[str, str, bool, float | None, Delivered], None]
Charge = Callable[[Tenant], Awaitable[None]]
_log = logging.getLogger("llmgw.feedback")


def _rated_twice(request_id: str) -> ConflictError:
    return ConflictError(f"request '{request_id}' was already rated", code="feedback_exists")


_POOL_BITS = 16  # pool index in the low bits of an entry, delivery time (0.1 s ticks, +1) above


class FeedbackStore:
    """Bounded, TTL'd record of delivered answers (one replica's memory): a ring buffer.

    Every answer the gateway delivers is remembered, so this is on the hot path of every request.
    Measured (docs/performance.md, memory soak): a dict of 50,000 entries replaced at 3,000 req/s cost
    ~13 % of the gateway's throughput and grew its RSS by ~10 MB through allocator fragmentation
    before it settled. The ring is two preallocated `array('q')` columns: remembering an answer
    writes two machine integers and allocates nothing that outlives the call. A lookup (a tenant
    posting feedback: rare) scans the key column in C (`array.index`, ~50 µs for 50,000 entries).

    An entry: the process-salted 64-bit hash of (org, request id) and one int holding the delivery
    time in 0.1 s ticks and the pool's index. Two live entries colliding would take ~2^32 of them;
    the 50,000 default makes it a ~1e-10 event, and it could only merge two answers' ratings. A
    client reusing its x-request-id gets the newest answer found; its rating starts afresh.
    """

    def __init__(self, ttl_s: float, max_entries: int, clock: Callable[[], float] = time.time) -> None:
        self._ttl = ttl_s
        self._clock = clock
        self._keys = array("q", bytes(8 * max_entries))
        self._values = array("q", bytes(8 * max_entries))  # 0: an empty slot
        # Callers' opaque extras by slot: storing a reference allocates nothing.
        self._extras: list[bytes | None] = [None] * max_entries
        self._next = 0
        self._rated: set[int] = set()
        self._pools: list[str] = []
        self._pool_ids: dict[str, int] = {}

    def __len__(self) -> int:
        """Live (unexpired) entries; a scan, for tests and diagnostics."""
        cutoff = (self._clock() - self._ttl) * 10
        return sum(1 for v in self._values if v and (v >> _POOL_BITS) - 1 >= cutoff)

    def remember(self, org: str, request_id: str, pool: str, extra: bytes | None = None) -> None:
        pid = self._pool_ids.get(pool)
        if pid is None:
            pid = self._pool_ids[pool] = len(self._pools)
            self._pools.append(pool)
        key = hash((org, request_id))
        i = self._next
        if self._rated:
            if self._values[i]:
                self._rated.discard(self._keys[i])  # the overwritten answer's verdict goes with it
            self._rated.discard(key)  # a reused request id: the new answer is not rated yet
        self._keys[i] = key
        self._values[i] = (int(self._clock() * 10) + 1) << _POOL_BITS | pid
        self._extras[i] = extra
        self._next = i + 1 if i + 1 < len(self._keys) else 0

    def find(self, org: str, request_id: str) -> Delivered | None:
        key = hash((org, request_id))
        keys, values = self._keys, self._values
        best = best_i = 0
        i = 0
        while True:
            try:
                i = keys.index(key, i)
            except ValueError:
                break
            if values[i] > best:
                best, best_i = values[i], i
            i += 1
        if not best:
            return None
        at = ((best >> _POOL_BITS) - 1) / 10
        if self._clock() - at > self._ttl:
            return None
        pool = self._pools[best & ((1 << _POOL_BITS) - 1)]
        return Delivered(pool, at, key in self._rated, self._extras[best_i])

    def rated(self, org: str, request_id: str) -> bool:
        return hash((org, request_id)) in self._rated

    def mark_rated(self, org: str, request_id: str) -> None:
        self._rated.add(hash((org, request_id)))


class FeedbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: str = Field(min_length=1, max_length=128, description="the x-request-id of the answer")
    accepted: bool = Field(description="whether the answer was usable")
    score: float | None = Field(None, ge=0, le=1, description="optional quality score, 0..1")


class FeedbackAck(BaseModel):
    request_id: str
    accepted: bool


class Feedback:
    """The store (local ring, plus Redis when shared), the metrics it feeds, and the route."""

    def __init__(self, store: FeedbackStore, cost: CostMetrics, registry: CollectorRegistry) -> None:
        self.store = store
        self.shared: SharedFeedback | None = None
        self._cost = cost
        self._on_rated: list[OnRated] = []
        self._score = Histogram(
            "llmgw_feedback_score",
            "Scores given with feedback (0..1), by answering pool",
            ["pool"],
            buckets=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
            registry=registry,
        )

    def share(self, shared: SharedFeedback) -> None:
        self.shared = shared

    def on_rated(self, callback: OnRated) -> None:
        self._on_rated.append(callback)

    def remember(self, org: str, request_id: str, pool: str, extra: bytes | None = None) -> None:
        """A delivered answer (hot path: local writes; the Redis copy is buffered)."""
        self.store.remember(org, request_id, pool, extra)
        if self.shared is not None:
            self.shared.publish(org, request_id, pool, time.time(), extra)

    async def start(self) -> None:
        if self.shared is not None:
            self.shared.start()

    async def close(self) -> None:
        if self.shared is not None:
            await self.shared.close()

    async def rate(self, org: str, body: FeedbackRequest) -> None:
        rid = body.request_id
        d = self.store.find(org, rid)
        if d is not None and d.rated:
            raise _rated_twice(rid)
        local = d is not None
        shared = self.shared
        if shared is not None:
            try:
                d = d or await shared.find(org, rid)
                if d is not None and (d.rated or not await shared.claim(org, rid)):
                    raise _rated_twice(rid)
            except FeedbackStoreUnavailable as e:
                if not local:  # without the rated marker another replica could rate it again
                    raise UpstreamUnavailableError(
                        f"the feedback store is unavailable ({e})", code="feedback_store_unavailable"
                    ) from None
                # Served here: rated locally; only another replica could rate it a second time.
                if self.store.rated(org, rid):  # rated here while this one waited for Redis
                    raise _rated_twice(rid) from None
        if d is None:
            raise NotFoundError(f"no answer with request id '{rid}' to rate (or it expired)")
        if local:  # another replica's answer is marked in Redis; marking it here would never expire
            self.store.mark_rated(org, rid)
        self._cost.feedback.labels(d.pool, "true" if body.accepted else "false").inc()
        if not body.accepted:
            self._cost.reject(org, d.pool)
        if body.score is not None:
            self._score.labels(d.pool).observe(body.score)
        for callback in self._on_rated:
            try:
                callback(org, rid, body.accepted, body.score, d)
            except Exception:  # a hook must not turn an accepted rating into an error
                _log.exception("feedback on_rated hook failed")

    def router(self, auth: Authenticator, charge: Charge) -> APIRouter:
        """The route. `charge(tenant)` spends one request of the key's limits (raises its refusal):
        a rating is a request like any other, so a key's request rate bounds how fast it can rate."""
        r = APIRouter()
        body_schema = FeedbackRequest.model_json_schema()

        @r.post(
            "/v1/feedback",
            response_model=FeedbackAck,
            responses=error_responses(400, 401, 404, 409, 413, 429, 503),
            summary="Rate an answer of your own org (once; feeds cost per accepted output)",
            openapi_extra={
                "requestBody": {"required": True, "content": {"application/json": {"schema": body_schema}}}
            },
        )
        async def feedback(request: Request) -> FeedbackAck:
            h = RequestHeaders(request.scope)
            # Authenticated and charged before a byte of the body is read. Any alias: rating needs a
            # valid key, not access to a particular model.
            principal = await auth.identify(h.authorization, api_key=h.api_key)
            await charge(principal.tenant)
            body = _parse(await small_body(request))
            await self.rate(principal.tenant.org, body)
            return FeedbackAck(request_id=body.request_id, accepted=body.accepted)

        return r


def _parse(raw: bytes) -> FeedbackRequest:
    """The body, or a 400 naming the field (never echoing the client's value back)."""
    try:
        return FeedbackRequest.model_validate_json(raw)
    except ValidationError as exc:
        err = exc.errors(include_input=False, include_url=False)[0]
        param = ".".join(str(p) for p in err["loc"]) or None
        raise InvalidRequestError(f"invalid feedback body at '{param}': {err['msg']}", param=param) from None
