"""The HTTP edge: ASGI types, the request's id and headers, its HTTP facts (`Exchange`: the request
record's `http` part, gateway.record), errors in the OpenAI shape, and the FastAPI side for everything
off the hot path.

Modules: `exchange` (ASGI types, Kind, RequestIds, RequestHeaders, Exchange, send_error), `api` (the
FastAPI app: health, readiness, metrics, models, admin, OpenAPI), `openapi` (schemas), `drain`
(SIGTERM), `server` (`llmgw serve`), `protocol` (the bounded HTTP/1.1 protocol). Names are imported
from their modules (no package facade, docs/design/018-layout.md): `api` and `server` load FastAPI or
uvicorn, which the hot path's `import gateway.edge.exchange` should not.
"""
