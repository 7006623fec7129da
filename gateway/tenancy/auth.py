"""Who is calling: the API key in `Authorization: Bearer sk-...` -> a `Principal` (tenant + key id).

Flow per request (the hot path): parse the header, one SHA-256, one dict lookup. Keys declared in the
policy are resolved from a dict built at start-up; store keys go through a small LRU cache
(sha256 -> resolved principal) whose entries are fresh for `tenancy.cache_ttl_s` (<= 5 s), so Redis
sees at most one lookup per key per replica per TTL. Unknown keys are cached too, in a separate LRU,
so a flood of bad keys neither hammers the store on repeats nor evicts the good keys' entries.

Revocation: the key store tells the authenticator of every revoked hash (`invalidate`), at once for
the replica that revoked it and through the store's broadcast for the others
(`gateway.tenancy.revocations`); the entry is replaced by a revoked one. The TTL is the fallback for a
replica that missed the broadcast.

Key store outages: an entry is kept `tenancy.stale_ttl_s` (default 10 min) past its last successful
lookup. When a lookup fails (the store raises its unavailable error, or takes longer than
`tenancy.lookup_timeout_s`), a key with such an entry keeps its last outcome: a usable key keeps
working (`llmgw_auth_stale_keys`), a revoked one stays revoked. A key without one gets 503: it cannot
be told apart from a valid key this replica never saw. While degraded (`llmgw_auth_key_store_degraded`
1, one log line on entering and one on leaving) the store is probed by at most one request per
PROBE_S; the others answer from the cache at once instead of each waiting for the timeout. The first
successful lookup ends it. This applies under `limits.on_backend_error` fail_open and fail_closed
alike: authentication from a stale entry grants nothing by itself, and fail_closed still refuses the
request at admission when the limiter's Redis is down too.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gateway.config import Tenancy
from gateway.errors import AuthenticationError, InternalError, PermissionDeniedError, UpstreamUnavailableError
from gateway.tenancy.keys import Invalidation, KeyRecord, KeyStore, mask_key, static_records
from pools.config import BANDS
from ratelimit.model import LevelLimits, LimitsConfig, Priority, Tenant

if TYPE_CHECKING:  # the observability package imports this module (feedback needs the authenticator)
    from gateway.observability.metrics import Metrics

ANONYMOUS = "anonymous"
CACHE_SIZE = 10_000
# Generated keys are 46 characters; anything far longer is not a key and is not worth hashing or caching.
MAX_KEY_LEN = 256
PROBE_S = 1.0  # while the key store is unavailable, at most one lookup per this interval tries it

_log = logging.getLogger("llmgw.auth")

_MISSING_MESSAGE = (
    "You didn't provide an API key. You need to provide your API key in an Authorization header "
    "using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
)


_UNKNOWN_WHILE_DOWN = (
    "The key store is unavailable and this API key was not looked up successfully on this gateway "
    "recently, so it cannot be checked (an unknown key cannot be told apart from a valid one not seen "
    "here). Please retry shortly."
)


# A tier's priority is its requests' band in a pool's hold queue (pools.fair: strict priority between
# bands, minimum shares for lower ones, weighted fair queuing between tenants within a band).
_RANK = BANDS


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller of a request (the request record's identity part, written by authenticate)."""

    tenant: Tenant
    key_id: str
    pools: frozenset[str] = frozenset()  # pools its requests may be served by; empty = any
    models: frozenset[str] = frozenset()  # aliases it may call; empty = any
    # Its requests' priority in a pool's hold queue (from its tier's priority; higher first): set once
    # per key here, read per request.
    rank: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rank", _RANK.get(self.tenant.priority, 0))


@dataclass(frozen=True, slots=True)
class _Resolved:
    """A usable key, with its tenant assembled once rather than per request."""

    principal: Principal
    models: frozenset[str]
    tier_known: bool


# What a lookup can end in: usable, revoked (its id kept for the message), or unknown.
_Revoked = str
_Outcome = _Resolved | _Revoked | None


@dataclass(frozen=True, slots=True)
class _Entry:
    outcome: _Outcome
    fresh_until: float  # answered from the cache without asking the store until then
    stale_until: float  # kept, for a key store outage, until then


class Authenticator:
    def __init__(
        self,
        tenancy: Tenancy,
        limits: LimitsConfig,
        store: KeyStore,
        clock: Callable[[], float] = time.monotonic,
        cache_size: int = CACHE_SIZE,
        metrics: Metrics | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._ttl = tenancy.cache_ttl_s
        self._stale_ttl = max(tenancy.stale_ttl_s, tenancy.cache_ttl_s)
        self._timeout = tenancy.lookup_timeout_s
        self._tier_pools = tenancy.tier_pools
        self._cache_size = cache_size
        self._metrics = metrics
        self._degraded_since: float | None = None  # the key store is unavailable since then
        self._probe_at = 0.0  # while degraded: the next lookup that may try the store
        self._disabled = tenancy.auth == "disabled"
        self._limits = limits
        self._org_limits: dict[str, LevelLimits | None] = {o.name: o.limits for o in tenancy.orgs}
        self._app_limits: dict[tuple[str, str], LevelLimits | None] = {
            (o.name, a.name): a.limits for o in tenancy.orgs for a in o.apps
        }
        self._end_user_limits: dict[tuple[str, str], LevelLimits | None] = {
            (o.name, a.name): a.end_user_limits for o in tenancy.orgs for a in o.apps
        }
        self._static: dict[str, _Outcome] = {r.sha256: self._resolve(r) for r in static_records(tenancy)}
        self._positive: OrderedDict[str, _Entry] = OrderedDict()
        self._negative: OrderedDict[str, _Entry] = OrderedDict()
        anon = Tenant(
            key_id=ANONYMOUS,
            app=ANONYMOUS,
            org=ANONYMOUS,
            tier=tenancy.anonymous_tier,
            priority=self._priority(tenancy.anonymous_tier),
            org_limits=self._org_limits.get(ANONYMOUS),
            app_limits=self._app_limits.get((ANONYMOUS, ANONYMOUS)),
        )
        self._anonymous = Principal(anon, ANONYMOUS)
        store.watch(self.invalidate)

    @property
    def enabled(self) -> bool:
        return not self._disabled

    def tenant_for(self, record: KeyRecord) -> Tenant:
        """The tenant of a key: tier priority, and the org-, app- and key-level overrides."""
        return Tenant(
            key_id=record.key_id,
            app=record.app,
            org=record.org,
            tier=record.tier,
            priority=self._priority(record.tier),
            key_limits=record.limits,
            app_limits=self._app_limits.get((record.org, record.app)),
            org_limits=self._org_limits.get(record.org),
            end_user_limits=self._end_user_limits.get((record.org, record.app)),
            tags=record.tags,
        )

    def _priority(self, tier: str) -> Priority:
        t = self._limits.tiers.get(tier)
        return t.priority if t is not None else "standard"

    def _resolve(self, record: KeyRecord | None) -> _Outcome:
        if record is None:
            return None
        if record.revoked_at is not None:
            return record.key_id
        pools = record.pools or self._tier_pools.get(record.tier, frozenset())
        principal = Principal(self.tenant_for(record), record.key_id, pools, record.models)
        return _Resolved(principal, record.models, record.tier in self._limits.tiers)

    async def authenticate(
        self, authorization: bytes | None, alias: str, *, api_key: bytes | None = None
    ) -> Principal:
        """The caller of a request for model `alias`.

        `authorization` is the raw `Authorization` header; `api_key` the raw Azure-style `api-key`
        header, used only when there is no `Authorization` header. Raises `AuthenticationError` (401),
        `PermissionDeniedError` (403), or `UpstreamUnavailableError` (503) when the store is down.
        """
        principal = await self.identify(authorization, api_key=api_key)
        self.permit(principal, alias)
        return principal

    @staticmethod
    def permit(principal: Principal, alias: str) -> None:
        """Raise `PermissionDeniedError` (403) unless the caller's key may use model `alias`. Apart from
        `identify` so that the relay checks the key before it reads the body, the model after."""
        if principal.models and alias not in principal.models:
            raise PermissionDeniedError(
                f"The API key '{principal.key_id}' is not allowed to use model '{alias}'.",
                param="model",
                code="model_not_allowed",
            )

    async def identify(self, authorization: bytes | None, *, api_key: bytes | None = None) -> Principal:
        """The caller, whatever models its key may use (the relay, before it reads the body; feedback:
        rating needs a key, not a model). Raises like `authenticate`, without the 403."""
        if self._disabled:
            return self._anonymous
        return (await self._resolved(authorization, api_key)).principal

    async def _resolved(self, authorization: bytes | None, api_key: bytes | None) -> _Resolved:
        key = _bearer(authorization) if authorization is not None else _plain(api_key)
        if not key:
            raise AuthenticationError(_MISSING_MESSAGE, code="missing_api_key")
        outcome = await self._lookup(key)
        if isinstance(outcome, _Resolved):
            if not outcome.tier_known:
                # A store key outlived its tier in the policy: the operator's mistake, said plainly.
                tier = outcome.principal.tenant.tier
                raise InternalError(f"The API key's tier '{tier}' is not configured in limits.tiers.")
            return outcome
        if outcome is None:
            raise AuthenticationError(f"Incorrect API key provided: {mask_key(key)}.")
        raise AuthenticationError(f"The API key {mask_key(key)} has been revoked.", code="api_key_revoked")

    async def _lookup(self, key: str) -> _Outcome:
        if len(key) > MAX_KEY_LEN:
            return None
        sha = hashlib.sha256(key.encode("utf-8")).hexdigest()
        static = self._static.get(sha)
        if static is not None:
            return static
        now = self._clock()
        entry = self._cached(sha, now)
        if entry is not None and entry.fresh_until > now:
            return entry.outcome
        if self._degraded_since is not None and now < self._probe_at:
            return self._stale(entry)  # someone probed the store less than PROBE_S ago
        self._probe_at = now + PROBE_S
        try:
            async with asyncio.timeout(self._timeout):
                record = await self._store.get(sha)
        except (UpstreamUnavailableError, TimeoutError) as exc:
            self._degrade(now, exc)
            return self._stale(entry)
        self._recover(now)
        outcome = self._resolve(record)
        self._remember(sha, outcome, now)
        return outcome

    def _cached(self, sha: str, now: float) -> _Entry | None:
        for cache in (self._positive, self._negative):
            entry = cache.get(sha)
            if entry is not None:
                if entry.stale_until > now:
                    cache.move_to_end(sha)
                    return entry
                del cache[sha]
        return None

    def _remember(self, sha: str, outcome: _Outcome, now: float) -> None:
        cache, other = (
            (self._positive, self._negative)
            if isinstance(outcome, _Resolved)
            else (self._negative, self._positive)
        )
        other.pop(sha, None)
        cache[sha] = _Entry(outcome, now + self._ttl, now + self._stale_ttl)
        cache.move_to_end(sha)
        if len(cache) > self._cache_size:
            cache.popitem(last=False)

    def _stale(self, entry: _Entry | None) -> _Outcome:
        """The outcome of a key while the store cannot be asked: its last one, else 503."""
        if entry is None or entry.outcome is None:
            raise UpstreamUnavailableError(_UNKNOWN_WHILE_DOWN, code="key_store_unavailable")
        if isinstance(entry.outcome, _Resolved) and self._metrics is not None:
            self._metrics.auth_stale_keys.inc()
        return entry.outcome

    def _degrade(self, now: float, exc: Exception) -> None:
        if self._degraded_since is not None:
            return
        self._degraded_since = now
        if self._metrics is not None:
            self._metrics.key_store_degraded.set(1)
        _log.warning(
            "key store unavailable (%s): keys looked up in the last %.0f s keep their last outcome "
            "from the stale key cache; other keys get 503 until it answers again",
            f"no answer within {self._timeout:g} s"
            if isinstance(exc, TimeoutError)
            else exc.__cause__ or exc,
            self._stale_ttl,
        )

    def _recover(self, now: float) -> None:
        if self._degraded_since is None:
            return
        _log.warning(
            "key store available again after %.1f s: key lookups are fresh again", now - self._degraded_since
        )
        self._degraded_since = None
        if self._metrics is not None:
            self._metrics.key_store_degraded.set(0)

    def invalidate(self, sha256: str, source: Invalidation) -> None:
        """A key was revoked (here: "local", or on another replica: "broadcast"): refuse it from now on.

        A cached usable entry is replaced by a revoked one (records are never un-revoked), so the key
        stays refused even if the store is unavailable next."""
        positive = self._positive.pop(sha256, None)
        negative = self._negative.pop(sha256, None) if positive is None else None
        if positive is not None and isinstance(positive.outcome, _Resolved):
            self._remember(sha256, positive.outcome.principal.key_id, self._clock())
        elif negative is not None and negative.outcome is not None:
            self._negative[sha256] = negative  # revoked already: nothing to drop
            return
        if (positive or negative) is not None and self._metrics is not None:
            self._metrics.key_invalidations.labels(source).inc()

    def clear_cache(self) -> None:
        """Forget cached lookups (tests; an operator's debugging)."""
        self._positive.clear()
        self._negative.clear()


def _bearer(header: bytes) -> str:
    """The token of `Bearer <token>` (scheme case-insensitive, RFC 7235); "" when absent or malformed."""
    scheme, _, token = header.strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return ""
    return _plain(token)


def _plain(raw: bytes | None) -> str:
    # Latin-1 is how ASGI header bytes map to text; it never fails, and a non-ASCII token simply
    # matches no key (keys are ASCII) and is reported as incorrect.
    return raw.strip().decode("latin-1") if raw is not None else ""
