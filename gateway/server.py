"""`llmgw serve`: load settings and policy, then run uvicorn (uvloop + httptools).

SIGTERM (single-worker serving): readiness turns false at once, but the listener stays open for
`drain_delay_s`, because Kubernetes removes a terminating pod from its Service endpoints only
eventually and requests keep arriving meanwhile. Then uvicorn's graceful shutdown closes the
listener, lets in-flight requests (long streams included) finish for up to `drain_seconds`, and
the process exits.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

import uvicorn

from gateway.app import GatewayApp
from gateway.config import ConfigError, Policy, default_policy, load_policy
from gateway.routing import build_routed
from gateway.runtime import check_deployment
from gateway.settings import Settings


def load(settings: Settings) -> Policy:
    return load_policy(settings.config) if settings.config else default_policy()


def create_app() -> GatewayApp:
    """Factory for `uvicorn --factory gateway.server:create_app` (used by multi-worker serving)."""
    settings = Settings()
    return GatewayApp(load(settings), settings)


class DrainingServer(uvicorn.Server):
    """uvicorn.Server whose first SIGTERM starts a drain (readiness false) before shutting down."""

    def __init__(self, config: uvicorn.Config, on_drain: Callable[[], None], delay_s: float) -> None:
        super().__init__(config)
        self._on_drain = on_drain
        self._delay = delay_s
        self._draining = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig != signal.SIGTERM or self._draining or self._delay <= 0:
            if sig == signal.SIGTERM and not self._draining:
                self._on_drain()
            super().handle_exit(sig, frame)
            return
        self._draining = True
        self._on_drain()
        timer = threading.Timer(self._delay, super().handle_exit, (sig, frame))
        timer.daemon = True
        timer.start()


def serve(config: str | None, host: str | None, port: int | None, workers: int | None) -> int:
    overrides = {
        k: v for k, v in {"config": config, "host": host, "port": port, "workers": workers}.items() if v
    }
    settings = Settings(**overrides)  # type: ignore[arg-type]
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app: GatewayApp | None = None
    try:
        policy = load(settings)
        check_deployment(policy, settings)
        if settings.workers > 1:
            build_routed(policy, logging.getLogger("llmgw.router"))  # each worker loads them again
        else:
            app = GatewayApp(policy, settings)
    except ConfigError as exc:
        print(f"llmgw: cannot start:\n{exc}", file=sys.stderr)
        return 2
    common: dict[str, object] = dict(
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        access_log=False,
        log_level=settings.log_level,
        timeout_graceful_shutdown=int(settings.drain_seconds),
        lifespan="on",
    )
    if settings.workers > 1:
        # Workers re-read settings from the environment; pass the resolved ones down.
        os.environ.update(
            {
                "LLMGW_CONFIG": settings.config or "",
                "LLMGW_MAX_BODY_BYTES": str(settings.max_body_bytes),
                "LLMGW_WORKERS": str(settings.workers),
            }
        )
        uvicorn.run("gateway.server:create_app", factory=True, workers=settings.workers, **common)  # type: ignore[arg-type]
    else:
        assert app is not None
        uv_config = uvicorn.Config(app, **common)  # type: ignore[arg-type]
        DrainingServer(uv_config, app.begin_drain, settings.drain_delay_s).run()
    return 0
