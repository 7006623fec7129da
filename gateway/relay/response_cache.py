"""The response cache as the relay uses it: decide, look up, store (docs/design/015-cache.md).

Per request: `plan` decides from the alias's `cache` block, the `x-llmgw-cache` header and the body
whether the cache is used, and derives the exact key (and the semantic partition); `get` tries the
exact store, then the semantic index; after a successful answer `put` writes it in the background.
A cache never fails a request: a backend error is a miss (counted, logged at most once a minute),
and writes happen after the client has its answer.

Tenant safety: the scope (org, app or key of the authenticated tenant) is the first part of every
exact key and of every semantic partition, so a lookup can only ever see its own tenant's entries.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from cache.commands import Embedder
from cache.entry import assemble, split_question, with_question
from cache.exact import ExactStore, MemoryExactStore, RedisExactStore
from cache.key import exact_key, prefix_for, semantic_scope
from cache.policy import HEADER_VALUES, uses_cache
from cache.semantic import MemoryVectorIndex, RedisVectorIndex, VectorIndex
from cache.verify import same_question
from gateway.config import ConfigError, ModelCache, Policy
from gateway.edge.exchange import Kind
from gateway.errors import InvalidRequestError
from gateway.observability.metrics import Metrics
from gateway.redis_conn import commands_client, target_of
from gateway.routing.aliases import RoutedAlias
from gateway.settings import Settings
from gateway.sse import payloads
from ratelimit.keys import scope_id
from ratelimit.model import Tenant
from ratelimit.resp import RedisPyClient
from router.artifact_error import RouterArtifactError
from router.text import request_text

HIT = b"hit"
SEMANTIC_HIT = b"semantic-hit"
MISS = b"miss"
BYPASS = b"bypass"
# The label of requests for a model no alias names: client-chosen strings never become label values.
UNKNOWN_ALIAS = "(unknown)"
_MAX_PENDING_WRITES = 1024  # a backend slower than traffic loses writes, never memory


@dataclass(frozen=True, slots=True)
class _Alias:
    cfg: ModelCache
    route: str  # the pools and served models behind the alias: part of every key
    kinds: frozenset[Kind]
    pools: frozenset[str]  # the pools behind it (a routed alias has several)


@dataclass(slots=True)
class Lookup:
    """One request's cache identity, from `plan` to `put`."""

    alias: str
    key: bytes
    ttl_s: float
    chat: bool
    semantic: bytes | None  # the semantic partition, None when the semantic cache does not apply
    text: str
    min_similarity: float
    semantic_ttl_s: float
    vector: Any = None  # the question's embedding, kept from the lookup for the write


@dataclass(frozen=True, slots=True)
class CacheBackends:
    """Where answers live, built together by `build_cache`: the exact store and, for the semantic
    cache, the vector index and the question encoder; `closers` release their connections/threads."""

    store: ExactStore
    index: VectorIndex | None = None
    embedder: Embedder | None = None
    closers: tuple[Callable[[], Awaitable[None] | None], ...] = ()


class ResponseCache:
    def __init__(
        self,
        policy: Policy,
        backends: CacheBackends,
        metrics: Metrics,
        *,
        log: logging.Logger | None = None,
        room: Callable[[], bool] | None = None,
    ) -> None:
        # Whether the shared Redis has room for more answers (None: the memory backend, bounded itself).
        self._room = room
        self._closers = backends.closers
        self._store = backends.store
        self._metrics = metrics
        self._index = backends.index
        self._embedder = backends.embedder
        self._semantic_ready = False
        self._max_entry = policy.cache.max_entry_bytes
        self._key_prefix = prefix_for(policy.limits.key_prefix)
        self._log = log or logging.getLogger("llmgw.cache")
        self._last_warning = 0.0
        self._pending: set[asyncio.Future[None]] = set()
        pools = {p.name: p for p in policy.pools}
        self._aliases: dict[str, _Alias] = {}
        # Label children per configured alias, created (at 0) up front: a dashboard shows zeros, and a
        # model name the client made up never becomes a series (it is counted as UNKNOWN_ALIAS).
        self._counters = {
            (name, status): metrics.cache_requests.labels(name, status.decode())
            for name in (*(m.name for m in policy.models), UNKNOWN_ALIAS)
            for status in (HIT, SEMANTIC_HIT, MISS, BYPASS)
        }
        for m in policy.models:
            if m.cache is None:
                continue
            names = m.route.pools
            route = ",".join(f"{n}={pools[n].model}" for n in names)
            if m.route.adapter is not None:  # an adapter's answers are not the base model's
                route += f"+{m.route.adapter}"
            if m.route.policy is not None:
                kinds = frozenset({Kind.CHAT, Kind.COMPLETIONS})  # what routed aliases serve
            else:
                kinds = frozenset(Kind(k) for k in pools[names[0]].serves) - {Kind.EMBEDDINGS}
            self._aliases[m.name] = _Alias(m.cache, route, kinds, frozenset(names))
        self.wants_semantic = any(a.cfg.semantic.enabled for a in self._aliases.values())

    async def start(self) -> None:
        """Create the vector index when an alias wants the semantic cache; say clearly when it cannot."""
        if not self.wants_semantic:
            return
        reason = (
            "no vector index or encoder configured" if self._index is None or self._embedder is None else None
        )
        if reason is None and self._index is not None:
            try:
                reason = await self._index.ensure()
            except Exception as exc:  # noqa: BLE001 - an unreachable backend disables, never stops, start-up
                reason = f"the vector index could not be prepared ({exc})"
        self._semantic_ready = reason is None
        self._metrics.cache_semantic_available.set(1 if self._semantic_ready else 0)
        if reason is not None:
            self._log.warning(
                "semantic cache disabled: %s; exact caching and everything else keep working", reason
            )

    def plan(
        self,
        endpoint: Kind,
        alias: str,
        body: dict[str, Any],
        header: bytes | None,
        tenant: Tenant,
        allowed: frozenset[str] = frozenset(),
    ) -> Lookup | None:
        """The request's cache identity, or None when it bypasses the cache. `endpoint`: the one the
        client called (`body` is what the pool is asked: a dialect's answers are stored as chat, keyed
        by the dialect's endpoint); `allowed`: the pools the caller's key may use (empty: any)."""
        kind = endpoint.asked
        parsed = HEADER_VALUES.get(header.strip().lower()) if header is not None else None
        if header is not None and parsed is None:
            raise InvalidRequestError("x-llmgw-cache must be 'on' or 'off'")
        entry = self._aliases.get(alias)
        if entry is None or kind not in entry.kinds:
            return None
        cfg = entry.cfg
        if not uses_cache(cfg.default, parsed, body):
            return None
        scope = _scope(cfg, tenant)
        if allowed and not entry.pools <= allowed:
            # A key cut off a routed alias's stronger pools must not get an answer one of them gave
            # (an unrestricted key of the same scope stored it): keys with the same cut share entries.
            scope += "|pools:" + ",".join(sorted(entry.pools & allowed))
        try:
            key = exact_key(scope, entry.route, endpoint.value, body, self._key_prefix)
        except TypeError:
            return None
        chat = kind is Kind.CHAT
        partition = (
            semantic_scope(scope, entry.route, body)
            if chat and cfg.semantic.enabled and self._semantic_ready
            else None
        )
        text = ""
        if partition is not None:
            messages = body.get("messages")
            text = request_text(messages) if isinstance(messages, list) else ""
            if not text.strip():
                partition = None
        return Lookup(
            alias, key, cfg.ttl_s, chat, partition, text, cfg.semantic.min_similarity, cfg.semantic.ttl_s
        )

    async def get(self, look: Lookup) -> tuple[bytes, bytes] | None:
        """(entry, status) on a hit, else None; records the lookup in the metrics."""
        t = perf_counter()
        try:
            found = await self._store.get(look.key)
        except Exception as exc:  # noqa: BLE001 - a cache failure is a miss, never a failed request
            found = None
            self._failed("get", exc)
        self._metrics.cache_lookup_seconds.labels("exact").observe(perf_counter() - t)
        if found is not None:
            return found, HIT
        if look.semantic is None or self._index is None or self._embedder is None:
            return None
        t = perf_counter()
        try:
            look.vector = await self._embedder.embed(look.text)
            hit = (
                await self._index.search(look.semantic, look.vector, look.min_similarity)
                if look.vector is not None
                else None
            )
        except Exception as exc:  # noqa: BLE001 - as above
            hit = None
            self._failed("semantic_get", exc)
        self._metrics.cache_lookup_seconds.labels("semantic").observe(perf_counter() - t)
        if hit is None:
            return None
        stored = split_question(hit[0])
        if stored is None:
            return None
        # The vector is near; is it the same question? Embeddings are blind to word order, negation
        # and numbers ("fraction to percentage" vs "percentage to fraction"): a second, exact check.
        if not same_question(look.text, stored[0]):
            self._metrics.cache_semantic_rejected.labels(look.alias).inc()
            return None
        return stored[1], SEMANTIC_HIT

    def counted(self, alias: str, status: bytes, usage: tuple[int, int] | None) -> None:
        counter = self._counters.get((alias, status)) or self._counters[(UNKNOWN_ALIAS, status)]
        counter.inc()
        if usage is not None:  # a hit: the alias is configured (an entry was stored under it)
            self._metrics.cache_saved_tokens.labels(alias, "input").inc(usage[0])
            self._metrics.cache_saved_tokens.labels(alias, "output").inc(usage[1])

    def remember(self, look: Lookup, stream: bool, data: bytes, usage_in: int, usage_out: int) -> None:
        """Store a successful answer: the pool's bytes, or the answer assembled from the stream."""
        if stream or data.startswith(b"data:"):
            usage = {
                "prompt_tokens": usage_in,
                "completion_tokens": usage_out,
                "total_tokens": usage_in + usage_out,
            }
            entry = assemble(look.chat, payloads(data), usage)  # the cache is handed split events
            if entry is None:
                return
        else:
            entry = data
        self.put(look, entry)

    def put(self, look: Lookup, entry: bytes) -> None:
        """Store an answer in the background (the client already has it)."""
        if len(entry) > self._max_entry:
            return
        if self._room is not None and not self._room():  # Redis short of memory: the limiter's headroom
            self._metrics.cache_errors.labels("no_room").inc()
            return
        if len(self._pending) >= _MAX_PENDING_WRITES:
            self._metrics.cache_errors.labels("write_backlog").inc()
            return
        fut = asyncio.ensure_future(self._write(look, entry))
        self._pending.add(fut)
        fut.add_done_callback(self._pending.discard)

    async def _write(self, look: Lookup, entry: bytes) -> None:
        try:
            await self._store.set(look.key, entry, look.ttl_s)
            self._metrics.cache_stores.labels(look.alias, "exact").inc()
        except Exception as exc:  # noqa: BLE001 - background: count and log, nothing to answer
            self._failed("set", exc)
        if look.semantic is None or self._index is None or self._embedder is None:
            return
        try:
            vector = look.vector if look.vector is not None else await self._embedder.embed(look.text)
            if vector is not None:
                value = with_question(look.text, entry)
                await self._index.add(look.semantic, vector, value, int(max(1, look.semantic_ttl_s)))
                self._metrics.cache_stores.labels(look.alias, "semantic").inc()
        except Exception as exc:  # noqa: BLE001 - as above
            self._failed("semantic_set", exc)

    def _failed(self, op: str, exc: Exception) -> None:
        self._metrics.cache_errors.labels(op).inc()
        now = time.monotonic()
        if now - self._last_warning > 60:
            self._last_warning = now
            self._log.warning("cache %s failed (%s: %s); serving uncached", op, type(exc).__name__, exc)

    async def close(self) -> None:
        """Let in-flight writes finish (briefly) before the backend connection closes."""
        if self._pending:
            await asyncio.wait(list(self._pending), timeout=2.0)
        for close in self._closers:
            result = close()
            if result is not None:
                await result


def build_cache(
    policy: Policy,
    settings: Settings,
    metrics: Metrics,
    routed: Mapping[str, RoutedAlias],
    room: Callable[[], bool] | None = None,
) -> ResponseCache | None:
    """The cache of the policy's aliases, or None when no alias has a `cache` block."""
    if not any(m.cache is not None for m in policy.models):
        return None
    cfg = policy.cache
    log = logging.getLogger("llmgw.cache")
    closers: list[Callable[[], Awaitable[None] | None]] = []
    client: RedisPyClient | None = None
    if cfg.backend == "redis":
        target = target_of(settings)
        if target is None:
            raise ConfigError("cache.backend is 'redis' but LLMGW_REDIS_URL is not set")
        # Any mode: every command of the cache names one key (or none: FT.*), so no hash tags are needed.
        client = commands_client(target)
        closers.append(client.aclose)
    store: ExactStore = (
        RedisExactStore(client) if client is not None else MemoryExactStore(cfg.memory_max_bytes)
    )
    index: VectorIndex | None = None
    embedder: Embedder | None = None
    if any(m.cache is not None and m.cache.semantic.enabled for m in policy.models):
        index = (
            RedisVectorIndex(
                client,
                index=f"{policy.limits.key_prefix}-sem-v1",
                prefix=f"{policy.limits.key_prefix}:sem:v1:".encode(),
            )
            if client is not None
            else MemoryVectorIndex(cfg.semantic_memory_entries)
        )
        # Imported here: numpy, onnxruntime and the encoder load only when the semantic cache is on.
        from router.embedding import QuestionEmbedder
        from router.encoder import FULL_LAYERS, Encoder

        shared = next((r.difficulty for r in routed.values() if r.difficulty is not None), None)
        try:
            # On the router's one inference thread when there is a router (one core for both), with its
            # encoder only at full depth: a truncated variant's cosine is not what the cache's
            # threshold was fitted on (docs/design/015).
            if shared is not None and shared.encoder.identity.layers == FULL_LAYERS:
                question = QuestionEmbedder(shared.encoder, cfg.semantic_max_tokens, shared.executor)
            else:
                executor = shared.executor if shared is not None else None
                question = QuestionEmbedder(Encoder.load(), cfg.semantic_max_tokens, executor)
            question.encoder.remember(4096)
            closers.append(question.close)
            embedder = question
        except (OSError, RouterArtifactError) as exc:
            log.warning("semantic cache: the encoder cannot be loaded (%s)", exc)
    backends = CacheBackends(store, index=index, embedder=embedder, closers=tuple(closers))
    return ResponseCache(policy, backends, metrics, log=log, room=room if client is not None else None)


def _scope(cfg: ModelCache, tenant: Tenant) -> str:
    # Each part escaped on its own (ratelimit.keys.scope_id): org `acme` / app `x/y` and org `acme/x` /
    # app `y` must not share answers.
    if cfg.scope == "key":
        return "key:" + scope_id(tenant.key_id)
    if cfg.scope == "app":
        return "app:" + scope_id(tenant.org, tenant.app)
    return "org:" + scope_id(tenant.org)
