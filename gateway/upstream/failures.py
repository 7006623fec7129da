"""How an upstream failure reaches the caller: which error (status, OpenAI type), which metric kind,
and whether another replica may be tried."""

from __future__ import annotations

import asyncio

import aiohttp

from gateway.edge.exchange import Kind
from gateway.errors import GatewayError, UpstreamError, UpstreamTimeoutError, UpstreamUnavailableError
from gateway.upstream._h1_response import BadResponse, ConnectFailed, Disconnected
from pools.pool import NoCapacity

PATHS = {
    Kind.CHAT: "/v1/chat/completions",
    Kind.COMPLETIONS: "/v1/completions",
    Kind.EMBEDDINGS: "/v1/embeddings",
}
# A replica that answers these before the first byte may be retried on another replica.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
# Failures after which the request may go to another replica.
RETRY_KINDS = frozenset({"connect", "disconnect", "client_error"})


def no_capacity(exc: NoCapacity) -> GatewayError:
    """A pool that could not place a request in time: a retryable 503, never a 404."""
    return UpstreamUnavailableError(str(exc), headers={"retry-after": str(exc.retry_after)})


def classify(exc: BaseException, pool: str) -> tuple[GatewayError, str]:
    """(error for the caller, metric kind) for a failure of the upstream client."""
    if isinstance(exc, ConnectFailed):
        return UpstreamUnavailableError(f"pool '{pool}' is unreachable: {exc}"), "connect"
    if isinstance(exc, Disconnected):
        return UpstreamError(
            f"pool '{pool}' closed the connection before the answer was complete"
        ), "disconnect"
    if isinstance(exc, BadResponse):
        return UpstreamError(f"pool '{pool}' sent a malformed HTTP response"), "client_error"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return UpstreamUnavailableError(
            f"pool '{pool}' is unreachable: {exc.os_error.strerror or exc}"
        ), "connect"
    if isinstance(exc, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        return UpstreamTimeoutError(f"pool '{pool}' did not answer in time"), "timeout"
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return UpstreamError(
            f"pool '{pool}' closed the connection before the answer was complete"
        ), "disconnect"
    if isinstance(exc, aiohttp.ClientError | OSError):
        return UpstreamError(f"pool '{pool}' request failed: {type(exc).__name__}"), "client_error"
    raise exc
