"""Feedback reaches any replica: two gateway processes share delivered answers through one real
redis-server; "rated once" holds across them; Redis dying degrades feedback (503), never requests."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from gateway.tenancy.keys import generate_key, hash_key
from tests.support.poll import wait_until
from tests.support.procs import free_port, running, sim_args, write_policy
from tests.support.prom import metric
from tests.support.redis_server import RedisServer, start_any


@dataclass(frozen=True)
class Replicas:
    urls: tuple[str, str]
    headers: dict[str, str]
    redis: RedisServer


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    tmp: Path = tmp_path_factory.mktemp("feedback-replicas")
    redis = start_any(tmp)
    key = generate_key()
    sim_port = free_port()
    sim = f"http://127.0.0.1:{sim_port}"
    policy = write_policy(
        tmp / "policy.yaml",
        {"small": sim},
        f"tenancy:\n  keys:\n    - {{id: fb, sha256: {hash_key(key)}, org: acme, app: fb}}\n",
    )
    ports = (free_port(), free_port())
    with ExitStack() as es:
        es.callback(redis.kill)
        es.enter_context(running(sim_args(sim_port, "small", "--profile", "instant"), f"{sim}/health"))
        for i, port in enumerate(ports):
            args = ["serve", "--config", str(policy), "--port", str(port)]
            env = {"LLMGW_REDIS_URL": redis.url, "LLMGW_REDIS_TIMEOUT_S": "0.5"}
            url = f"http://127.0.0.1:{port}/healthz"
            es.enter_context(running(args, url, env=env, log=tmp / f"gateway-{i}.log"))
        yield Replicas(
            (f"http://127.0.0.1:{ports[0]}", f"http://127.0.0.1:{ports[1]}"),
            {"authorization": f"Bearer {key}"},
            redis,
        )


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
    deadline = time.monotonic() + 5
    while True:
        resp = _rate(r, replica, request_id)
        if resp.status_code != 404 or time.monotonic() > deadline:
            return resp
        time.sleep(0.05)


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
