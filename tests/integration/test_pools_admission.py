"""Pool admission with real processes: scale from zero (a DNS-discovered pool with no replica holds
requests and exports its demand), the cold-start timeout (503 + Retry-After, never 404), and holding
while every replica is saturated."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.support.dns_server import dns_server
from tests.support.poll import wait_until
from tests.support.procs import free_port
from tests.support.prom import metric
from tests.support.stack import Stack

Admission = tuple[str, int, dict[str, list[str]], int, Stack]
POLL = {"timeout": 60, "interval": 0.05}  # generous: waits poll for a state, never time it


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Admission]:
    tmp = tmp_path_factory.mktemp("admission")
    sim_port, busy_port, gw = free_port(), free_port(), free_port()
    with dns_server() as (dns_port, records):
        dns_tail = f"port: {sim_port}, nameserver: '127.0.0.1:{dns_port}', interval_s: 0.1"
        cfg = tmp / "p.yaml"
        cfg.write_text(
            "pools:\n"
            "  - name: zero\n"
            "    model: zero\n"
            f"    endpoints: {{dns: {{name: vllm-zero.test, {dns_tail}}}}}\n"
            "    admission: {cold_start_timeout_s: 60}\n"
            "  - name: never\n"
            "    model: never\n"
            f"    endpoints: {{dns: {{name: vllm-never.test, {dns_tail}}}}}\n"
            "    admission: {cold_start_timeout_s: 0.5}\n"
            "  - name: busy\n"
            "    model: busy\n"
            f'    endpoints: {{static: ["http://127.0.0.1:{busy_port}"]}}\n'
            "    saturation: {inflight: 1}\n"
            "    admission: {max_wait_s: 60}\n"
            "models:\n"
            "  - {name: zero, route: {pool: zero}}\n"
            "  - {name: never, route: {pool: never}}\n"
            "  - {name: busy, route: {pool: busy}}\n"
            "tenancy: {auth: disabled}\n"
        )
        with Stack(tmp) as s:
            s.sim("busy", "--step-base-ms", "40", port=busy_port)
            base = s.gateway(cfg, port=gw, name="gw").url
            yield base, sim_port, records, busy_port, s


def _chat(base: str, model: str, tokens: int = 4, stream: bool = False) -> httpx.Response:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": stream,
    }
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=90)


def _queued(base: str, pool: str) -> float:
    text = httpx.get(f"{base}/metrics", timeout=5).text
    assert f'llmgw_pool_queued_requests{{pool="{pool}"}}' in text  # exported even at zero replicas
    return metric(text, "llmgw_pool_queued_requests", f'pool="{pool}"')


def test_scale_from_zero_holds_requests_exports_demand_and_proceeds_when_a_replica_appears(
    stack: Admission,
) -> None:
    base, sim_port, records, _, procs = stack
    assert _queued(base, "zero") == 0
    with ThreadPoolExecutor(2) as pool:
        held = [pool.submit(_chat, base, "zero") for _ in range(2)]
        wait_until(lambda: _queued(base, "zero") == 2, "two requests held by the empty pool", **POLL)
        assert not any(f.done() for f in held)
        zero = procs.sim("zero", port=sim_port)
        records["vllm-zero.test."] = ["127.0.0.1"]  # the autoscaler started a replica
        responses = [f.result() for f in held]
        records.pop("vllm-zero.test.")
        procs.stop(zero)
    assert [r.status_code for r in responses] == [200, 200], [r.text for r in responses]
    assert _queued(base, "zero") == 0
    text = httpx.get(f"{base}/metrics", timeout=5).text
    assert metric(text, "llmgw_pool_held_requests_total", 'pool="zero"') >= 2
    assert metric(text, "llmgw_pool_queue_wait_seconds_count", 'pool="zero"') >= 2


def test_cold_start_timeout_answers_retryable_503_never_404(stack: Admission) -> None:
    base = stack[0]
    resp = _chat(base, "never")
    assert resp.status_code == 503, resp.text
    assert resp.json()["error"]["code"] == "upstream_unavailable"
    assert "no ready replica" in resp.json()["error"]["message"]
    assert int(resp.headers["retry-after"]) >= 1
    text = httpx.get(f"{base}/metrics", timeout=5).text
    assert metric(text, "llmgw_pool_rejections_total", 'pool="never",reason="cold_start"') >= 1


def test_saturated_pool_holds_the_next_request_until_a_replica_frees_up(stack: Admission) -> None:
    base = stack[0]
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(_chat, base, "busy", 40)
        wait_until(lambda: _replica_busy(base), "the only replica is at its in-flight limit", **POLL)
        second = pool.submit(_chat, base, "busy", 2)
        wait_until(lambda: _queued(base, "busy") == 1 or second.done(), "the second request is held", **POLL)
        results = [first.result(), second.result()]
    assert [r.status_code for r in results] == [200, 200]


def _replica_busy(base: str) -> bool:
    text = httpx.get(f"{base}/metrics", timeout=5).text
    return metric(text, "llmgw_replica_inflight_requests", 'pool="busy"') >= 1
