"""Replica failures with real processes: retries before the first byte, breakers, the retry budget,
and SIGTERM draining. Waits poll for a state with a generous deadline; nothing asserts on timing."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.support.fake_upstream import fake_upstream
from tests.support.poll import wait_until
from tests.support.procs import free_port
from tests.support.prom import metric
from tests.support.stack import Stack

# ~40 tokens at ~50 ms a step: a stream that is still running when the test acts on it.
SLOW_SIM = ("--step-base-ms", "50")


def _policy(path: Path, urls: list[str], extra: str = "", top: str = "tenancy: {auth: disabled}\n") -> Path:
    listed = ", ".join(f'"{u}"' for u in urls)
    path.write_text(
        "pools:\n"
        "  - name: p\n"
        "    model: p\n"
        f"    endpoints: {{static: [{listed}]}}\n"
        "    timeouts: {connect_s: 1, first_token_s: 10, total_s: 30}\n"
        f"{extra}"
        "models:\n"
        "  - {name: p, route: {pool: p}, max_tokens: {default: 40, cap: 256}}\n"
        f"{top}"
    )
    return path


def _body(stream: bool, tokens: int = 40) -> dict[str, object]:
    return {
        "model": "p",
        "messages": [{"role": "user", "content": "tell me a story"}],
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": stream,
    }


def _stream(base: str, started: Callable[[], None] | None = None) -> tuple[int, list[str]]:
    with httpx.stream("POST", f"{base}/v1/chat/completions", json=_body(True), timeout=30) as r:
        text = ""
        for chunk in r.iter_text():
            if started is not None and not text:
                started()
            text += chunk
        return r.status_code, [e for e in text.split("\n\n") if e]


def _metrics(base: str) -> str:
    return httpx.get(f"{base}/metrics", timeout=5).text


def test_killed_replica_streams_end_with_error_others_retry_and_breaker_recovers(tmp_path: Path) -> None:
    a, b, gw = free_port(), free_port(), free_port()
    url_b = f"http://127.0.0.1:{b}"
    cfg = _policy(
        tmp_path / "p.yaml",
        [f"http://127.0.0.1:{a}", url_b],
        "    balancing: {strategy: round_robin}\n    breaker: {failures: 2, open_s: 1}\n",
    )
    with Stack(tmp_path) as procs:
        procs.sim("p", *SLOW_SIM, port=a, name="sim-a")
        base = procs.gateway(cfg, port=gw, name="gw").url
        replica_b = procs.sim("p", *SLOW_SIM, port=b, name="sim-b").proc
        with ThreadPoolExecutor(8) as pool:
            started = threading.Semaphore(0)
            # Round robin: three streams on each replica, all past their first byte before the kill.
            streams = [pool.submit(_stream, base, started.release) for _ in range(6)]
            for _ in streams:
                assert started.acquire(timeout=30)
            replica_b.send_signal(signal.SIGKILL)
            replica_b.wait()
            # Requests sent now have not streamed anything: they must all succeed on replica a.
            later = [
                httpx.post(f"{base}/v1/chat/completions", json=_body(False, 4), timeout=30) for _ in range(6)
            ]
            results = [s.result() for s in streams]
        assert all(r.status_code == 200 for r in later), [r.text for r in later]
        broken = [events for status, events in results if not events[-2].startswith('data: {"id"')]
        assert all(status == 200 for status, _ in results)
        assert len(broken) == 3  # the three streams on b: an error event, then [DONE]
        for events in broken:
            assert events[-1] == "data: [DONE]" and events[-2].startswith('data: {"error"')
        text = _metrics(base)
        assert metric(text, "llmgw_pool_retries_total", 'outcome="retried"') >= 1
        assert metric(text, "llmgw_replica_breaker_opens_total", f'replica="{url_b}"') >= 1
        assert metric(text, "llmgw_replica_breaker_state", f'replica="{url_b}"') in (1, 2)  # open/half-open

        # The replica comes back on the same address: a half-open probe succeeds and closes the breaker.
        procs.sim("p", port=b, name="sim-b")

        def closed() -> bool:
            r = httpx.post(f"{base}/v1/chat/completions", json=_body(False, 2), timeout=30)
            assert r.status_code == 200, r.text
            return metric(_metrics(base), "llmgw_replica_breaker_state", f'replica="{url_b}"') == 0

        wait_until(closed, "replica b's breaker closes again", timeout=30, interval=0.05)


def test_retries_stay_within_the_budget(tmp_path: Path) -> None:
    up, gw = free_port(), free_port()
    cfg = _policy(
        tmp_path / "p.yaml",
        [f"http://127.0.0.1:{up}/s500", f"http://127.0.0.1:{up}/ok"],
        "    balancing: {strategy: round_robin}\n"
        "    breaker: {failures: 1000}\n"  # keep the failing replica in rotation
        "    retries: {attempts: 2, budget_ratio: 0.1, budget_min_per_s: 0}\n",
    )
    with Stack(tmp_path) as s:
        s.enter(fake_upstream(up))
        base = s.gateway(cfg, port=gw, name="gw").url
        statuses = [
            httpx.post(f"{base}/v1/chat/completions", json=_body(False), timeout=10).status_code
            for _ in range(60)
        ]
        text = _metrics(base)
    retried = metric(text, "llmgw_pool_retries_total", 'outcome="retried"')
    refused = metric(text, "llmgw_pool_retries_total", 'outcome="budget_exhausted"')
    assert 1 <= retried <= 0.1 * len(statuses)
    assert refused >= 1 and statuses.count(502) == refused  # a refused retry is the replica's 502
    assert statuses.count(200) == len(statuses) - refused


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_turns_readiness_off_and_drains_streams_before_exiting(
    tmp_path: Path, workers: int, request: pytest.FixtureRequest
) -> None:
    sim, gw = free_port(), free_port()
    env = {"LLMGW_DRAIN_DELAY_S": "1.0", "LLMGW_DRAIN_SECONDS": "20"}
    top = "tenancy: {auth: disabled}\n"
    if workers > 1:  # several workers need the shared (Redis) limiter and key store
        redis = request.getfixturevalue("redis_server")
        env.update({"LLMGW_WORKERS": str(workers), "LLMGW_REDIS_URL": redis.url})
        top = f"limits: {{backend: redis, key_prefix: 'drain{gw}'}}\n"
        top += "tenancy: {auth: disabled, store: redis}\n"
    cfg = _policy(tmp_path / "p.yaml", [f"http://127.0.0.1:{sim}"], top=top)
    with Stack(tmp_path) as s:
        s.sim("p", *SLOW_SIM, port=sim)
        gateway = s.gateway(cfg, port=gw, env=env, name="gw", ready_path="/readyz")
        base, proc = gateway.url, gateway.proc
        assert httpx.get(f"{base}/readyz").status_code == 200
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(_stream, base, lambda: proc.send_signal(signal.SIGTERM))
            wait_until(
                lambda: httpx.get(f"{base}/readyz").status_code == 503,
                "readiness turns false",
                timeout=30,
                interval=0.05,
            )
            # Still serving during the drain delay: the load balancer may not know yet.
            second = httpx.post(f"{base}/v1/chat/completions", json=_body(False, 2), timeout=10)
            status, events = first.result()
        # uvicorn re-raises the captured SIGTERM after its graceful shutdown (the conventional
        # exit status of a process ended by SIGTERM).
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
    assert second.status_code == 200
    assert "Application shutdown complete" in (tmp_path / "gw.log").read_text()
    assert status == 200 and events[-1] == "data: [DONE]"
    assert not any('"error"' in e for e in events)
    assert sum('"content"' in e for e in events) >= 40


def test_a_stream_outliving_the_drain_period_ends_with_an_error_event(tmp_path: Path) -> None:
    sim, gw = free_port(), free_port()
    cfg = _policy(tmp_path / "p.yaml", [f"http://127.0.0.1:{sim}"])
    env = {"LLMGW_DRAIN_DELAY_S": "0.2", "LLMGW_DRAIN_SECONDS": "1"}
    body = {**_body(True, 200)}  # ~10 s of tokens: longer than the drain period
    with Stack(tmp_path) as s:
        s.sim("p", *SLOW_SIM, port=sim)
        gateway = s.gateway(cfg, port=gw, env=env, name="gw", ready_path="/readyz")
        base, proc = gateway.url, gateway.proc
        with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=30) as r:
            text = ""
            for chunk in r.iter_text():
                if not text:
                    proc.send_signal(signal.SIGTERM)
                text += chunk
        proc.wait(timeout=30)
    events = [e for e in text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    assert "shutting down" in events[-2] and '"error"' in events[-2]
    assert sum('"content"' in e for e in events) < 200
