"""Tenant scopes escape each part (issue 24, item 5): org `acme` / app `x/y` and org `acme/x` / app `y`
joined to the same `acme/x/y`, so the second tenant got the first's cached answer (same `chatcmpl` id)
and the two shared their app-level limiter buckets. Real gateway, real redis-server (limiter, key
store and response cache all in it), `scope: app`, one store key per tenant."""

from __future__ import annotations

from pathlib import Path

import httpx
import redis

from gateway.tenancy.keys import generate_key
from tests.e2e.limits.conftest import SimFactory, gateway
from tests.support.limits_stack import PREFIX
from tests.support.redis_server import RedisServer

ADMIN = "adm-" + generate_key()
APP_RPM = 4  # app-level requests per minute of every tenant
TENANTS = {"first": ("acme", "x/y"), "second": ("acme/x", "y")}
BODY = {"model": "sim", "messages": [{"role": "user", "content": "tell me a fact"}], "temperature": 0}


def policy(path: Path, sim: str) -> Path:
    path.write_text(
        f"""\
pools:
  - {{name: sim, model: sim, endpoints: {{static: ["{sim}"]}}}}
models:
  - {{name: sim, route: {{pool: sim}}, max_tokens: {{default: 8, cap: 16}}, cache: {{scope: app}}}}
cache: {{backend: redis}}
limits:
  backend: redis
  tiers: {{standard: {{app: {{requests_per_min: {APP_RPM}}}}}}}
tenancy:
  store: redis
  keys: []
"""
    )
    return path


def test_colliding_tenants_share_neither_cache_entries_nor_buckets(
    tmp_path: Path, redis_server: RedisServer, sims: SimFactory
) -> None:
    sim = sims("sim", "--profile", "instant")
    pol = policy(tmp_path / "policy.yaml", sim)
    env = {"LLMGW_ADMIN_KEY": ADMIN}
    with gateway(pol, redis_server.url, tmp_path / "gateway.log", env=env) as (url, _):
        with httpx.Client(base_url=url, timeout=10) as client:
            keys = {}
            for name, (org, app) in TENANTS.items():
                resp = client.post(
                    "/admin/keys",
                    json={"org": org, "app": app, "id": name},
                    headers={"authorization": f"Bearer {ADMIN}"},
                )
                assert resp.status_code == 201, resp.text
                keys[name] = resp.json()["key"]

            def ask(name: str, body: dict = BODY) -> httpx.Response:
                return client.post(
                    "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {keys[name]}"}
                )

            first, again = ask("first"), ask("first")
            assert first.status_code == again.status_code == 200, (first.text, again.text)
            # The cache works for one tenant: the same answer, same id, marked as a hit.
            assert again.headers["x-llmgw-cache-status"] == "hit"
            assert again.json()["id"] == first.json()["id"]
            second = ask("second")
            assert second.status_code == 200, second.text
            assert second.headers["x-llmgw-cache-status"] == "miss"
            assert second.json()["id"] != first.json()["id"]

            # The first tenant's app bucket runs dry; the second's is untouched by it.
            statuses = [ask("first", {**BODY, "temperature": 1}).status_code for _ in range(APP_RPM)]
            second_after = [ask("second", {**BODY, "temperature": 1}).status_code for _ in range(APP_RPM - 1)]
    r = redis.Redis.from_url(redis_server.url)
    app_keys = sorted(k.decode().removesuffix(":sw") for k in r.scan_iter(f"{PREFIX}:app:*:requests:sw"))
    r.close()
    print(
        f"\n[scope] first {first.json()['id']} / second {second.json()['id']}; first tenant after its "
        f"{APP_RPM} app requests: {statuses}; second tenant: {second_after}; app buckets {app_keys}"
    )
    # Two of its requests (the miss and the hit) were counted already.
    assert statuses == [200] * (APP_RPM - 2) + [429] * 2, statuses
    assert second_after == [200] * (APP_RPM - 1), second_after
    assert app_keys == [f"{PREFIX}:app:acme%252Fx%2Fy:requests", f"{PREFIX}:app:acme%2Fx%252Fy:requests"]
