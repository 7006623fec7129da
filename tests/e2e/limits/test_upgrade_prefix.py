"""An upgrade to one key prefix keeps every key and every tenant's usage (issue 39).

Before 0.3 the limiter and the key store wrote `{llmgw}:...`, the rest `llmgw:...`; now everything
is under `llmgw:` (`llmgw:{llmgw}:...` for the first two, same hash tag). A gateway of this version
runs, creates a key and spends quota; its keys are then renamed to the pre-0.3 names (the layout of
each key is unchanged, so this is what a 0.2 gateway leaves) and a gateway starts on that Redis: the
key works, the day's usage is where the limiter reads it, and nothing is left outside the prefix.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import redis

from gateway.tenancy.keys import generate_key
from tests.e2e.limits.conftest import SimFactory, gateway
from tests.support.limits_stack import TenantKey, write_policy
from tests.support.poll import wait_until
from tests.support.redis_server import RedisServer

ADMIN = "adm-" + generate_key()
ROOT, LEGACY = "llmgw:{llmgw}", "{llmgw}"


def _chat(url: str, key: str) -> httpx.Response:
    body = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    headers = {"authorization": f"Bearer {key}"}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=10)


def _quota(r: redis.Redis) -> dict[str, int]:
    return {k.decode(): int(r.get(k) or 0) for k in r.scan_iter(match=f"{ROOT}:*:q:*")}


def _grown(r: redis.Redis, used: dict[str, int]) -> bool:
    now = _quota(r)
    return all(now.get(k, 0) > v for k, v in used.items())


def test_keys_and_quota_usage_survive_the_upgrade(tmp_path: Path, sims: SimFactory) -> None:
    sim = sims("sim", "--profile", "instant")
    server = RedisServer(tmp_path)
    server.start()
    try:
        r = redis.Redis.from_url(server.url)
        ops = TenantKey.new("ops", "acme", "ops")
        limits = "{backend: redis, on_backend_error: fail_closed, global: {tokens_per_day: 1000000}}"
        policy = write_policy(tmp_path / "policy.yaml", [sim], [ops], limits=limits, store="redis")
        env = {"LLMGW_ADMIN_KEY": ADMIN}
        with gateway(policy, server.url, tmp_path / "gateway-before.log", env=env) as (url, _):
            created = httpx.post(
                f"{url}/admin/keys",
                json={"org": "acme", "app": "up", "id": "dyn"},
                headers={"authorization": f"Bearer {ADMIN}"},
                timeout=10,
            )
            assert created.status_code == 201, created.text
            key = str(created.json()["key"])
            for _ in range(3):
                assert _chat(url, key).status_code == 200
        used = _quota(r)
        assert used and all(v > 0 for v in used.values()), used
        for name in list(r.scan_iter(match=f"{ROOT}:*")):
            if not name.endswith((b":leases", b":lh")):
                r.rename(name, LEGACY.encode() + name[len(ROOT) :])
        assert _quota(r) == {}

        with gateway(policy, server.url, tmp_path / "gateway-after.log", env=env) as (url, _):
            assert _quota(r) == used  # moved at start, before the first request
            assert _chat(url, key).status_code == 200  # the admin-created key was merged
            names = [k.decode() for k in r.scan_iter(count=1000)]
            assert names and all(n.startswith("llmgw:") for n in names), names
            # ... and the request's usage adds to it (settled shortly after the answer).
            wait_until(lambda: _grown(r, used), lambda: f"{used} {_quota(r)}", timeout=10)
        r.close()
    finally:
        server.kill()
