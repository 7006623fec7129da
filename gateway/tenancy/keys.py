"""Tenant API keys: format, hashing, records and where they are stored.

A key is `sk-` + 43 URL-safe characters (32 random bytes = 256 bits). The gateway never stores or logs
the plaintext: it is shown once, when created, and afterwards only its SHA-256 exists - in the policy
file (static keys), in process memory, and in Redis.

Redis key scheme (all keys under the limiter's root `P:{P}`: the gateway's one prefix, then the hash
tag, so one Lua script can touch both hashes on Redis Cluster; the default prefix P is `llmgw`):

    llmgw:{llmgw}:keys     HASH  sha256 (hex) -> KeyRecord JSON (metadata and the hash; never the key)
    llmgw:{llmgw}:keyids   HASH  key id       -> sha256 (hex), for revocation and duplicate-id checks
    llmgw:{llmgw}:keys:revoked   pub/sub channel: "<publisher id> <sha256>" per revocation

Before 0.3 the names were `{P}:keys` and `{P}:keyids` (no leading prefix). `start` merges what is left
under them into the new hashes (same slot), so an upgrade keeps every key; see `merge_legacy`.

Revoking keeps the record with `revoked_at` set, so a revoked key stays listed and its id is never
reused. The store tells its watchers (the process's authenticator) at once (`source` "local"), and
publishes the hash on the channel; every other replica's store subscribes to it (a background task
from `start` to `close` that reconnects with backoff after Redis errors) and tells its watchers
(`source` "broadcast"), so a revocation reaches every replica within a round trip. A replica that
misses the message (subscriber disconnected) still refuses the key when its cache entry expires
(`tenancy.cache_ttl_s`): the TTL stays the fallback.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any, Literal, Protocol

import orjson
import redis.asyncio
from redis.exceptions import RedisError

from gateway.config import Tenancy
from gateway.errors import UpstreamUnavailableError
from gateway.tenancy.revocations import RevocationChannel
from ratelimit.keys import legacy_root, root
from ratelimit.model import LevelLimits

_log = logging.getLogger("llmgw.keys")

KEY_PREFIX = "sk-"
KEY_BYTES = 32  # 256 bits of entropy
Source = Literal["config", "store"]
# Who revoked a key, as the store tells its watchers (a metric label of llmgw_auth_key_invalidations).
Invalidation = Literal["local", "broadcast"]
Watcher = Callable[[str, Invalidation], None]  # (sha256, source)


def generate_key() -> str:
    """A new tenant key: `sk-` + 43 URL-safe characters."""
    return KEY_PREFIX + secrets.token_urlsafe(KEY_BYTES)


def hash_key(key: str) -> str:
    """Hex SHA-256 of the full key.

    A fast unsalted hash is the right tool here, unlike for passwords: generated keys carry 256 bits of
    entropy, so a leaked hash cannot be brute-forced, and the lookup must be one cheap hash on the
    request hot path (a salted slow KDF would need the salt before the lookup and cost milliseconds).
    """
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def mask_key(key: str) -> str:
    """What error messages show of a key the caller sent: never enough to reconstruct it."""
    if len(key) < 16:
        return "*" * len(key) if len(key) <= 8 else key[:3] + "*" * (len(key) - 3)
    return f"{key[:6]}...{key[-4:]}"


def new_key_id() -> str:
    return "key_" + secrets.token_hex(8)


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """Everything the gateway knows about a key, except the key itself."""

    key_id: str
    sha256: str
    org: str
    app: str
    tier: str
    models: frozenset[str]  # aliases the key may call; empty = all
    limits: LevelLimits | None  # overrides of the tier's key-level limits
    created_at: float  # unix seconds
    revoked_at: float | None
    source: Source
    pools: frozenset[str] = frozenset()  # pools its requests may be served by; empty = the tier's, else all
    tags: frozenset[str] | None = None  # tags its requests may carry; None = any declared tag

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.key_id,
            "sha256": self.sha256,
            "org": self.org,
            "app": self.app,
            "tier": self.tier,
            "models": sorted(self.models),
            "pools": sorted(self.pools),
            "tags": sorted(self.tags) if self.tags is not None else None,
            # exclude_unset: an override must stay partial, or merging it would reset the tier's limits.
            "limits": self.limits.model_dump(mode="json", exclude_unset=True) if self.limits else None,
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
            "source": self.source,
        }

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KeyRecord:
        limits = data.get("limits")
        source = data.get("source", "store")
        if source not in ("config", "store"):
            raise ValueError(f"bad key record source {source!r}")
        return cls(
            key_id=str(data["id"]),
            sha256=str(data["sha256"]),
            org=str(data["org"]),
            app=str(data["app"]),
            tier=str(data["tier"]),
            models=frozenset(str(m) for m in data.get("models", ())),
            pools=frozenset(str(p) for p in data.get("pools", ())),  # absent in records before issue 24
            tags=frozenset(str(t) for t in data["tags"]) if data.get("tags") is not None else None,
            limits=LevelLimits.model_validate(limits) if limits is not None else None,
            created_at=float(data["created_at"]),
            revoked_at=float(data["revoked_at"]) if data.get("revoked_at") is not None else None,
            source=source,
        )

    @classmethod
    def from_json(cls, raw: bytes | str) -> KeyRecord:
        data = orjson.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("a key record must be a JSON object")
        return cls.from_dict(data)


def static_records(tenancy: Tenancy) -> tuple[KeyRecord, ...]:
    """The keys declared in the policy (`tenancy.keys`); they live only in the policy file."""
    return tuple(
        KeyRecord(
            key_id=k.id,
            sha256=k.sha256,
            org=k.org,
            app=k.app,
            tier=k.tier,
            models=k.models,
            pools=k.pools,
            tags=k.tags,
            limits=k.limits,
            created_at=0.0,
            revoked_at=None,
            source="config",
        )
        for k in tenancy.keys
    )


class DuplicateKeyError(Exception):
    """`create` was given a key id (or hash) that already exists."""


class KeyStore(Protocol):
    """Keys created at run time (admin API, `llmgw keys`). Implementations hold hashes only.

    Store failures (e.g. Redis unreachable) raise `gateway.errors.UpstreamUnavailableError` (503).
    """

    def watch(self, watcher: Watcher) -> None:
        """Call `watcher(sha256, source)` for every key revoked from now on (in this process or another)."""
        ...

    async def start(self) -> None:
        """Begin hearing other processes' revocations (the app's start-up)."""
        ...

    async def get(self, sha256: str) -> KeyRecord | None: ...

    async def create(self, record: KeyRecord) -> None:
        """Raise `DuplicateKeyError` when the id or the hash exists already (revoked ones included)."""
        ...

    async def list(self) -> list[KeyRecord]: ...

    async def revoke(self, key_id: str) -> bool:
        """True when the id exists (revoking twice keeps the first `revoked_at`); False when unknown."""
        ...

    async def close(self) -> None: ...


class MemoryKeyStore:
    """One process only (the `make run` default): keys vanish on restart and other workers never see them."""

    def __init__(self, records: Iterable[KeyRecord] = (), clock: Callable[[], float] = time.time) -> None:
        self._by_hash: dict[str, KeyRecord] = {}
        self._ids: dict[str, str] = {}
        self._clock = clock
        self._watchers: list[Watcher] = []
        for r in records:
            self._put(r)

    def watch(self, watcher: Watcher) -> None:
        self._watchers.append(watcher)

    async def start(self) -> None:
        return None  # one process: nobody else revokes

    def _put(self, record: KeyRecord) -> None:
        if record.key_id in self._ids:
            raise DuplicateKeyError(f"key id '{record.key_id}' exists already")
        if record.sha256 in self._by_hash:
            raise DuplicateKeyError("a key with this hash exists already")
        self._by_hash[record.sha256] = record
        self._ids[record.key_id] = record.sha256

    async def get(self, sha256: str) -> KeyRecord | None:
        return self._by_hash.get(sha256)

    async def create(self, record: KeyRecord) -> None:
        self._put(record)

    async def list(self) -> list[KeyRecord]:
        return list(self._by_hash.values())

    async def revoke(self, key_id: str) -> bool:
        sha = self._ids.get(key_id)
        if sha is None:
            return False
        record = self._by_hash[sha]
        if record.revoked_at is None:
            self._by_hash[sha] = replace(record, revoked_at=self._clock())
        for watcher in self._watchers:
            watcher(sha, "local")
        return True

    async def close(self) -> None:
        return None


def _lua(name: str) -> str:
    return resources.files("gateway.tenancy").joinpath("lua", f"{name}.lua").read_text()


def _unavailable() -> UpstreamUnavailableError:
    # Raised `from` the Redis error, so the server log keeps the cause; the caller only learns that
    # keys cannot be checked right now (503, retryable).
    return UpstreamUnavailableError("key store unavailable", code="key_store_unavailable")


class RedisKeyStore:
    """Keys shared by every replica. Only hashes and metadata are written (see the module docstring).

    The client is usually shared with the limiter, so `close` leaves it open unless `owns_client`.
    """

    def __init__(
        self, client: redis.asyncio.Redis, prefix: str = "llmgw", *, owns_client: bool = False
    ) -> None:
        self._client = client
        self._keys = f"{root(prefix)}:keys"
        self._ids = f"{root(prefix)}:keyids"
        self._legacy = (f"{legacy_root(prefix)}:keys", f"{legacy_root(prefix)}:keyids")
        self._owns_client = owns_client
        self._create_script = client.register_script(_lua("create_key"))
        self._merge_script = client.register_script(_lua("merge_legacy_v1"))
        self._watchers: list[Watcher] = []
        self.revocations = RevocationChannel(client, f"{root(prefix)}:keys:revoked", self._heard)

    def watch(self, watcher: Watcher) -> None:
        self._watchers.append(watcher)

    async def start(self) -> None:
        try:
            merged = await self.merge_legacy()
        except RedisError as exc:  # keys created before 0.3 fail until a start that reaches Redis
            _log.warning("key store: the pre-0.3 hashes could not be merged (%s)", exc)
        else:
            if merged:
                _log.info("key store: merged %d entries from the pre-0.3 hashes", merged)
        self.revocations.start()

    async def merge_legacy(self, batch: int = 200) -> int:
        """Merge the pre-0.3 hashes into the current ones, field by field, deleting each old field.

        Idempotent and safe on every replica at once (each batch is one script; see
        `lua/merge_legacy_v1.lua`), and bounded work per call: HSCAN pages, never one HGETALL.
        Returns how many fields were written."""
        keys = [self._legacy[0], self._keys, self._legacy[1], self._ids]
        written = 0
        for kind, name in (("r", self._legacy[0]), ("i", self._legacy[1])):
            page: list[bytes] = []
            async for field, _ in self._client.hscan_iter(name, count=batch):
                page.append(field)
                if len(page) >= batch:
                    written += int(await self._merge_script(keys=keys, args=[kind, *page]))
                    page = []
            if page:
                written += int(await self._merge_script(keys=keys, args=[kind, *page]))
        return written

    def _heard(self, sha: str) -> None:
        for watcher in self._watchers:
            watcher(sha, "broadcast")

    @property
    def redis_keys(self) -> tuple[str, str]:
        """The two Redis keys this store uses (records, ids)."""
        return self._keys, self._ids

    async def get(self, sha256: str) -> KeyRecord | None:
        try:
            raw = await self._client.hget(self._keys, sha256)
        except RedisError as exc:
            raise _unavailable() from exc
        return KeyRecord.from_json(raw) if raw is not None else None

    async def create(self, record: KeyRecord) -> None:
        if record.source != "store":
            raise ValueError("only store keys are written to Redis; config keys live in the policy")
        try:
            result = await self._create_script(
                keys=[self._keys, self._ids], args=[record.key_id, record.sha256, record.to_json()]
            )
        except RedisError as exc:
            raise _unavailable() from exc
        if int(result) == 1:
            raise DuplicateKeyError(f"key id '{record.key_id}' exists already")
        if int(result) == 2:
            raise DuplicateKeyError("a key with this hash exists already")

    async def list(self) -> list[KeyRecord]:
        out: list[KeyRecord] = []
        try:
            # HSCAN rather than HGETALL: a large key set must not block Redis for the limiter.
            async for _, raw in self._client.hscan_iter(self._keys, count=500):
                out.append(KeyRecord.from_json(raw))
        except RedisError as exc:
            raise _unavailable() from exc
        return out

    async def revoke(self, key_id: str) -> bool:
        try:
            sha = await self._client.hget(self._ids, key_id)
            if sha is None:
                return False
            raw = await self._client.hget(self._keys, sha)
            if raw is None:  # an id without a record: nothing can authenticate with it anyway
                return True
            record = KeyRecord.from_json(raw)
            if record.revoked_at is None:
                # Read-modify-write without a transaction is fine: records change only by revocation,
                # and two concurrent revocations write equivalent records.
                revoked = replace(record, revoked_at=time.time())
                await self._client.hset(self._keys, sha, revoked.to_json())
        except RedisError as exc:
            raise _unavailable() from exc
        sha_hex = sha.decode() if isinstance(sha, bytes) else str(sha)
        for watcher in self._watchers:
            watcher(sha_hex, "local")
        await self.revocations.publish(sha_hex)
        return True

    async def close(self) -> None:
        await self.revocations.close()
        if self._owns_client:
            await self._client.aclose()
