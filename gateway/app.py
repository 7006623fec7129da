"""Application assembly: lifespan, the fast dispatcher, and the FastAPI app for everything else.

`GatewayApp` is the ASGI callable uvicorn serves. POSTs to the OpenAI relay routes go straight to
`Relay.handle` (no framework on the hot path); every other request, and the lifespan, go to a
FastAPI app that serves health, readiness, metrics, the model list and the OpenAPI document. The
FastAPI routes for the relay paths delegate to the same handler, so both paths behave the same.
All state (HTTP session, pools, metrics registry) is built in the lifespan and closed on shutdown;
nothing is module-global.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from gateway.budget.pricing import Pricing
from gateway.config import ConfigError, Policy
from gateway.dialects.exchange import DialectSend
from gateway.dialects.messages import MessagesDialect
from gateway.dialects.seal import Sealer
from gateway.edge.api import RELAY_PATHS, build_api
from gateway.edge.drain import drain_on_sigterm
from gateway.edge.exchange import Kind, Receive, RequestIds, Scope, Send, send_error
from gateway.errors import (
    UpstreamUnavailableError,
)
from gateway.ledger.spool import MemorySpool, RedisSpool, Spool
from gateway.ledger.store import SpendStore, database_url
from gateway.ledger.writer import Ledger
from gateway.observability.feedback_shared import SharedFeedback
from gateway.observability.metrics import Metrics
from gateway.observability.observer import Observer
from gateway.observability.redis_room import RedisRoom
from gateway.observability.request_log import RequestLog, request_logger
from gateway.observability.tracing import TraceHooks
from gateway.parts import build as build_components
from gateway.relay.pipeline import Relay, RelayParts
from gateway.relay.response_cache import build_cache
from gateway.routing.aliases import build_routed
from gateway.routing.calibration_share import SharedCalibration
from gateway.routing.outcome_share import SharedOutcomes
from gateway.settings import Settings
from gateway.upstream.calls import PoolCalls
from gateway.upstream.clients import UpstreamClients
from gateway.upstream.drift_canary import DriftCanary
from gateway.upstream.transport import Transport


class _Runtime:
    """What the lifespan builds; absent until start-up completes."""

    def __init__(self, relay: Relay, metrics: Metrics) -> None:
        self.relay = relay
        self.metrics = metrics
        self.draining = False  # shutting down: new relay requests are refused


class GatewayApp:
    def __init__(
        self,
        policy: Policy,
        settings: Settings,
        tracing: TraceHooks | None = None,
        transport: Transport | None = None,
    ) -> None:
        self.policy = policy
        self.settings = settings
        # What the dialects sign for clients to send back: one key for every replica (LLMGW_SIGNING_KEY).
        self.sealer = Sealer(settings.signing_key.encode() if settings.signing_key else None)
        self.transport = transport  # one transport for every replica (tests: a MockTransport)
        self.runtime: _Runtime | None = None
        self.ready = True  # false from SIGTERM on: load balancers stop sending, requests still served
        self.started_at = time.time()
        self.ids = RequestIds()
        self.parts = build_components(policy, settings)
        # The spend ledger's database (also the audit log's and the spend reports'), when configured.
        self.database_url = database_url(os.environ)
        if policy.ledger.enabled and self.database_url is None:
            raise ConfigError(
                "ledger.enabled is true but neither LLMGW_DATABASE_URL nor LLMGW_DATABASE_URL_FILE is set"
            )
        self.spend_store: SpendStore | None = None
        self.ledger: Ledger | None = None
        # Routed aliases load their router models here, before serving: a missing or corrupt artifact
        # stops start-up with the reason (ConfigError), unless the policy configures a fallback.
        self.routed = build_routed(policy, logging.getLogger("llmgw.router"))
        # Room in the shared Redis for state that grows with traffic (the limiter's headroom kept).
        self.room = (
            RedisRoom(self.parts.redis, self.parts.metrics.registry, policy.limits.growth_max_memory_ratio)
            if self.parts.redis is not None
            else None
        )
        self.cache = build_cache(
            policy, settings, self.parts.metrics, self.routed, room=self._has_room if self.room else None
        )
        # Goodput, cost and the feedback store: built here because the feedback route needs them.
        reqlog = RequestLog(request_logger(), settings.request_log_text) if settings.request_log else None
        if tracing is None and settings.tracing:
            from gateway.observability.otel import (  # only with traces on: the SDK is big
                Tracing,
                build_provider,
            )

            tracing = Tracing(build_provider(settings.trace_sample_ratio))
        self.tracing = tracing
        self.observer = Observer(
            policy,
            self.parts.metrics,
            settings.feedback_ttl_s,
            settings.feedback_max_entries,
            reqlog,
            tracing,
        )
        if self.parts.redis is not None:  # feedback may then reach any replica
            self.observer.feedback.share(
                SharedFeedback(
                    self.parts.redis,
                    settings.feedback_ttl_s,
                    self.parts.metrics.registry,
                    f"{policy.limits.key_prefix}:",  # the one prefix every gateway key starts with
                    room=self._has_room,
                )
            )
        self.api = build_api(self)

    @asynccontextmanager
    async def lifespan(self, _: FastAPI) -> AsyncIterator[None]:
        parts = self.parts
        upstream = await UpstreamClients.start(self.policy, self.settings, parts.metrics, self.transport)
        await parts.start()
        await self._start_ledger()
        if self.room is not None:
            self.room.start()
        await self.observer.feedback.start()
        if self.cache is not None:
            await self.cache.start()
        relay = Relay(
            RelayParts(
                policy=self.policy,
                pools=upstream.pools,
                transports=upstream.transports,
                metrics=parts.metrics,
                auth=parts.auth,
                admissions=parts.admissions,
                ids=self.ids,
                max_body_bytes=self.settings.max_body_bytes,
                max_json_depth=self.settings.max_json_depth,
                routed=self.routed,
                observer=self.observer,
                cache=self.cache,
                sealer=self.sealer,
                pricing=self._pricing(),
            )
        )
        self.runtime = _Runtime(relay, parts.metrics)
        self.observer.feedback.on_rated(relay.on_rated)  # feedback on routed answers teaches the router
        outcomes, calibration = None, None
        if parts.redis is not None:  # every replica learns what any one learns
            prefix = f"{self.policy.limits.key_prefix}:"
            outcomes = SharedOutcomes(parts.redis, relay.learnings(), parts.metrics, prefix)
            await outcomes.start()
            calibration = SharedCalibration(parts.redis, relay.calibrations(), parts.metrics, prefix)
            calibration.start()
        renewer = asyncio.create_task(parts.admissions.renew_forever())
        canary = self._drift_canary(upstream)
        # Everything built so far lives as long as the process: move it out of the GC's sight, and
        # collect the young generation less often. Measured (docs/design/003): full collections
        # stalled the loop ~21 ms twice a second under load; P99 at 32 went 26 -> 6.4 ms, +15 % req/s.
        gc.collect()
        gc.freeze()
        gc.set_threshold(*self.settings.gc_threshold)
        restore_sigterm = drain_on_sigterm(self.begin_drain, self.settings.drain_delay_s)
        try:
            yield
        finally:
            restore_sigterm()
            self.runtime.draining = True
            renewer.cancel()
            await asyncio.gather(renewer, return_exceptions=True)
            if canary is not None:
                await canary.close()
            await relay.close()
            if outcomes is not None and calibration is not None:
                await outcomes.close()
                await calibration.close()
            await upstream.close()
            await self._close()

    def _pricing(self) -> Pricing:
        """The policy's prices; a hosted pool without one is priced from LiteLLM's bundled cost map (which
        only a gateway with hosted pools loads: LiteLLM takes seconds to import)."""
        if any(p.engine == "litellm" for p in self.policy.pools):
            from gateway.upstream.hosted import bundled_price

            return Pricing(self.policy, bundled_price)
        return Pricing(self.policy)

    def _has_room(self) -> bool:
        return self.room is not None and self.room.room

    def _drift_canary(self, upstream: UpstreamClients) -> DriftCanary | None:
        """The opt-in drift canary (policy `drift`), on its own PoolCalls over the shared clients."""
        if self.policy.drift is None:
            return None
        calls = PoolCalls(upstream.transports, self.parts.metrics)
        canary = DriftCanary(self.policy.drift, upstream.pools, calls, self.parts.metrics.drift)
        canary.start()
        return canary

    async def _start_ledger(self) -> None:
        """The database pool (opens connections when first used: a database down at start is the
        drainer's to wait for), and the ledger every finished request is written to."""
        if self.database_url is not None:
            self.spend_store = await SpendStore.connect(self.database_url)
        cfg = self.policy.ledger
        if not cfg.enabled:
            return
        redis = self.parts.redis
        spool: Spool = (
            # `room`: the spool stops growing while Redis is past its share for growing state, so a
            # long database outage can never fill the limiter's Redis (rows then wait in memory).
            RedisSpool(
                redis,
                key_prefix=self.policy.limits.key_prefix,
                max_rows=cfg.spool_max_rows,
                room=self._has_room if self.room is not None else None,
            )
            if redis is not None
            else MemorySpool(cfg.spool_max_rows)
        )
        self.ledger = Ledger(
            cfg, spool, self.spend_store, self.parts.metrics.registry, self.policy.limits.key_prefix
        )
        await self.ledger.start()
        self.observer.ledger = self.ledger

    async def _close(self) -> None:
        if self.ledger is not None:
            self.observer.ledger = None
            await self.ledger.close()  # what it holds goes to the spool; the drainer writes what it can
        if self.spend_store is not None:
            await self.spend_store.close()
        if self.cache is not None:
            await self.cache.close()
        await self.observer.feedback.close()
        if self.room is not None:
            await self.room.close()
        await self.parts.close()
        provider = getattr(self.tracing, "provider", None)  # gateway.observability.otel.Tracing's SDK
        if provider is not None:
            # Export what is still batched (bounded by the exporter's timeout), off the loop.
            await asyncio.to_thread(provider.shutdown)
        # Let aiohttp's transports finish closing before the loop goes away.
        await asyncio.sleep(0)

    def begin_drain(self) -> None:
        """SIGTERM: readiness goes false; serving continues until the server closes the listener."""
        self.ready = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            kind = RELAY_PATHS.get(scope["path"])
            if kind is not None and scope["method"] == "POST":
                await self.relay_request(kind, scope, receive, send)
                return
            send = _with_request_id(send, self.ids.of(scope))
        await self.api(scope, receive, send)

    async def relay_request(self, kind: Kind, scope: Scope, receive: Receive, send: Send) -> None:
        rt = self.runtime
        if rt is None or rt.draining:
            err = UpstreamUnavailableError("the gateway is starting or shutting down")
            if kind in (Kind.MESSAGES, Kind.COUNT_TOKENS):  # in Anthropic's shape, as the relay would
                send = DialectSend(send, MessagesDialect(), dict)
            await send_error(send, err, self.ids.of(scope))
            return
        await rt.relay.handle(kind, scope, receive, send)


def _with_request_id(send: Send, rid: bytes) -> Send:
    async def wrapped(message: Any) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", []), (b"x-request-id", rid)]
        await send(message)

    return wrapped
