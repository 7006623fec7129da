"""A key created a second ago works after Redis restarts (issue 39: the chart's Redis ran without
persistence, and a Redis that restarted empty locked every admin-created key out: 401 on both replicas).

Redis runs as the chart now runs it (append-only file, fsynced every second; `helm/.../redis.yaml`).
A key is created through the admin API and used; Redis is stopped the way Kubernetes stops a pod
(SIGTERM) and started again on the same data; a second key, created 1.5 s before a `kill -9`, works
after that restart too. The same sequence on a Redis without the file shows what the chart's default
used to do: the key is gone (401).
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from gateway.tenancy.keys import generate_key
from tests.e2e.limits.conftest import SimFactory, gateway
from tests.support.limits_stack import TenantKey, write_policy
from tests.support.poll import wait_until
from tests.support.redis_server import RedisServer

ADMIN = "adm-" + generate_key()


def _create(url: str, key_id: str) -> str:
    resp = httpx.post(
        f"{url}/admin/keys",
        json={"org": "acme", "app": "durable", "id": key_id},
        headers={"authorization": f"Bearer {ADMIN}"},
        timeout=10,
    )
    assert resp.status_code == 201, resp.text
    return str(resp.json()["key"])


def _status(url: str, key: str) -> int:
    body = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    headers = {"authorization": f"Bearer {key}"}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=10).status_code


def _after_restart(url: str, key: str) -> int:
    """The key's status once the gateway's cached lookup expired and it asked the restarted Redis
    (asked until an answer other than 503, after the cache's 0.5 s)."""
    time.sleep(1.0)
    seen: list[int] = []

    def answered() -> bool:
        seen.append(_status(url, key))
        return seen[-1] != 503

    wait_until(answered, lambda: f"an answer other than 503 (got {seen[-5:]})", timeout=20, interval=0.2)
    return seen[-1]


@pytest.mark.parametrize("aof", [True, False], ids=["as-the-chart-runs-redis", "without-the-file"])
def test_a_key_created_a_second_ago_survives_a_redis_restart(
    tmp_path: Path, sims: SimFactory, aof: bool
) -> None:
    sim = sims("sim", "--profile", "instant")
    redis = RedisServer(tmp_path, aof=aof)
    redis.start()
    try:
        ops = TenantKey.new("ops", "acme", "ops")
        limits = "{backend: redis, on_backend_error: fail_open}"
        policy = write_policy(tmp_path / "policy.yaml", [sim], [ops], limits=limits, store="redis")
        # A short key cache: what the gateway says after the restart is what Redis holds.
        text = policy.read_text().replace("  store: redis\n", "  store: redis\n  cache_ttl_s: 0.5\n")
        policy.write_text(text)
        env = {"LLMGW_ADMIN_KEY": ADMIN}
        with gateway(policy, redis.url, tmp_path / "gateway.log", env=env) as (url, _):
            first = _create(url, "first")
            assert _status(url, first) == 200
            redis.stop()  # SIGTERM, as a pod is stopped
            redis.start()
            expected = 200 if aof else 401
            assert _after_restart(url, first) == expected
            if not aof:
                return
            second = _create(url, "second")
            time.sleep(1.5)  # appendfsync everysec: on disk within a second
            redis.kill()  # no shutdown at all
            redis.start()
            assert _after_restart(url, second) == 200
            assert _status(url, first) == 200
    finally:
        redis.kill()
