"""The admin router mounted on a small FastAPI app: auth of the admin API, create/list/revoke, errors."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import redis.asyncio
from fastapi import FastAPI

from gateway.errors import AuthenticationError
from gateway.tenancy.admin import build_admin_router
from gateway.tenancy.auth import Authenticator
from gateway.tenancy.keys import KeyStore, MemoryKeyStore, RedisKeyStore, hash_key, static_records
from tests.integration.tenancy.admin_app import ADMIN, LIMITS, STATIC_KEY, TENANCY, make_app


def client(app: FastAPI, admin_key: str | None = ADMIN) -> httpx.AsyncClient:
    # Latin-1 bytes: the header may carry any byte, as on the wire.
    headers = {b"authorization": f"Bearer {admin_key}".encode("latin-1")} if admin_key else {}
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw", headers=headers)


def assert_error(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == code


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest, redis_url: str) -> AsyncIterator[KeyStore]:
    if request.param == "memory":
        yield MemoryKeyStore()
        return
    rc = redis.asyncio.Redis.from_url(redis_url)
    await rc.flushall()
    yield RedisKeyStore(rc, "llmgw", owns_client=True)
    await rc.aclose()


async def test_create_list_revoke_and_authenticate(store: KeyStore) -> None:
    auth = Authenticator(TENANCY, LIMITS, store)
    async with client(make_app(store)) as c:
        r = await c.post(
            "/admin/keys", json={"org": "acme", "app": "chat", "tier": "premium", "models": ["small"]}
        )
        assert r.status_code == 201, r.text
        assert r.headers["cache-control"] == "no-store"
        created = r.json()
        key, key_id = created["key"], created["id"]
        assert key.startswith("sk-") and "sha256" not in created
        assert created["sha256_prefix"] == hash_key(key)[:12] and created["status"] == "active"
        p = await auth.authenticate(f"Bearer {key}".encode(), "small")
        assert (p.key_id, p.tenant.org, p.tenant.priority) == (key_id, "acme", "premium")

        r = await c.get("/admin/keys")
        assert r.status_code == 200
        listed = {k["id"]: k for k in r.json()["data"]}
        assert set(listed) == {"ops", key_id}
        assert listed["ops"]["source"] == "config" and listed[key_id]["source"] == "store"
        assert key not in r.text and hash_key(key) not in r.text and hash_key(STATIC_KEY) not in r.text

        r = await c.delete(f"/admin/keys/{key_id}")
        assert r.status_code == 200 and r.json()["revoked"] is True
        listed = {k["id"]: k for k in (await c.get("/admin/keys")).json()["data"]}
        assert listed[key_id]["status"] == "revoked" and listed[key_id]["revoked_at"] is not None
        auth.clear_cache()
        with pytest.raises(AuthenticationError):
            await auth.authenticate(f"Bearer {key}".encode(), "small")


async def test_explicit_id_limits_and_conflicts(store: KeyStore) -> None:
    async with client(make_app(store)) as c:
        body = {"org": "acme", "app": "chat", "id": "team-a", "limits": {"requests_per_min": 5}}
        r = await c.post("/admin/keys", json=body)
        assert r.status_code == 201 and r.json()["id"] == "team-a"
        assert r.json()["limits"] == {"requests_per_min": 5}
        assert_error(await c.post("/admin/keys", json=body), 409, "conflict")
        assert_error(await c.post("/admin/keys", json={**body, "id": "ops"}), 409, "conflict")
        r = await c.delete("/admin/keys/ops")
        assert_error(r, 409, "config_key")
        assert "policy" in r.json()["error"]["message"] and r.headers["x-should-retry"] == "false"
        assert_error(await c.delete("/admin/keys/nope"), 404, "key_not_found")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"org": "acme", "app": "chat", "tier": "gold"}, "tier"),
        ({"org": "acme", "app": "chat", "models": ["small", "huge"]}, "models"),
        ({"org": "acme"}, "app"),
        ({"org": "acme", "app": "chat", "surprise": 1}, "surprise"),
        ({"org": "acme", "app": "chat", "id": "bad id!"}, "id"),
        ({"org": "acme", "app": "chat", "limits": {"requests_per_min": -1}}, "limits.requests_per_min"),
    ],
)
async def test_invalid_bodies_are_400(body: dict[str, object], param: str) -> None:
    async with client(make_app(MemoryKeyStore())) as c:
        r = await c.post("/admin/keys", json=body)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == param
        r = await c.post("/admin/keys", content=b"{nope", headers={"content-type": "application/json"})
        assert_error(r, 400, "invalid_json")


async def test_admin_key_required() -> None:
    store = MemoryKeyStore()
    app = make_app(store)
    async with client(app, admin_key=None) as c:
        assert_error(await c.get("/admin/keys"), 401, "missing_api_key")
        assert_error(await c.post("/admin/keys", json={"nonsense": True}), 401, "missing_api_key")
    async with client(app, admin_key=ADMIN + "y") as c:
        assert_error(await c.get("/admin/keys"), 401, "invalid_admin_key")
        assert_error(await c.delete("/admin/keys/ops"), 401, "invalid_admin_key")
    async with client(app, admin_key=STATIC_KEY) as c:  # a tenant key is never an admin key
        assert_error(await c.get("/admin/keys"), 401, "invalid_admin_key")
    # The sixth failure from one address within a minute: throttled before the key is compared.
    async with client(app, admin_key="é") as c:
        assert_error(await c.get("/admin/keys"), 429, "admin_auth_throttled")
    assert await store.list() == []


async def test_disabled_admin_api() -> None:
    for admin_key in (None, ""):
        async with client(make_app(MemoryKeyStore(), admin_key=admin_key), admin_key=ADMIN) as c:
            r = await c.post("/admin/keys", json={"org": "acme", "app": "chat"})
            assert_error(r, 403, "admin_api_disabled")
            assert "disabled" in r.json()["error"]["message"]


def test_admin_key_equal_to_a_static_tenant_key_is_refused() -> None:
    with pytest.raises(ValueError, match="tenant key"):
        build_admin_router(
            MemoryKeyStore(), STATIC_KEY, {"standard"}, set(), static_keys=static_records(TENANCY)
        )
