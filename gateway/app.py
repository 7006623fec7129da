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
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import FrameType
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from gateway import __version__
from gateway.config import Policy
from gateway.edge.exchange import Kind, Receive, RequestHeaders, RequestIds, Scope, Send, send_error
from gateway.edge.openapi import (
    RELAY_ERRORS,
    ChatCompletion,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
    EmbeddingList,
    EmbeddingRequest,
    ModelCard,
    ModelList,
    error_responses,
)
from gateway.errors import (
    GatewayError,
    InvalidRequestError,
    MethodNotAllowedError,
    NotFoundError,
    UpstreamUnavailableError,
)
from gateway.observability.metrics import Metrics, PoolsCollector
from gateway.observability.observer import Observer
from gateway.observability.request_log import RequestLog, request_logger
from gateway.observability.tracing import TraceHooks
from gateway.parts import build as build_components
from gateway.relay.pipeline import Relay, RelayParts
from gateway.relay.response_cache import build_cache
from gateway.routing.aliases import build_routed
from gateway.settings import Settings
from gateway.tenancy.admin import build_admin_router
from gateway.upstream.h1 import H1Client
from gateway.upstream.hosted import HostedBridge
from gateway.upstream.pool_client import PoolClient, metrics_fetch, new_session

RELAY_PATHS = {
    "/v1/chat/completions": Kind.CHAT,
    "/v1/completions": Kind.COMPLETIONS,
    "/v1/embeddings": Kind.EMBEDDINGS,
}


# One server-sent event: `data:` is a JSON chunk, an error object, or the `[DONE]` terminator.
SSE_EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"data": {"type": "string"}, "event": {"type": "string"}},
    "required": ["data"],
}


class _Runtime:
    """What the lifespan builds; absent until start-up completes."""

    def __init__(self, relay: Relay, metrics: Metrics) -> None:
        self.relay = relay
        self.metrics = metrics
        self.draining = False  # shutting down: new relay requests are refused


class _Delegate(Response):
    """A FastAPI response that hands the raw ASGI exchange to the relay (same code as the fast path)."""

    def __init__(self, app: GatewayApp, kind: Kind) -> None:
        super().__init__()
        self._app = app
        self._kind = kind

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app.relay_request(self._kind, scope, receive, send)


class GatewayApp:
    def __init__(self, policy: Policy, settings: Settings, tracing: TraceHooks | None = None) -> None:
        self.policy = policy
        self.settings = settings
        self.runtime: _Runtime | None = None
        self.ready = True  # false from SIGTERM on: load balancers stop sending, requests still served
        self.started_at = time.time()
        self.ids = RequestIds()
        self.parts = build_components(policy, settings)
        # Routed aliases load their router models here, before serving: a missing or corrupt artifact
        # stops start-up with the reason (ConfigError), unless the policy configures a fallback.
        self.routed = build_routed(policy, logging.getLogger("llmgw.router"))
        self.cache = build_cache(policy, settings, self.parts.metrics, self.routed)
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
        self.api = self._build_api()

    @asynccontextmanager
    async def _lifespan(self, _: FastAPI) -> AsyncIterator[None]:
        parts = self.parts
        hosted = [p for p in self.policy.pools if p.engine == "litellm"]
        bridge = HostedBridge(hosted) if hosted else None
        if bridge is not None:
            await bridge.start()
        pools = {
            p.name: PoolClient.build(p, hosted_base=bridge.base if bridge else "") for p in self.policy.pools
        }
        session = new_session(self.settings.upstream_pool_size)
        h1 = H1Client() if self.settings.upstream_client == "h1" else None
        control = httpx.AsyncClient(timeout=5.0)  # scraping TLS replicas, discovery (control plane)
        fetch = metrics_fetch(h1, control)
        for name, pool in pools.items():
            pool.replicas.on_wait = parts.metrics.queue_wait.labels(name).observe
            pool.start(fetch)
        parts.metrics.registry.register(PoolsCollector({n: p.replicas for n, p in pools.items()}))
        await parts.start()
        if self.cache is not None:
            await self.cache.start()
        relay = Relay(
            RelayParts(
                policy=self.policy,
                pools=pools,
                session=session,
                metrics=parts.metrics,
                auth=parts.auth,
                admissions=parts.admissions,
                ids=self.ids,
                max_body_bytes=self.settings.max_body_bytes,
                routed=self.routed,
                observer=self.observer,
                cache=self.cache,
                h1=h1,
            )
        )
        self.runtime = _Runtime(relay, parts.metrics)
        renewer = asyncio.create_task(parts.admissions.renew_forever())
        # Everything built so far lives as long as the process: move it out of the GC's sight, and
        # collect the young generation less often. Measured (docs/design/003): full collections
        # stalled the loop ~21 ms twice a second under load; P99 at 32 went 26 -> 6.4 ms, +15 % req/s.
        gc.collect()
        gc.freeze()
        gc.set_threshold(*self.settings.gc_threshold)
        restore_sigterm = _drain_on_sigterm(self.begin_drain, self.settings.drain_delay_s)
        try:
            yield
        finally:
            restore_sigterm()
            self.runtime.draining = True
            renewer.cancel()
            await asyncio.gather(renewer, return_exceptions=True)
            for pool in pools.values():
                await pool.close()
            await control.aclose()
            if bridge is not None:
                await bridge.close()
            if self.cache is not None:
                await self.cache.close()
            await parts.close()
            await session.close()
            if h1 is not None:
                h1.close()
            provider = getattr(
                self.tracing, "provider", None
            )  # gateway.observability.otel.Tracing's SDK provider
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
            await send_error(send, err, self.ids.of(scope))
            return
        await rt.relay.handle(kind, scope, receive, send)

    def _build_api(self) -> FastAPI:
        api = FastAPI(
            title="llm-gateway",
            version=__version__,
            lifespan=self._lifespan,
            description="OpenAI-compatible gateway over self-hosted model pools.",
        )
        api.openapi = lambda: self._openapi(api)  # type: ignore[method-assign]
        body_models: dict[Kind, Any] = {
            Kind.CHAT: (ChatCompletionRequest, ChatCompletion),
            Kind.COMPLETIONS: (CompletionRequest, Completion),
            Kind.EMBEDDINGS: (EmbeddingRequest, EmbeddingList),
        }
        for path, kind in RELAY_PATHS.items():
            req_model, resp_model = body_models[kind]
            responses: dict[int | str, dict[str, Any]] = {
                200: {"model": resp_model, "description": "the pool's answer"},
                **RELAY_ERRORS,
            }
            if kind is not Kind.EMBEDDINGS:
                responses[200]["content"] = {"text/event-stream": {"schema": SSE_EVENT_SCHEMA}}

            api.add_api_route(
                path,
                self._delegate_endpoint(kind),
                methods=["POST"],
                name=kind.value,
                summary=f"OpenAI {kind.value} (relayed to the alias's pool)",
                responses=responses,
                openapi_extra={
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {"$ref": f"#/components/schemas/{req_model.__name__}"}
                            }
                        },
                    }
                },
            )

        api.include_router(
            build_admin_router(
                self.parts.store,
                self.settings.admin_key,
                set(self.policy.limits.tiers),
                {m.name for m in self.policy.models},
                static_keys=self.parts.static_keys,
            )
        )

        api.include_router(self.observer.feedback.router(self.parts.auth))

        @api.get("/v1/models", response_model=ModelList, responses=error_responses(401, 503))
        async def list_models(request: Request) -> ModelList:
            """The aliases the caller's key may use."""
            created = int(self.started_at)
            h = RequestHeaders(request.scope)
            aliases = await self.parts.auth.models_for(
                h.authorization, [m.name for m in self.policy.models], api_key=h.api_key
            )
            return ModelList(data=[ModelCard(id=a, created=created, owned_by="llm-gateway") for a in aliases])

        @api.get("/healthz", include_in_schema=False)
        def healthz() -> dict[str, str]:
            return {"status": "ok"}

        @api.get("/readyz", include_in_schema=False)
        def readyz() -> JSONResponse:
            rt = self.runtime
            if rt is None or rt.draining or not self.ready:
                return JSONResponse({"status": "not ready"}, status_code=503)
            return JSONResponse({"status": "ready"})

        @api.get("/metrics", include_in_schema=False)
        def metrics() -> Response:
            rt = self.runtime
            data = generate_latest(rt.metrics.registry) if rt else b""
            return Response(data, media_type=CONTENT_TYPE_LATEST)

        @api.exception_handler(GatewayError)
        async def _gateway_error(request: Request, exc: GatewayError) -> JSONResponse:
            return JSONResponse(exc.payload(), status_code=exc.status, headers=exc.response_headers())

        @api.exception_handler(StarletteHTTPException)
        async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
            err: GatewayError
            if exc.status_code == 404:
                err = NotFoundError(f"no route for {request.method} {request.url.path}")
            elif exc.status_code == 405:
                err = MethodNotAllowedError(f"{request.method} is not allowed on {request.url.path}")
            else:
                err = InvalidRequestError(str(exc.detail))
            return JSONResponse(err.payload(), status_code=exc.status_code, headers=err.response_headers())

        @api.exception_handler(RequestValidationError)
        async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
            err = InvalidRequestError(f"invalid request: {exc.errors()[:1]}")
            return JSONResponse(err.payload(), status_code=400)

        return api

    def _delegate_endpoint(self, kind: Kind) -> Any:
        def endpoint(request: Request) -> Response:
            return _Delegate(self, kind)

        return endpoint

    def _openapi(self, api: FastAPI) -> dict[str, Any]:
        if api.openapi_schema:
            return api.openapi_schema
        schema = get_openapi(
            title=api.title, version=api.version, description=api.description, routes=api.routes
        )
        comps = schema.setdefault("components", {}).setdefault("schemas", {})
        aliases = [m.name for m in self.policy.models]
        for model in (ChatCompletionRequest, CompletionRequest, EmbeddingRequest):
            js = model.model_json_schema(ref_template="#/components/schemas/{model}")
            for name, sub in js.pop("$defs", {}).items():
                comps.setdefault(name, sub)
            js["properties"]["model"] = {"type": "string", "enum": aliases, "title": "Model"}
            comps[model.__name__] = js
        api.openapi_schema = schema
        return schema


def _drain_on_sigterm(on_drain: Callable[[], None], delay_s: float) -> Callable[[], None]:
    """Wrap the server's SIGTERM handler: readiness off at once, the server's shutdown `delay_s` later.

    Kubernetes removes a terminating pod from its Service endpoints only eventually, so requests keep
    arriving for a few seconds after SIGTERM; the listener must stay open meanwhile. Then uvicorn's
    own graceful shutdown closes it and lets in-flight streams finish (LLMGW_DRAIN_SECONDS). Installed
    from the lifespan, so it works in every worker of a multi-worker server too (uvicorn installs its
    handlers before the lifespan starts). A second SIGTERM shuts down at once. Returns the undo.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None  # signal handlers belong to the main thread (e.g. a test client's thread)
    previous = signal.getsignal(signal.SIGTERM)
    fired = False

    def handler(sig: int, frame: FrameType | None) -> None:
        nonlocal fired
        if fired or not callable(previous):
            if callable(previous):
                previous(sig, frame)
            return
        fired = True
        on_drain()
        timer = threading.Timer(delay_s, previous, (sig, frame))
        timer.daemon = True
        timer.start()

    if not callable(previous):
        return lambda: None  # no server handler to delay (not under uvicorn): leave SIGTERM alone
    signal.signal(signal.SIGTERM, handler)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)

    return restore


def _with_request_id(send: Send, rid: bytes) -> Send:
    async def wrapped(message: Any) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", []), (b"x-request-id", rid)]
        await send(message)

    return wrapped
