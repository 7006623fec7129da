"""`llmgw serve`: load settings and policy, check Redis, then run uvicorn (uvloop + httptools).

Settings that cannot work end here with "llmgw: cannot start" and the reason (exit 2), never a
traceback: the policy, the uvicorn version, and the Redis settings (`gateway.redis_conn.preflight`
asks the server once before uvicorn starts: mode, credentials, TLS, sentinels; an outage is no reason
not to start, the failure mode decides).

SIGTERM: readiness turns false at once, the listener stays open for `drain_delay_s` (the app's
lifespan wraps uvicorn's handler, see gateway.app), then uvicorn's graceful shutdown lets in-flight
requests (long streams included) finish for up to `drain_seconds`, and the process exits.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys

import uvicorn
from pydantic import ValidationError

from gateway.app import GatewayApp
from gateway.config import ConfigError, Policy, default_policy, load_policy
from gateway.edge.protocol import EdgeLimits, UnsupportedUvicorn, guarded_protocol
from gateway.parts import check_deployment
from gateway.redis_conn import preflight
from gateway.routing.aliases import build_routed
from gateway.settings import Settings

# Where a traceback text names one of the gateway's configuration errors (its message follows).
_CONFIG_ERROR = re.compile(r"^gateway\.[\w.]*ConfigError: ", re.M)


class ConfigErrorsWithoutTraceback(logging.Filter):
    """uvicorn logs a lifespan that failed as Starlette formatted it: a traceback. A `ConfigError` there
    (the lifespan's own start-up checks: Redis, the limiter's scripts) is a message for whoever deploys
    the gateway, not a bug: it is logged as `llmgw: cannot start:` and the message alone."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if "Traceback (most recent call last)" in text:
            starts = [m.end() for m in _CONFIG_ERROR.finditer(text)]
            if starts:  # the last one: the error that ended the start
                record.msg = f"llmgw: cannot start:\n{text[starts[-1] :].rstrip()}"
                record.args, record.exc_info = (), None
        return True


def _quiet_config_errors() -> None:
    logging.getLogger("uvicorn.error").addFilter(ConfigErrorsWithoutTraceback())


def load(settings: Settings) -> Policy:
    return load_policy(settings.config) if settings.config else default_policy()


def create_app() -> GatewayApp:
    """Factory for `uvicorn --factory gateway.edge.server:create_app` (used by multi-worker serving)."""
    settings = Settings()
    _quiet_config_errors()  # a worker's own lifespan logs
    return GatewayApp(load(settings), settings)


_EDGE = (
    "max_header_bytes",
    "max_headers",
    "header_timeout_s",
    "body_timeout_s",
    "body_min_rate",
    "body_grace_s",
    "write_stall_s",
    "max_connections",
    "send_buffer_bytes",
)


def edge_settings(settings: Settings) -> dict[str, float]:
    return {name: getattr(settings, name) for name in _EDGE}


def edge_limits(settings: Settings) -> EdgeLimits:
    return EdgeLimits(**edge_settings(settings))  # type: ignore[arg-type]


def serve(config: str | None, host: str | None, port: int | None, workers: int | None) -> int:
    overrides = {
        k: v for k, v in {"config": config, "host": host, "port": port, "workers": workers}.items() if v
    }
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:  # pydantic names the setting (e.g. redis_mode: LLMGW_REDIS_MODE)
        print(f"llmgw: cannot start: invalid LLMGW_* settings:\n{exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app: GatewayApp | None = None
    try:
        protocol = guarded_protocol(edge_limits(settings))  # first: refuses an unsupported uvicorn
        policy = load(settings)
        target = check_deployment(policy, settings)
        if target is not None:
            asyncio.run(preflight(target))
        if settings.workers > 1:
            build_routed(policy, logging.getLogger("llmgw.router"))  # each worker loads them again
        else:
            app = GatewayApp(policy, settings)
    except (ConfigError, UnsupportedUvicorn) as exc:
        print(f"llmgw: cannot start:\n{exc}", file=sys.stderr)
        return 2
    _quiet_config_errors()
    common: dict[str, object] = dict(
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http=protocol,
        timeout_keep_alive=settings.keepalive_timeout_s,
        access_log=False,
        # Nothing here reads the client address (`scope["client"]`), so uvicorn's X-Forwarded-For
        # rewriting middleware would be a coroutine layer per request for nothing; no `server` header.
        proxy_headers=False,
        server_header=False,
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
                **{f"LLMGW_{k.upper()}": str(v) for k, v in edge_settings(settings).items()},
            }
        )
        # Worker processes import the protocol by name (a class made here would not pickle to them).
        common["http"] = "gateway.edge._worker_protocol:WorkerProtocol"
        uvicorn.run("gateway.edge.server:create_app", factory=True, workers=settings.workers, **common)  # type: ignore[arg-type]
    else:
        assert app is not None
        uvicorn.run(app, **common)  # type: ignore[arg-type]
    return 0
