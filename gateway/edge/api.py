"""The FastAPI app for everything that is not the relay's hot path: health, readiness, metrics, the
model list, feedback, the admin API and the OpenAPI document.

The relay routes are declared here too, for the OpenAPI document and for requests the fast
dispatcher does not take (gateway.app): they hand the raw ASGI exchange to the same handler.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from gateway import __version__
from gateway.budget.admin_api import BudgetsAdmin
from gateway.config import Policy
from gateway.config_lora import ADAPTER_SEPARATOR
from gateway.edge.anthropic_models import anthropic_model, anthropic_models, speaks_anthropic
from gateway.edge.exchange import Kind, Receive, RequestHeaders, Scope, Send
from gateway.edge.openapi import (
    ANTHROPIC_ERRORS,
    RELAY_ERRORS,
    ChatCompletion,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
    CountTokensRequest,
    EmbeddingList,
    EmbeddingRequest,
    InputTokens,
    InputTokensRequest,
    MessageObject,
    MessagesRequest,
    ModelCard,
    ModelList,
    ResponseObject,
    ResponsesRequest,
    TokenCount,
    error_responses,
)
from gateway.errors import (
    GatewayError,
    InvalidRequestError,
    MethodNotAllowedError,
    ModelNotFoundError,
    NotFoundError,
)
from gateway.tenancy.admin import build_admin_router
from ratelimit.model import Tenant

if TYPE_CHECKING:
    from gateway.app import GatewayApp

__all__ = ["RELAY_PATHS", "build_api"]

RELAY_PATHS = {
    "/v1/chat/completions": Kind.CHAT,
    "/v1/completions": Kind.COMPLETIONS,
    "/v1/embeddings": Kind.EMBEDDINGS,
    "/v1/responses": Kind.RESPONSES,
    "/v1/messages": Kind.MESSAGES,
    "/v1/messages/count_tokens": Kind.COUNT_TOKENS,
    "/v1/responses/input_tokens": Kind.INPUT_TOKENS,
}

_BODY_MODELS: dict[Kind, Any] = {
    Kind.CHAT: (ChatCompletionRequest, ChatCompletion),
    Kind.COMPLETIONS: (CompletionRequest, Completion),
    Kind.EMBEDDINGS: (EmbeddingRequest, EmbeddingList),
    Kind.RESPONSES: (ResponsesRequest, ResponseObject),
    Kind.MESSAGES: (MessagesRequest, MessageObject),
    Kind.COUNT_TOKENS: (CountTokensRequest, TokenCount),
    Kind.INPUT_TOKENS: (InputTokensRequest, InputTokens),
}
_SUMMARIES = {
    Kind.RESPONSES: "OpenAI Responses (translated to chat for the alias's pool)",
    Kind.MESSAGES: "Anthropic Messages (translated to chat for the alias's pool)",
    Kind.COUNT_TOKENS: "Anthropic token counting (the pool's tokenizer; else its calibrated estimate)",
    Kind.INPUT_TOKENS: "OpenAI Responses input counting (the pool's tokenizer; else its calibrated estimate)",
}
_STREAMED = (Kind.CHAT, Kind.COMPLETIONS, Kind.RESPONSES, Kind.MESSAGES)

# One server-sent event: `data:` is a JSON chunk, an error object, or the `[DONE]` terminator.
SSE_EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"data": {"type": "string"}, "event": {"type": "string"}},
    "required": ["data"],
}


class _Delegate(Response):
    """A FastAPI response that hands the raw ASGI exchange to the relay (same code as the fast path)."""

    def __init__(self, app: GatewayApp, kind: Kind) -> None:
        super().__init__()
        self._app = app
        self._kind = kind

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app.relay_request(self._kind, scope, receive, send)


def build_api(app: GatewayApp) -> FastAPI:
    api = FastAPI(
        title="llm-gateway",
        version=__version__,
        lifespan=app.lifespan,
        description="OpenAI-compatible gateway over self-hosted model pools.",
        # A trailing slash is a 404 like any unknown path: Starlette's 307 builds its Location from
        # the client's Host header.
        redirect_slashes=False,
    )
    api.openapi = lambda: _openapi(api, [m.name for m in app.policy.models])  # type: ignore[method-assign]
    _relay_routes(api, app)
    admin = build_admin_router(
        app.parts.store,
        app.settings.admin_key,
        set(app.policy.limits.tiers),
        {m.name for m in app.policy.models},
        static_keys=app.parts.static_keys,
        pools={p.name for p in app.policy.pools},
    )
    if app.parts.budgets is not None:
        BudgetsAdmin(app.parts.budgets, lambda: app.spend_store).mount(admin)
    api.include_router(admin)
    admissions, ids = app.parts.admissions, app.ids

    async def charge(tenant: Tenant) -> None:
        await admissions.charge_request(ids.new().decode(), tenant)

    api.include_router(app.observer.feedback.router(app.parts.auth, charge))
    _service_routes(api, app)
    _error_handlers(api)
    return api


def _relay_routes(api: FastAPI, app: GatewayApp) -> None:
    for path, kind in RELAY_PATHS.items():
        req_model, resp_model = _BODY_MODELS[kind]
        errors = ANTHROPIC_ERRORS if kind in (Kind.MESSAGES, Kind.COUNT_TOKENS) else RELAY_ERRORS
        responses: dict[int | str, dict[str, Any]] = {
            200: {"model": resp_model, "description": "the pool's answer"},
            **errors,
        }
        if kind in _STREAMED:
            responses[200]["content"] = {"text/event-stream": {"schema": SSE_EVENT_SCHEMA}}
        api.add_api_route(
            path,
            _delegate_endpoint(app, kind),
            methods=["POST"],
            name=kind.value,
            summary=_SUMMARIES.get(kind, f"OpenAI {kind.value} (relayed to the alias's pool)"),
            responses=responses,
            openapi_extra={
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": f"#/components/schemas/{req_model.__name__}"}}
                    },
                }
            },
        )


def _delegate_endpoint(app: GatewayApp, kind: Kind) -> Any:
    def endpoint(request: Request) -> Response:
        return _Delegate(app, kind)

    return endpoint


def _adapter_cards(policy: Policy, aliases: list[str], created: int) -> list[ModelCard]:
    """`<alias>:<adapter>` of every callable direct alias on a LoRA pool, with the alias as parent."""
    pools = {p.name: p for p in policy.pools}
    cards = []
    for m in policy.models:
        lora = pools[m.route.pool].lora if m.route.pool is not None else None
        if m.name in aliases and lora is not None and m.route.adapter is None:
            cards += [
                ModelCard(
                    id=m.name + ADAPTER_SEPARATOR + a.name,
                    created=created,
                    owned_by="llm-gateway",
                    parent=m.name,
                )
                for a in lora.adapters
            ]
    return cards


def _service_routes(api: FastAPI, app: GatewayApp) -> None:
    async def callable_aliases(request: Request) -> list[str]:
        """The aliases the caller's key may use: allowed by its models, served by a pool it may use."""
        h = RequestHeaders(request.scope)
        caller = await app.parts.auth.identify(h.authorization, api_key=h.api_key)
        return [
            m.name
            for m in app.policy.models
            if (not caller.models or m.name in caller.models)
            and (not caller.pools or any(p in caller.pools for p in m.route.pools))
        ]

    async def cards(request: Request) -> list[ModelCard]:
        created = int(app.started_at)
        aliases = await callable_aliases(request)
        own = [ModelCard(id=a, created=created, owned_by="llm-gateway") for a in aliases]
        return own + _adapter_cards(app.policy, aliases, created)

    @api.get("/v1/models", response_model=ModelList, responses=error_responses(401, 503))
    async def list_models(request: Request) -> ModelList | JSONResponse:
        """The aliases the caller's key may use (in Anthropic's shape to a caller speaking Anthropic)."""
        if speaks_anthropic(request.headers):
            return await anthropic_models(request, app.policy, cards)
        return ModelList(data=await cards(request))

    @api.get("/v1/models/{model:path}", response_model=ModelCard, responses=error_responses(401, 404, 503))
    async def retrieve_model(model: str, request: Request) -> ModelCard | JSONResponse:
        """One alias the caller's key may use; any other name is a 404 (whether or not it exists)."""
        if speaks_anthropic(request.headers):
            return await anthropic_model(request, app.policy, cards, model)
        for card in await cards(request):
            if card.id == model:
                return card
        raise ModelNotFoundError.of(model)

    # HEAD too: load balancers and uptime checkers probe with it.
    @api.api_route("/healthz", methods=["GET", "HEAD"], include_in_schema=False)
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @api.api_route("/readyz", methods=["GET", "HEAD"], include_in_schema=False)
    def readyz() -> JSONResponse:
        rt = app.runtime
        if rt is None or rt.draining or not app.ready:
            return JSONResponse({"status": "not ready"}, status_code=503)
        return JSONResponse({"status": "ready"})

    @api.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        rt = app.runtime
        data = generate_latest(rt.metrics.registry) if rt else b""
        return Response(data, media_type=CONTENT_TYPE_LATEST)


def _error_handlers(api: FastAPI) -> None:
    """Every error in the OpenAI shape, whoever raised it (the gateway, Starlette, validation)."""

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
        # Where and what, never the client's value (an error must not echo a body back).
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))[:200]
        err = InvalidRequestError(f"invalid request at '{where}': {first.get('msg', '')}")
        return JSONResponse(err.payload(), status_code=400)


def _openapi(api: FastAPI, aliases: list[str]) -> dict[str, Any]:
    if api.openapi_schema:
        return api.openapi_schema
    schema = get_openapi(title=api.title, version=api.version, description=api.description, routes=api.routes)
    comps = schema.setdefault("components", {}).setdefault("schemas", {})
    requests = (ChatCompletionRequest, CompletionRequest, EmbeddingRequest, ResponsesRequest, MessagesRequest)
    for model in (*requests, CountTokensRequest, InputTokensRequest):
        js = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in js.pop("$defs", {}).items():
            comps.setdefault(name, sub)
        js["properties"]["model"] = {"type": "string", "enum": aliases, "title": "Model"}
        comps[model.__name__] = js
    api.openapi_schema = schema
    return schema
