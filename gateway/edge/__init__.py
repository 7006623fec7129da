"""The HTTP edge: ASGI types, the request's identity and headers, its record (`Exchange`), errors in
the OpenAI shape, and the FastAPI side for everything off the hot path.

Modules: `exchange` (ASGI types, Kind, RequestIds, RequestHeaders, Exchange, send_error), `api` (the
FastAPI app: health, readiness, metrics, models, admin, OpenAPI), `openapi` (schemas), `drain`
(SIGTERM), `server` (`llmgw serve`). Only `exchange`'s names are re-exported here: the others load
FastAPI or uvicorn.
"""

from __future__ import annotations

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

__all__ = [
    "ClientGone",
    "Exchange",
    "Kind",
    "Receive",
    "RequestHeaders",
    "RequestIds",
    "Scope",
    "Send",
    "send_error",
]
