"""Anti-starvation through real processes (issue 42): one slow simulator replica that the gateway
saturates at one request in flight, a premium key flooding it, a standard key always waiting too.
With `min_share: {standard: s}` the standard key is served at no less than s of the tokens (its
requests are the premium ones' size, so of the completions); with no share it starves."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from gateway.tenancy.keys import generate_key, hash_key
from tests.support.prom import metric
from tests.support.stack import Service, Stack

pytestmark = pytest.mark.e2e

RUN_S = 4.0
BODY = {
    "model": "sim",
    "messages": [{"role": "user", "content": "Count to four, please."}],
    "max_tokens": 4,
    "ignore_eos": True,  # every answer the same length: a share of tokens is a share of completions
}


def _policy(path: Path, sim: str, min_share: float) -> tuple[Path, dict[str, str]]:
    keys = {"prem": generate_key(), "std": generate_key()}
    path.write_text(
        f"""\
pools:
  - name: p
    model: sim
    endpoints: {{static: ["{sim}"]}}
    saturation: {{inflight: 1}}
    admission:
      max_queued: 64
      max_wait_s: 60
      fairness: {{min_share: {{standard: {min_share}}}}}
models:
  - {{name: sim, route: {{pool: p}}, max_tokens: {{default: 4, cap: 4}}}}
limits:
  backend: memory
  tiers:
    standard: {{priority: standard}}
    premium: {{priority: premium}}
tenancy:
  keys:
    - {{id: prem, sha256: {hash_key(keys["prem"])}, org: big, app: flood, tier: premium}}
    - {{id: std, sha256: {hash_key(keys["std"])}, org: small, app: steady, tier: standard}}
"""
    )
    return path, keys


def _run(gw: Service, keys: dict[str, str]) -> dict[str, int]:
    """Premium: 12 clients back to back; standard: 3. Completions per key over RUN_S."""
    done = {"prem": 0, "std": 0}
    lock = threading.Lock()
    stop = time.monotonic() + RUN_S

    def client(name: str) -> None:
        with httpx.Client(base_url=gw.v1, timeout=60, headers={"authorization": f"Bearer {keys[name]}"}) as c:
            while time.monotonic() < stop:
                r = c.post("/chat/completions", json=BODY)
                assert r.status_code == 200, r.text
                if time.monotonic() < stop:  # answers after the end would count the drain, not the race
                    with lock:
                        done[name] += 1

    threads = [threading.Thread(target=client, args=("prem",)) for _ in range(12)]
    threads += [threading.Thread(target=client, args=("std",)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done


@pytest.mark.parametrize("min_share", [0.25, 0.0])
def test_premium_flooding_leaves_standard_its_minimum_share(tmp_path: Path, min_share: float) -> None:
    with Stack(tmp_path) as s:
        sim = s.sim("sim", "--profile", "instant", "--step-base-ms", "10")
        policy, keys = _policy(tmp_path / "policy.yaml", sim.url, min_share)
        gw = s.gateway(policy, ready_path="/readyz")
        done = _run(gw, keys)
        text = gw.metrics()
    waited = metric(text, "llmgw_pool_queue_wait_seconds_count", 'band="standard"')
    std_tokens = metric(text, "llmgw_pool_dispatched_tokens_total", 'org="small"')
    prem_tokens = metric(text, "llmgw_pool_dispatched_tokens_total", 'org="big"')
    assert waited > 0 and prem_tokens > std_tokens > 0  # (a starved standard is served in the drain)
    total = done["prem"] + done["std"]
    assert total >= 40, done  # the pool was saturated long enough to mean something
    share = done["std"] / total
    if min_share:
        assert share >= min_share - 0.05, done  # one request either way of the boundary
        assert done["prem"] / total >= 1 - min_share - 0.1, done  # and no more than that
    else:
        assert share <= 0.05, done  # strict priority: standard waits behind the flood
