"""The gateway's drift canary (policy `drift`) as real processes: a gateway, two identical simulators, and
a scripted server standing in for a reference pool, a drifted one and one that sends no logprobs.

Every pair is checked once a second; /metrics must show exactly zero drift between the simulators, the
scripted drift (|Δ logprob| 0.25 on the shared prefix, divergence at token 1) over its bound, and the
pool without logprobs counted as failed checks without gauges."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.poll import wait_until
from tests.support.prom import metric
from tests.support.scripted_openai import scripted_server
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e


def _policy(sims: tuple[str, str], scripted: str) -> str:
    return f"""\
pools:
  - {{name: ref, model: m, endpoints: {{static: ["{sims[0]}"]}}}}
  - {{name: twin, model: m, endpoints: {{static: ["{sims[1]}"]}}}}
  - {{name: old, engine: openai, model: m, endpoints: {{static: ["{scripted}/ref"]}}}}
  - {{name: new, engine: openai, model: m, endpoints: {{static: ["{scripted}/drift"]}}}}
  - {{name: mute, engine: openai, model: m, endpoints: {{static: ["{scripted}/nolp"]}}}}
models:
  - {{name: m, route: {{pool: ref}}}}
drift:
  every_s: 1
  max_tokens: 6
  prompts: ["hello there", "count to five"]
  bound: {{max_mean_abs_logprob: 0.1}}
  pairs:
    - {{a: ref, b: twin}}
    - {{a: old, b: new}}
    - {{a: old, b: mute}}
    - {{a: ref, b: new, bound: {{min_match_ratio: 0.0, max_mean_abs_logprob: null}}}}
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp: Path = tmp_path_factory.mktemp("drift-canary")
    with Stack(tmp) as s:
        scripted = s.enter(scripted_server())
        sims = [s.sim("m", "--profile", "instant", name=f"sim-{i}", ready=False) for i in range(2)]
        policy = tmp / "policy.yaml"
        policy.write_text(_policy((sims[0].url, sims[1].url), scripted))
        yield s.gateway(policy).url


def _scrape_until(url: str, ready: str, timeout: float = 30.0) -> str:
    page = [""]  # the page the last poll read: the one that matched, or the one to show

    def has() -> bool:
        page[0] = httpx.get(f"{url}/metrics", timeout=5).text
        return ready in page[0]

    wait_until(has, lambda: f"{ready!r} in /metrics:\n{page[0][-3000:]}", timeout=timeout)
    return page[0]


def test_identical_pools_show_exactly_zero_drift(gateway: str) -> None:
    text = _scrape_until(gateway, 'llmgw_pool_drift_checks_total{a="ref",b="twin",outcome="ok"} 2.0')
    pair = 'a="ref",b="twin"'
    assert metric(text, "llmgw_pool_drift_match_ratio", pair) == 1.0
    for name in ("mean_abs_logprob", "max_abs_logprob", "kl", "exceeded"):
        assert metric(text, f"llmgw_pool_drift_{name}", pair) == 0.0, name
    assert metric(text, "llmgw_pool_drift_topk_overlap", pair) == 1.0
    assert metric(text, "llmgw_pool_drift_first_divergence_tokens", pair) == 6.0  # max_tokens: none diverged
    assert metric(text, "llmgw_pool_drift_last_check_timestamp_seconds", pair) > time.time() - 60


def test_a_drifted_pool_exceeds_its_bound(gateway: str) -> None:
    text = _scrape_until(gateway, 'llmgw_pool_drift_checks_total{a="old",b="new",outcome="ok"}')
    pair = 'a="old",b="new"'
    assert metric(text, "llmgw_pool_drift_mean_abs_logprob", pair) == pytest.approx(0.25)
    assert metric(text, "llmgw_pool_drift_max_abs_logprob", pair) == pytest.approx(0.25)
    assert metric(text, "llmgw_pool_drift_match_ratio", pair) == 0.0
    assert metric(text, "llmgw_pool_drift_first_divergence_tokens", pair) == 1.0
    assert metric(text, "llmgw_pool_drift_kl", pair) > 0
    assert metric(text, "llmgw_pool_drift_exceeded", pair) == 1.0
    # A pair with its own bound: nothing diverges less than a match ratio of 0, so it never breaches.
    text = _scrape_until(gateway, 'llmgw_pool_drift_checks_total{a="ref",b="new",outcome="ok"}')
    assert metric(text, "llmgw_pool_drift_exceeded", 'a="ref",b="new"') == 0.0


def test_a_pool_without_logprobs_fails_its_checks(gateway: str) -> None:
    text = _scrape_until(gateway, 'llmgw_pool_drift_checks_total{a="old",b="mute",outcome="failed"}')
    assert 'llmgw_pool_drift_match_ratio{a="old",b="mute"}' not in text
    assert 'llmgw_pool_drift_checks_total{a="old",b="mute",outcome="ok"}' not in text
