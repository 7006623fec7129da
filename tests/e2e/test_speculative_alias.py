"""A speculative alias through the real gateway and two simulators (one speculating, one plain): while
requests pile up on the speculative pool past the switch point, the rest go to the plain pool; the
decisions and the speculative pool's acceptance are exported."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest

from tests.support.prom import metric
from tests.support.stack import Stack

SPEC = '{"method":"ngram","num_speculative_tokens":3}'
STREAMS = 6


def _policy(path: Path, spec: str, plain: str) -> Path:
    path.write_text(
        f"""\
pools:
  - name: spec
    model: m
    endpoints: {{static: ["{spec}"]}}
    speculative: {{method: ngram, num_speculative_tokens: 3}}
    balancing: {{scrape_interval_s: 0.1}}
  - {{name: plain, model: m, endpoints: {{static: ["{plain}"]}}, balancing: {{scrape_interval_s: 0.1}}}}
models:
  - name: chat
    route: {{speculative: {{pool: spec, plain: plain, switch_batch: 2}}}}
    max_tokens: {{default: 200, cap: 200}}
    slo_class: interactive
slo_classes:
  interactive: {{tpot_ms: 100}}
limits: {{backend: memory}}
tenancy: {{auth: disabled}}
"""
    )
    return path


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("specalias")
    # Paced engines (~8 ms steps): a 200-token answer takes ~0.6 s speculating, ~1.6 s plain.
    flags = {"spec": ["--profile", "small", "--speculative-config", SPEC], "plain": ["--profile", "small"]}
    with Stack(tmp) as s:
        sims = {
            name: s.sim(
                "m", *flags[name], "--output-len-mean", "400", "--output-len-sigma", "0", name=f"sim-{name}"
            )
            for name in ("spec", "plain")
        }
        policy = _policy(tmp / "policy.yaml", sims["spec"].url, sims["plain"].url)
        yield s.gateway(policy).url


def _stream(gateway: str, delay: float) -> str:
    time.sleep(delay)
    client = openai.OpenAI(base_url=f"{gateway}/v1", api_key="unused", max_retries=0, timeout=30)
    raw = client.chat.completions.with_raw_response.create(
        model="chat", messages=[{"role": "user", "content": "tell a long story"}], stream=True
    )
    tier = raw.headers["x-llmgw-tier"]
    for _ in raw.parse():
        pass
    return tier


def test_requests_past_the_switch_point_go_to_the_plain_pool(gateway: str) -> None:
    with ThreadPoolExecutor(STREAMS) as ex:
        tiers = list(ex.map(lambda i: _stream(gateway, 0.1 * i), range(STREAMS)))
    # Staggered 100 ms apart and each running ~0.6 s: the speculative pool holds 2 at most before
    # the next arrives, so the first two speculate and later ones find it at its switch point.
    assert tiers[:2] == ["spec", "spec"], tiers
    assert "plain" in tiers, tiers
    text = httpx.get(f"{gateway}/metrics").text
    spec = metric(text, "llmgw_spec_route_decisions_total", 'model="chat",pool="spec",reason="memory_bound"')
    busy = metric(
        text, "llmgw_spec_route_decisions_total", 'model="chat",pool="plain",reason="compute_bound"'
    )
    assert (spec, busy) == (tiers.count("spec"), tiers.count("plain"))
    assert 0 < metric(text, "llmgw_pool_spec_acceptance_ratio", 'pool="spec"') < 1
    assert 1 < metric(text, "llmgw_pool_spec_mean_acceptance_length", 'pool="spec"') <= 4
