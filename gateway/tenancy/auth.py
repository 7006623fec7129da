"""Who is calling: the API key in `Authorization: Bearer sk-...` -> a `Principal` (tenant + key id).

Flow per request (the hot path): parse the header, one SHA-256, one dict lookup. Keys declared in the
policy are resolved from a dict built at start-up; store keys go through a small LRU cache
(sha256 -> resolved principal) whose entries live `tenancy.cache_ttl_s` (<= 5 s). That TTL is the
revocation delay on every replica: no invalidation messages are needed, and Redis sees at most one
lookup per key per replica per TTL. Unknown keys are cached too, in a separate LRU, so a flood of
bad keys neither hammers the store on repeats nor evicts the good keys' entries.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from gateway.config import Tenancy
from gateway.errors import AuthenticationError, InternalError, PermissionDeniedError
from gateway.tenancy.keys import KeyRecord, KeyStore, mask_key, static_records
from ratelimit.model import LevelLimits, LimitsConfig, Priority, Tenant

ANONYMOUS = "anonymous"
CACHE_SIZE = 10_000
# Generated keys are 46 characters; anything far longer is not a key and is not worth hashing or caching.
MAX_KEY_LEN = 256

_MISSING_MESSAGE = (
    "You didn't provide an API key. You need to provide your API key in an Authorization header "
    "using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
)


@dataclass(frozen=True, slots=True)
class Principal:
    tenant: Tenant
    key_id: str


@dataclass(frozen=True, slots=True)
class _Resolved:
    """A usable key, with its tenant assembled once rather than per request."""

    principal: Principal
    models: frozenset[str]
    tier_known: bool


# What a lookup can end in: usable, revoked (its id kept for the message), or unknown.
_Revoked = str
_Outcome = _Resolved | _Revoked | None


class Authenticator:
    def __init__(
        self,
        tenancy: Tenancy,
        limits: LimitsConfig,
        store: KeyStore,
        clock: Callable[[], float] = time.monotonic,
        cache_size: int = CACHE_SIZE,
    ) -> None:
        self._store = store
        self._clock = clock
        self._ttl = tenancy.cache_ttl_s
        self._cache_size = cache_size
        self._disabled = tenancy.auth == "disabled"
        self._limits = limits
        self._org_limits: dict[str, LevelLimits | None] = {o.name: o.limits for o in tenancy.orgs}
        self._app_limits: dict[tuple[str, str], LevelLimits | None] = {
            (o.name, a.name): a.limits for o in tenancy.orgs for a in o.apps
        }
        self._static: dict[str, _Outcome] = {r.sha256: self._resolve(r) for r in static_records(tenancy)}
        self._positive: OrderedDict[str, tuple[_Outcome, float]] = OrderedDict()
        self._negative: OrderedDict[str, tuple[_Outcome, float]] = OrderedDict()
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
        )

    def _priority(self, tier: str) -> Priority:
        t = self._limits.tiers.get(tier)
        return t.priority if t is not None else "standard"

    def _resolve(self, record: KeyRecord | None) -> _Outcome:
        if record is None:
            return None
        if record.revoked_at is not None:
            return record.key_id
        principal = Principal(self.tenant_for(record), record.key_id)
        return _Resolved(principal, record.models, record.tier in self._limits.tiers)

    async def authenticate(
        self, authorization: bytes | None, alias: str, *, api_key: bytes | None = None
    ) -> Principal:
        """The caller of a request for model `alias`.

        `authorization` is the raw `Authorization` header; `api_key` the raw Azure-style `api-key`
        header, used only when there is no `Authorization` header. Raises `AuthenticationError` (401),
        `PermissionDeniedError` (403), or `UpstreamUnavailableError` (503) when the store is down.
        """
        if self._disabled:
            return self._anonymous
        outcome = await self._resolved(authorization, api_key)
        if outcome.models and alias not in outcome.models:
            raise PermissionDeniedError(
                f"The API key '{outcome.principal.key_id}' is not allowed to use model '{alias}'.",
                param="model",
                code="model_not_allowed",
            )
        return outcome.principal

    async def identify(self, authorization: bytes | None, *, api_key: bytes | None = None) -> Principal:
        """The caller, whatever models its key may use (feedback: rating needs a key, not a model)."""
        if self._disabled:
            return self._anonymous
        return (await self._resolved(authorization, api_key)).principal

    async def models_for(
        self, authorization: bytes | None, aliases: list[str], *, api_key: bytes | None = None
    ) -> list[str]:
        """The aliases the caller may use (for `GET /v1/models`); 401 like any request without a valid key."""
        if self._disabled:
            return aliases
        outcome = await self._resolved(authorization, api_key)
        return [a for a in aliases if not outcome.models or a in outcome.models]

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
        for cache in (self._positive, self._negative):
            hit = cache.get(sha)
            if hit is not None:
                if hit[1] > now:
                    cache.move_to_end(sha)
                    return hit[0]
                del cache[sha]
        outcome = self._resolve(await self._store.get(sha))
        cache = self._positive if isinstance(outcome, _Resolved) else self._negative
        cache[sha] = (outcome, now + self._ttl)
        if len(cache) > self._cache_size:
            cache.popitem(last=False)
        return outcome

    def clear_cache(self) -> None:
        """Forget cached lookups, e.g. to make a revocation effective on this replica at once."""
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
