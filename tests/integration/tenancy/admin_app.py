"""A small FastAPI app serving the admin router, rendering GatewayErrors as gateway.app does."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from gateway.config import StaticKey, Tenancy
from gateway.errors import GatewayError
from gateway.tenancy.admin import build_admin_router
from gateway.tenancy.keys import KeyStore, generate_key, hash_key, static_records
from ratelimit.model import LimitsConfig, TierLimits

ADMIN = "admin-" + "x" * 40
STATIC_KEY = generate_key()
TENANCY = Tenancy(keys=[StaticKey(id="ops", sha256=hash_key(STATIC_KEY), org="o", app="a")])
LIMITS = LimitsConfig(tiers={"standard": TierLimits(), "premium": TierLimits(priority="premium")})


def make_app(store: KeyStore, admin_key: str | None = ADMIN) -> FastAPI:
    app = FastAPI()

    @app.exception_handler(GatewayError)
    async def _err(request: Request, exc: GatewayError) -> JSONResponse:
        # What gateway.app does: every GatewayError in the OpenAI error shape.
        return JSONResponse(exc.payload(), status_code=exc.status, headers=exc.response_headers())

    app.include_router(
        build_admin_router(
            store,
            admin_key,
            set(LIMITS.tiers),
            {"small", "large"},
            static_keys=static_records(TENANCY),
            pools={"small", "large"},
        )
    )
    return app
