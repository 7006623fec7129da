"""Feedback reaches any replica: two gateway processes share delivered answers through one real
redis-server; "rated once" holds across them; Redis dying degrades feedback (503), never requests."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from gateway.tenancy.keys import generate_key, hash_key
from tests.support.poll import wait_until
from tests.support.procs import write_policy
from tests.support.prom import metric
from tests.support.redis_server import RedisServer
from tests.support.stack import Stack


@dataclass(frozen=True)
class Replicas:
    urls: tuple[str, str]
    headers: dict[str, str]
    redis: RedisServer


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    tmp: Path = tmp_path_factory.mktemp("feedback-replicas")
    key = generate_key()
    with Stack(tmp) as s:
        redis = s.redis(any_kind=True)
        sim = s.sim("small", "--profile", "instant")
        policy = write_policy(
            tmp / "policy.yaml",
            {"small": sim.url},
            f"tenancy:\n  keys:\n    - {{id: fb, sha256: {hash_key(key)}, org: acme, app: fb}}\n",
        )
        env = {"LLMGW_REDIS_URL": redis.url, "LLMGW_REDIS_TIMEOUT_S": "0.5"}
        gws = [s.gateway(policy, env=env, name=f"gateway-{i}", ready=False) for i in range(2)]
        s.ready()  # the two replicas boot side by side
        yield Replicas((gws[0].url, gws[1].url), {"authorization": f"Bearer {key}"}, redis)


def _answer(r: Replicas, replica: int) -> str:
    body = {"model": "small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    resp = httpx.post(f"{r.urls[replica]}/v1/chat/completions", json=body, headers=r.headers, timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.headers["x-request-id"]


def _rate(r: Replicas, replica: int, request_id: str) -> httpx.Response:
    body = {"request_id": request_id, "accepted": True, "score": 0.9}
    return httpx.post(f"{r.urls[replica]}/v1/feedback", json=body, headers=r.headers, timeout=10)


def _rate_when_shared(r: Replicas, replica: int, request_id: str) -> httpx.Response:
    # The serving replica flushes its records every 50 ms: poll briefly instead of sleeping blindly.
    resp: list[httpx.Response] = []

    def shared() -> bool:
        resp[:] = [_rate(r, replica, request_id)]
        return resp[0].status_code != 404

    wait_until(shared, lambda: f"the rating not to be 404: {resp[0].text}", timeout=5, interval=0.05)
    return resp[0]


def test_feedback_on_another_replica_is_accepted_once(replicas: Replicas) -> None:
    rid = _answer(replicas, 0)
    resp = _rate_when_shared(replicas, 1, rid)
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"request_id": rid, "accepted": True}
    again = _rate(replicas, 0, rid)  # the serving replica: its local entry is not rated, Redis says so
    assert again.status_code == 409, again.text
    assert again.json()["error"]["code"] == "feedback_exists"
    assert _rate(replicas, 1, rid).status_code == 409


def test_unknown_id_is_404_on_every_replica(replicas: Replicas) -> None:
    for replica in (0, 1):
        assert _rate(replicas, replica, "never-served").status_code == 404


def test_redis_down_non_local_feedback_is_503_and_requests_succeed(replicas: Replicas) -> None:
    shared = _answer(replicas, 0)
    assert _rate_when_shared(replicas, 1, shared).status_code == 200  # it reached Redis
    replicas.redis.kill()
    local = _answer(replicas, 0)  # requests still succeed
    resp = _rate(replicas, 1, local)
    assert resp.status_code == 503, resp.text
    assert resp.json()["error"]["code"] == "feedback_store_unavailable"
    assert _rate(replicas, 0, local).status_code == 200  # served here: rated locally
    _answer(replicas, 1)
    # The series exists (at 0) whenever feedback is shared: wait for replica 0's failed flush to count.
    page = [""]

    def flush_failed() -> bool:
        page[0] = httpx.get(f"{replicas.urls[0]}/metrics", timeout=5).text
        return metric(page[0], "llmgw_feedback_flush_errors_total") >= 1

    wait_until(flush_failed, "llmgw_feedback_flush_errors_total >= 1 on replica 0", timeout=5, interval=0.05)
    metrics = page[0]
    assert metric(metrics, "llmgw_feedback_dropped_records_total") >= 1
