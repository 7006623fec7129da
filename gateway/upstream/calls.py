"""Calling a pool: lease a replica, make one attempt, retry before the first byte.

`PoolCalls` is what the relay (and a cascade step, the json_schema retry, the explorer and the drift
canary) uses to reach a pool. It builds each attempt's `Request` from the leased replica and sends it
through the replica's transport (gateway.upstream.transport), whose failures arrive as the gateway's
`TransportError`s. Everything here happens before the client has seen a byte, so every failure can
still become a clean JSON error or a retry: an attempt that fails with a connect error, a disconnect,
an empty stream or a 429/5xx answer is retried on a replica this request has not tried, up to the
pool's attempt limit and within its retry budget; a timeout is not retried (the client already
waited one). Each attempt ends with a verdict for the replica's breaker: `fail` (errors, timeouts,
5xx), `neutral` (429, cancellation), `ok`.

This module owns the replica's lease from acquire to release: a unary call releases it before it
returns; an `OpenStream` holds it, with its connection, until the relay's one `close` call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from gateway.config_lora import Adapter
from gateway.edge.exchange import Kind
from gateway.errors import GatewayError, TransportError, UpstreamError, UpstreamTimeoutError
from gateway.observability.metrics import Metrics
from gateway.observability.tracing import NoTracing, TraceHooks
from gateway.sse import SSESplitter
from gateway.upstream.failures import (
    PATHS,
    RETRY_KINDS,
    RETRY_STATUSES,
    classify,
    from_upstream,
    no_capacity,
)
from gateway.upstream.lora_loader import AdapterLoader
from gateway.upstream.pool_client import PoolClient
from gateway.upstream.transport import Reply, Request, Transports
from pools.fair import Flow
from pools.pool import NoCapacity
from pools.replica import Replica

__all__ = ["CallSpec", "OpenStream", "PoolCalls"]

_T = TypeVar("_T")
log = logging.getLogger(__name__)


class _Failed(Exception):
    """One attempt failed before the first byte: the caller's error, whether another replica may
    be tried, and what it says about the replica (`fail` feeds its breaker)."""

    def __init__(self, error: GatewayError, retry: bool, verdict: str, reload: bool = False) -> None:
        super().__init__(error.message)
        self.error = error
        self.retry = retry
        self.verdict = verdict
        self.reload = reload  # the engine does not serve the adapter (any more): load it, try again


@dataclass(slots=True)
class CallSpec:
    """One request to a pool: what to send, and where the replica picker places it."""

    kind: Kind
    payload: bytes
    headers: dict[str, str]  # tracing adds each attempt's traceparent here
    key: int | None = None  # prefix-affinity key
    priority: int = 0  # hold-queue priority
    adapter: Adapter | None = None  # a LoRA adapter's request: placed by adapter, loaded on demand
    path: str | None = None  # another of the engine's endpoints than the kind's (e.g. `/tokenize`)
    flow: Flow | None = None  # the hold queue's tenant and input estimate (pools.fair); None: anonymous


class OpenStream:
    """A stream whose first event is in hand, holding its replica's lease and its connection: the
    caller relays `first`, then reads the rest (`read` returns b"" at the end; a failure is a
    `TransportError`), and ends it with one `close`."""

    __slots__ = ("first", "read", "_reply", "_replica", "_pool")

    def __init__(self, first: bytes, reply: Reply, replica: Replica, pool: PoolClient) -> None:
        self.first = first
        self.read: Callable[[], Awaitable[bytes]] = reply.readany
        self._reply = reply
        self._replica = replica
        self._pool = pool

    def close(self, verdict: str, complete: bool, ttft: float | None) -> None:
        """The stream is over: a `complete` one's connection is reused, any other's is dropped (which
        is how vLLM learns nobody reads and aborts the request); the lease is released with the
        breaker's `verdict` and the wait for the first token (seconds, None if it never came)."""
        if complete:
            self._reply.release()
        else:
            self._reply.close()
        self._pool.replicas.release(self._replica, verdict, ttft)


class PoolCalls:
    def __init__(self, transports: Transports, metrics: Metrics, tracing: TraceHooks | None = None) -> None:
        self._transports = transports
        self._metrics = metrics
        self._loader = AdapterLoader(transports, metrics.adapters)
        self._tracing: TraceHooks = tracing or NoTracing()

    async def unary(self, pool: PoolClient, call: CallSpec) -> bytes:
        """The body of a 200 answer (the replica is released), or the pool's error raised."""
        replica, data = await self._with_retries(pool, call, self._unary_attempt)
        pool.replicas.release(replica, "ok")
        return data

    async def open_stream(self, pool: PoolClient, call: CallSpec, splitter: SSESplitter) -> OpenStream:
        """A stream up to its first event: the caller's `splitter` (its policy: what to strip) reads
        each attempt's events (reset before another is tried); the stream holds the lease."""
        return (await self._with_retries(pool, call, self._stream_attempt, splitter))[1]

    def failed(self, pool: PoolClient, exc: TransportError, rid: str | None = None) -> GatewayError:
        """The caller's error for a failed exchange (counted by kind; its details are logged with
        `rid`)."""
        return self._failed(pool, exc, rid).error

    async def _acquire(self, pool: PoolClient, call: CallSpec) -> Replica:
        adapter = call.adapter.name if call.adapter is not None else None
        try:
            return await pool.replicas.acquire(call.key, call.priority, adapter, call.flow)
        except NoCapacity as exc:
            self._metrics.pool_rejections.labels(pool.config.name, exc.reason).inc()
            raise no_capacity(exc) from None

    async def _with_retries(
        self,
        pool: PoolClient,
        call: CallSpec,
        attempt: Callable[[PoolClient, CallSpec, Replica, SSESplitter | None], Awaitable[_T]],
        splitter: SSESplitter | None = None,
    ) -> tuple[Replica, _T]:
        replicas = pool.replicas
        replica = await self._acquire(pool, call)
        tried: list[Replica] = []
        tracing = self._tracing
        reloaded = False
        while True:
            try:
                if call.adapter is not None:
                    await self._loader.ensure(pool, replica, call.adapter)
                if tracing.enabled:
                    # One span per attempt; its traceparent goes to this replica in `call.headers`.
                    cfg = pool.config
                    with tracing.attempt(
                        call.kind, cfg.engine, cfg.model, cfg.name, replica.base, call.headers
                    ):
                        return replica, await attempt(pool, call, replica, splitter)
                return replica, await attempt(pool, call, replica, splitter)
            except _Failed as failed:
                if failed.reload and not reloaded:
                    reloaded = True  # the same replica once more: `ensure` loads the adapter again
                    continue
                replicas.release(replica, failed.verdict)
                tried.append(replica)
                nxt = self._retry_target(pool, call, tried) if failed.retry else None
                if nxt is None:
                    raise failed.error from None
                replica = nxt
            except BaseException:
                replicas.release(replica, "neutral")
                raise

    def _retry_target(self, pool: PoolClient, call: CallSpec, tried: list[Replica]) -> Replica | None:
        replicas = pool.replicas
        name = pool.config.name
        if len(tried) >= replicas.retries.attempts:
            return None
        if not replicas.may_retry():
            self._metrics.retries.labels(name, "budget_exhausted").inc()
            return None
        adapter = call.adapter.name if call.adapter is not None else None
        replica = replicas.try_pick(call.key, exclude=tried, adapter=adapter)
        self._metrics.retries.labels(name, "retried" if replica else "no_other_replica").inc()
        return replica

    def _failed(self, pool: PoolClient, exc: TransportError, rid: str | None) -> _Failed:
        err, kind = classify(exc, pool.config.name, rid)
        self._metrics.upstream_errors.labels(pool.config.name, kind).inc()
        return _Failed(err, kind in RETRY_KINDS, "fail")

    def _refused(self, pool: PoolClient, call: CallSpec, r: Reply, data: bytes, replica: Replica) -> _Failed:
        name, status = pool.config.name, r.status
        if status == 404 and call.adapter is not None and replica.adapters is not None:
            return self._adapter_lost(pool, call.adapter, replica)
        self._metrics.upstream_errors.labels(name, f"status_{status // 100}xx").inc()
        # 5xx is the replica failing (feeds its breaker); 4xx is about the request (or 429: busy).
        verdict = "fail" if status >= 500 else "neutral" if status == 429 else "ok"
        err = from_upstream(status, data, name, r.header(b"retry-after"), _rid(call))
        return _Failed(err, status in RETRY_STATUSES, verdict)

    def _adapter_lost(self, pool: PoolClient, adapter: Adapter, replica: Replica) -> _Failed:
        """The engine does not serve the adapter: it restarted, or it was unloaded behind our back.
        Forgotten there; a pool that loads at run time loads it again and tries the same replica once
        more, any other pool tries another replica."""
        assert replica.adapters is not None
        replica.adapters.lost(adapter.name)
        name = pool.config.name
        self._metrics.upstream_errors.labels(name, "adapter_missing").inc()
        log.warning("pool %r: replica %s does not serve the adapter %r", name, replica.base, adapter.name)
        err = UpstreamError(f"pool '{name}' does not serve the adapter '{adapter.name}' (HTTP 404)")
        lora = pool.config.lora
        return _Failed(err, True, "ok", reload=lora is not None and lora.runtime_loading)

    def _request(self, pool: PoolClient, call: CallSpec, replica: Replica, stream: bool) -> Request:
        t = pool.config.timeouts
        return Request(
            "POST",
            replica.base,
            call.path or PATHS[call.kind],
            call.headers,
            call.payload,
            connect_s=t.connect_s,
            total_s=t.total_s,
            stream=stream,
        )

    async def _unary_attempt(
        self, pool: PoolClient, call: CallSpec, replica: Replica, _: SSESplitter | None
    ) -> bytes:
        request = self._request(pool, call, replica, False)
        try:
            r = await self._transports.of(replica).handle(request)
            try:
                data = await r.read()
            finally:
                r.release()
        except TransportError as exc:
            raise self._failed(pool, exc, _rid(call)) from None
        if r.status != 200:
            raise self._refused(pool, call, r, data, replica)
        return data

    async def _stream_attempt(
        self, pool: PoolClient, call: CallSpec, replica: Replica, splitter: SSESplitter | None
    ) -> OpenStream:
        assert splitter is not None
        cfg = pool.config
        request = self._request(pool, call, replica, True)
        resp: Reply | None = None
        try:
            try:
                async with asyncio.timeout(cfg.timeouts.first_token_s):
                    resp = await self._transports.of(replica).handle(request)
                    if resp.status != 200:
                        raise self._refused(pool, call, resp, await resp.read(), replica)
                    first = await _first_event(resp, splitter)
            except TimeoutError:
                self._metrics.upstream_errors.labels(cfg.name, "first_token_timeout").inc()
                # Not retried: another full first-token wait would outlast what the client expects.
                late = UpstreamTimeoutError(
                    f"pool '{cfg.name}' sent no token within {cfg.timeouts.first_token_s:g}s"
                )
                raise _Failed(late, False, "fail") from None
            except TransportError as exc:
                raise self._failed(pool, exc, _rid(call)) from None
            if first is None:
                self._metrics.upstream_errors.labels(cfg.name, "empty_stream").inc()
                err = UpstreamError(f"pool '{cfg.name}' ended the stream before sending anything")
                raise _Failed(err, True, "fail")
        except BaseException:
            if resp is not None:
                resp.close()
            splitter.reset()  # another replica may be tried: its stream starts from nothing
            raise
        return OpenStream(first, resp, replica, pool)


def _rid(call: CallSpec) -> str | None:
    return call.headers.get("x-request-id")


async def _first_event(resp: Reply, splitter: SSESplitter) -> bytes | None:
    """Read until the splitter has an output event (or the stream's [DONE]) to relay, with the
    comments and keep-alives before it; None if the stream ended first. A keep-alive is not a token:
    it does not end the first-token wait."""
    first = b""
    while True:
        chunk = await resp.readany()
        if not chunk:
            return None
        out, has_output = splitter.feed(chunk)
        first += out
        if has_output or splitter.saw_done:
            return first
