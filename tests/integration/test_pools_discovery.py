"""Replicas come and go without a restart: DNS (a local DNS server) and Kubernetes EndpointSlices
(a fake API server speaking the real list/watch wire format), with real simulator replicas on two
loopback addresses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.dns_server import dns_server
from tests.support.fake_kube import fake_kube, kubeconfig
from tests.support.poll import wait_until
from tests.support.procs import free_port
from tests.support.prom import metric
from tests.support.stack import Stack

HOSTS = ("127.0.0.1", "127.0.0.2")
POLL = {"timeout": 30, "interval": 0.05}  # generous: waits poll for a state, never time it


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """One simulator on each loopback address, same port (like pods behind a headless Service)."""
    port = free_port()
    with Stack(tmp_path_factory.mktemp("replicas")) as s:
        for host in HOSTS:
            s.sim("p", port=port, host=host, name=f"sim-{host}", ready=False)
        s.ready()
        yield port


def _members(base: str) -> set[str]:
    text = httpx.get(f"{base}/metrics", timeout=5).text
    return {
        line.split('replica="')[1].split('"')[0]
        for line in text.splitlines()
        if line.startswith("llmgw_replica_breaker_state{")
    }


def _served(port: int) -> dict[str, float]:
    return {
        h: metric(httpx.get(f"http://{h}:{port}/metrics").text, "vllm:request_success_total") for h in HOSTS
    }


def _chat(base: str) -> int:
    body = {"model": "p", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30).status_code


def _gateway(tmp: Path, endpoints: str, env: dict[str, str] | None = None) -> tuple[str, Stack]:
    cfg = tmp / "p.yaml"
    cfg.write_text(
        "pools:\n"
        f"  - {{name: p, model: p, endpoints: {endpoints}, balancing: {{strategy: round_robin}}}}\n"
        "models:\n  - {name: p, route: {pool: p}}\ntenancy: {auth: disabled}\n"
    )
    stack = Stack(tmp)
    try:
        base = stack.gateway(cfg, env=env, name="gw").url
    except BaseException:
        stack.close()
        raise
    return base, stack


def test_dns_discovery_follows_the_records(replicas: int, tmp_path: Path) -> None:
    port = replicas
    urls = {f"http://{h}:{port}" for h in HOSTS}
    with dns_server() as (dns_port, records):
        records["vllm-p.test."] = list(HOSTS)
        ns = f"127.0.0.1:{dns_port}"
        endpoints = f"{{dns: {{name: vllm-p.test, port: {port}, nameserver: '{ns}', interval_s: 0.1}}}}"
        base, stack = _gateway(tmp_path, endpoints)
        with stack:
            wait_until(lambda: _members(base) == urls, "both replicas discovered", **POLL)
            before = _served(port)
            assert [_chat(base) for _ in range(4)] == [200] * 4
            after = _served(port)
            assert all(after[h] > before[h] for h in HOSTS)  # round robin over both addresses
            records["vllm-p.test."] = [HOSTS[1]]
            wait_until(
                lambda: _members(base) == {f"http://{HOSTS[1]}:{port}"}, "the removed record leaves", **POLL
            )
            before = _served(port)
            assert [_chat(base) for _ in range(3)] == [200] * 3
            after = _served(port)
            assert after[HOSTS[0]] == before[HOSTS[0]] and after[HOSTS[1]] == before[HOSTS[1]] + 3


def _endpoint(address: str, ready: bool = True, terminating: bool = False) -> dict[str, object]:
    return {
        "addresses": [address],
        "conditions": {"ready": ready, "serving": ready, "terminating": terminating},
    }


def test_kubernetes_endpointslices_list_watch_honours_ready_and_terminating(
    replicas: int, tmp_path: Path
) -> None:
    port = replicas
    api_port = free_port()
    config = tmp_path / "kubeconfig"
    config.write_text(kubeconfig(api_port, "llm"))
    with fake_kube(api_port) as kube:
        kube.apply(
            "llm", "vllm-p-abc", "vllm-p", [_endpoint(HOSTS[0]), _endpoint("10.9.9.9", ready=False)], port
        )
        kube.apply("llm", "other-xyz", "other", [_endpoint("10.8.8.8")], port)  # another Service
        endpoints = "{kubernetes: {service: vllm-p, port: http}}"  # namespace from the kubeconfig context
        base, stack = _gateway(tmp_path, endpoints, env={"KUBECONFIG": str(config)})
        with stack:
            one, two = (f"http://{h}:{port}" for h in HOSTS)
            wait_until(lambda: _members(base) == {one}, "the listed ready endpoint", **POLL)
            assert _chat(base) == 200
            kube.apply("llm", "vllm-p-def", "vllm-p", [_endpoint(HOSTS[1])], port)  # scale up: watch ADDED
            wait_until(lambda: _members(base) == {one, two}, "the watched new slice", **POLL)
            # The first pod terminates: no new requests, even though it still serves its streams.
            kube.apply(
                "llm", "vllm-p-abc", "vllm-p", [_endpoint(HOSTS[0], ready=False, terminating=True)], port
            )
            wait_until(lambda: _members(base) == {two}, "the terminating endpoint leaves", **POLL)
            before = _served(port)
            assert [_chat(base) for _ in range(3)] == [200] * 3
            after = _served(port)
            assert after[HOSTS[0]] == before[HOSTS[0]] and after[HOSTS[1]] == before[HOSTS[1]] + 3
            kube.delete("llm", "vllm-p-def")
            wait_until(lambda: _members(base) == set(), "the deleted slice empties the pool", **POLL)
