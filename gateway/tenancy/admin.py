"""The admin HTTP API for tenant keys (what `llmgw keys` calls).

    POST   /admin/keys            create; 201 with the plaintext key (the only time it is ever shown)
    GET    /admin/keys            list (store and config keys; a hash prefix, never a key or full hash)
    DELETE /admin/keys/{key_id}   revoke; 404 unknown id, 409 for keys declared in the policy file

Every call needs `Authorization: Bearer <admin key>`. The admin key is a separate secret from the
process settings, compared in constant time; tenant keys are never looked at here, so a tenant key can
never act as an admin key. Without an admin key the API is disabled (403 on every call). Errors are
`GatewayError`s, which the app renders in the OpenAI error shape.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

import orjson
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.config import Name
from gateway.edge.small_body import small_body
from gateway.errors import (
    AuthenticationError,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
)
from gateway.tenancy.keys import DuplicateKeyError, KeyRecord, KeyStore, generate_key, hash_key, new_key_id
from ratelimit.model import TAG_PATTERN, LevelLimits

M = TypeVar("M", bound=BaseModel)

HASH_PREFIX_LEN = 12
KeyId = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]


class CreateKey(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    org: Name
    app: Name
    tier: str = "standard"
    models: list[str] = Field([], description="aliases the key may call; empty = all")
    pools: list[str] = Field(
        [],
        description="pools the key's requests may be served by (routed aliases' plans are cut to them); "
        "empty = the tier's tenancy.tier_pools, else all",
    )
    limits: LevelLimits | None = Field(None, description="overrides of the tier's key-level limits")
    tags: list[Annotated[str, Field(pattern=TAG_PATTERN)]] | None = Field(
        None, max_length=64, description="the tags the key's requests may carry; absent: any declared tag"
    )
    id: KeyId | None = Field(None, description="generated when absent")


def key_info(record: KeyRecord) -> dict[str, Any]:
    """A record as the admin API shows it: no full hash (not needed, and one less thing to leak)."""
    info = record.to_dict()
    del info["sha256"]
    return {
        "object": "api_key",
        **info,
        "sha256_prefix": record.sha256[:HASH_PREFIX_LEN],
        "status": "revoked" if record.revoked else "active",
    }


def build_admin_router(
    store: KeyStore,
    admin_key: str | None,
    tiers: set[str],
    aliases: set[str],
    *,
    static_keys: Sequence[KeyRecord] = (),
    pools: set[str] | None = None,
) -> APIRouter:
    """`static_keys` are the policy's keys (`gateway.tenancy.keys.static_records`): listed, never
    revocable here. `pools`: the policy's pool names, which a key's `pools` must name (None: unchecked)."""
    if admin_key and hash_key(admin_key) in {r.sha256 for r in static_keys}:
        raise ValueError("the admin key must not also be a tenant key declared in tenancy.keys")
    secret = admin_key.encode("utf-8") if admin_key else None
    admin = _KeysAdmin(store, secret, tiers, aliases, pools, static_keys)
    router = APIRouter(prefix="/admin", dependencies=[Depends(admin.require_admin)], include_in_schema=False)
    router.add_api_route("/keys", admin.create_key, methods=["POST"])
    router.add_api_route("/keys", admin.list_keys, methods=["GET"])
    router.add_api_route("/keys/{key_id}", admin.revoke_key, methods=["DELETE"])
    return router


class FailedAttempts:
    """Failed admin authentications per client address: after `limit` within `window_s`, that address
    gets 429 (with retry-after) for `block_s`, before its key is even compared, so the admin key
    cannot be guessed at request speed. Per address, so a guesser cannot lock the real operator out
    from elsewhere; bounded (`max_addresses`, oldest dropped) so a spray of addresses cannot grow it."""

    def __init__(
        self,
        limit: int = 5,
        window_s: float = 60.0,
        block_s: float = 60.0,
        max_addresses: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._limit, self._window, self._block, self._max = limit, window_s, block_s, max_addresses
        self._clock = clock
        # address -> (window start, failures in it, blocked until)
        self._seen: dict[str, tuple[float, int, float]] = {}

    def blocked_for(self, address: str) -> float:
        """Seconds `address` is still blocked (0: not blocked)."""
        entry = self._seen.get(address)
        return max(0.0, entry[2] - self._clock()) if entry is not None else 0.0

    def failed(self, address: str) -> None:
        now = self._clock()
        start, fails, until = self._seen.pop(address, (now, 0, 0.0))
        if now - start > self._window:
            start, fails = now, 0
        fails += 1
        if fails >= self._limit:
            until = now + self._block
        self._seen[address] = (start, fails, until)  # re-inserted: newest last
        while len(self._seen) > self._max:
            del self._seen[next(iter(self._seen))]

    def succeeded(self, address: str) -> None:
        self._seen.pop(address, None)


class _KeysAdmin:
    """The admin API's handlers over one key store; `build_admin_router` mounts them."""

    def __init__(
        self,
        store: KeyStore,
        admin_secret: bytes | None,
        tiers: set[str],
        aliases: set[str],
        pools: set[str] | None,  # None: a key's pools are not checked
        static_keys: Sequence[KeyRecord],
    ) -> None:
        self._store = store
        self._admin_secret = admin_secret
        self._tiers = tiers
        self._aliases = aliases
        self._pools = pools
        self._static = {r.key_id: r for r in static_keys}
        self._clock: Callable[[], float] = time.time  # created_at, unix seconds
        self._failures = FailedAttempts()

    async def require_admin(self, request: Request) -> None:
        if self._admin_secret is None:
            raise PermissionDeniedError(
                "The admin API is disabled: no admin key is configured (set LLMGW_ADMIN_KEY).",
                code="admin_api_disabled",
            )
        address = request.client.host if request.client is not None else ""
        wait = self._failures.blocked_for(address)
        if wait > 0:
            raise RateLimitError(
                "Too many failed admin API authentications from this address; try again later.",
                code="admin_auth_throttled",
                headers={"retry-after": str(int(wait) + 1)},
            )
        header = request.headers.get("authorization", "")
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            self._failures.failed(address)
            raise AuthenticationError(
                "You didn't provide an admin API key. Use Authorization: Bearer <admin key>.",
                code="missing_api_key",
            )
        # Constant time: the comparison must not tell an attacker how much of the key was right.
        if not hmac.compare_digest(token.strip().encode("utf-8"), self._admin_secret):
            self._failures.failed(address)
            raise AuthenticationError("Incorrect admin API key provided.", code="invalid_admin_key")
        self._failures.succeeded(address)

    async def create_key(self, request: Request) -> JSONResponse:
        body = await _create_body(request)
        if body.tier not in self._tiers:
            raise InvalidRequestError(
                f"unknown tier '{body.tier}' (tiers: {sorted(self._tiers)})",
                param="tier",
                code="unknown_tier",
            )
        _known("model", body.models, self._aliases)
        if self._pools is not None:
            _known("pool", body.pools, self._pools)
        key_id = body.id or new_key_id()
        if key_id in self._static:
            raise ConflictError(f"key id '{key_id}' is declared in the policy file (tenancy.keys)")
        key = generate_key()
        record = KeyRecord(
            key_id=key_id,
            sha256=hash_key(key),
            org=body.org,
            app=body.app,
            tier=body.tier,
            models=frozenset(body.models),
            pools=frozenset(body.pools),
            tags=frozenset(body.tags) if body.tags is not None else None,
            limits=body.limits,
            created_at=self._clock(),
            revoked_at=None,
            source="store",
        )
        try:
            await self._store.create(record)
        except DuplicateKeyError as exc:
            raise ConflictError(str(exc), param="id") from exc
        # no-store: the one response that carries a plaintext key must not land in any cache.
        return JSONResponse(
            {"key": key, **key_info(record)}, status_code=201, headers={"cache-control": "no-store"}
        )

    async def list_keys(self) -> JSONResponse:
        records = [*self._static.values(), *await self._store.list()]
        records.sort(key=lambda r: (r.created_at, r.key_id))
        return JSONResponse({"object": "list", "data": [key_info(r) for r in records]})

    async def revoke_key(self, key_id: str) -> JSONResponse:
        if key_id in self._static:
            raise ConflictError(
                f"key '{key_id}' is declared in the policy file (tenancy.keys) and cannot be revoked "
                "through the API: remove it from the policy and restart or roll out the gateway",
                code="config_key",
            )
        if not await self._store.revoke(key_id):
            raise NotFoundError(f"no API key with id '{key_id}'", code="key_not_found")
        return JSONResponse({"object": "api_key", "id": key_id, "revoked": True})


def _known(what: str, names: list[str], known: set[str]) -> None:
    unknown = sorted(set(names) - known)
    if unknown:
        raise InvalidRequestError(
            f"unknown {what}(s) {unknown} ({what}s: {sorted(known)})",
            param=f"{what}s",
            code=f"unknown_{what}",
        )


async def _create_body(request: Request) -> CreateKey:
    return await read_model(request, CreateKey)


async def read_model(request: Request, model: type[M]) -> M:
    """The admin API's capped JSON body as `model`. Validated here rather than by FastAPI so that
    errors name the field in the OpenAI error shape."""
    try:
        data = orjson.loads(await small_body(request))
    except orjson.JSONDecodeError as exc:
        raise InvalidRequestError(f"the body is not valid JSON: {exc}"[:300], code="invalid_json") from None
    if not isinstance(data, dict):
        raise InvalidRequestError("the body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = ".".join(str(p) for p in err["loc"]) or None
        raise InvalidRequestError(f"invalid '{param}': {err['msg']}", param=param) from exc
