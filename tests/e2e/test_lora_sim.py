"""LoRA adapters end to end against the simulator (fast; the real engine: test_conformance_lora.py).

Two `llmgw sim` replicas with `--enable-lora --max-loras 1` and runtime loading, a gateway whose pool
loads adapters on demand, and the openai SDK as the client:
- `alias:adapter` and an adapter's own alias reach the adapter (the answer names it; the base differs);
- an adapter unloaded behind the gateway's back (the engine answers 404) is loaded again and the
  request succeeds on the same replica;
- a priced adapter's requests cost its price, not the pool's;
- bad input: unknown adapter 404, another pool's adapter 400, a load that fails 502 naming it, all in
  the OpenAI error shape; none of them becomes a label value.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
from openai import OpenAI

from eval.sim.adapters import write_adapter
from tests.support.procs import free_port
from tests.support.prom import metric
from tests.support.stack import Stack

PRICE = "{input_per_mtok: 1000, output_per_mtok: 2000}"


@dataclass(frozen=True)
class LoraStack:
    gateway: str
    sims: list[str]
    log: Path

    def client(self) -> OpenAI:
        return OpenAI(base_url=f"{self.gateway}/v1", api_key="unused", max_retries=0, timeout=30)

    def metrics(self) -> str:
        return httpx.get(f"{self.gateway}/metrics", timeout=10).text


def _policy(sims: list[str], adapters: dict[str, Path]) -> str:
    static = ", ".join(f'"{s}"' for s in sims)
    return f"""\
pools:
  - name: base
    model: tiny
    endpoints: {{static: [{static}]}}
    balancing: {{strategy: least_load, scrape_interval_s: 0.2}}
    lora:
      max_loras: 1
      runtime_loading: true
      relist_s: 0.5
      adapters:
        - {{name: support, source: {adapters["support"]}, rank: 8, price: {PRICE}}}
        - {{name: legal, source: {adapters["legal"]}, rank: 8}}
        - {{name: missing, source: /nonexistent/missing, rank: 8}}
  - name: other
    model: tiny
    endpoints: {{static: [{static}]}}
    lora: {{adapters: [{{name: finance, source: /x, rank: 8}}]}}
models:
  - {{name: tiny, route: {{pool: base}}, max_tokens: {{default: 4, cap: 16}}}}
  - {{name: support, route: {{pool: base, adapter: support}}, max_tokens: {{default: 4, cap: 16}}}}
limits: {{backend: memory}}
tenancy: {{auth: disabled}}
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoraStack]:
    tmp = tmp_path_factory.mktemp("lora-sim")
    adapters = {name: write_adapter(tmp / name) for name in ("support", "legal")}
    ports = [free_port(), free_port()]
    sims = [f"http://127.0.0.1:{p}" for p in ports]
    policy = tmp / "policy.yaml"
    policy.write_text(_policy(sims, adapters))
    lora = ["--profile", "instant", "--enable-lora", "--max-loras", "1", "--allow-runtime-lora-updating"]
    with Stack(tmp) as s:
        for i, port in enumerate(ports):
            s.sim("tiny", *lora, port=port, name=f"sim-{i}", ready=False)
        gw = s.gateway(policy, name="gw")
        yield LoraStack(gw.url, sims, gw.log)


def _complete(client: OpenAI, model: str) -> openai.types.Completion:
    return client.completions.create(model=model, prompt="Tell me about tickets", max_tokens=4, temperature=0)


def _listed(url: str) -> set[str]:
    return {m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"] if m.get("parent")}


def test_adapters_answer_by_alias_and_by_alias_colon_adapter(stack: LoraStack) -> None:
    client = stack.client()
    base = _complete(client, "tiny").choices[0].text
    by_alias = _complete(client, "support")
    by_colon = _complete(client, "tiny:support")
    assert by_alias.model == by_colon.model == "support"  # the engine answered as the adapter
    assert by_alias.choices[0].text == by_colon.choices[0].text != base
    assert _complete(client, "tiny:legal").choices[0].text not in (base, by_alias.choices[0].text)
    assert sum("support" in _listed(s) for s in stack.sims) == 1  # loaded once, where it was placed
    text = stack.metrics()
    assert metric(text, "llmgw_adapter_loads_total", 'adapter="support",outcome="loaded"') == 1
    assert metric(text, "llmgw_adapter_requests_total", 'adapter="support",pool="base",status="200"') == 2
    assert metric(text, "llmgw_adapter_tokens_total", 'adapter="support",direction="output"') == 8


def test_an_adapter_unloaded_behind_the_gateways_back_is_loaded_again(stack: LoraStack) -> None:
    client = stack.client()
    _complete(client, "tiny:legal")
    home = next(s for s in stack.sims if "legal" in _listed(s))
    before = stack.metrics()
    r = httpx.post(f"{home}/v1/unload_lora_adapter", json={"lora_name": "legal"})
    assert r.status_code == 200
    assert _complete(client, "tiny:legal").model == "legal"  # 404 -> load again -> answered
    after = stack.metrics()
    key = 'adapter="legal",outcome="loaded"'
    assert (
        metric(after, "llmgw_adapter_loads_total", key)
        == metric(before, "llmgw_adapter_loads_total", key) + 1
    )
    assert "legal" in _listed(home)
    assert metric(after, "llmgw_upstream_errors_total", 'kind="adapter_missing"') >= 1


def test_an_adapters_price_overrides_the_pools(stack: LoraStack) -> None:
    client = stack.client()
    before = metric(stack.metrics(), "llmgw_cost_usd_total", 'pool="base"')
    r = _complete(client, "support")
    assert r.usage is not None
    spent = metric(stack.metrics(), "llmgw_cost_usd_total", 'pool="base"') - before
    expected = (r.usage.prompt_tokens * 1000 + r.usage.completion_tokens * 2000) / 1e6
    assert spent == pytest.approx(expected)


def test_bad_adapters_are_refused_in_the_openai_shape(stack: LoraStack) -> None:
    client = stack.client()
    with pytest.raises(openai.NotFoundError) as nf:
        _complete(client, "tiny:nope")
    assert "pool 'base' serves no adapter 'nope'" in nf.value.message
    with pytest.raises(openai.BadRequestError) as bad:
        _complete(client, "tiny:finance")
    assert "served by pool 'other'" in bad.value.message and bad.value.code == "adapter_not_on_pool"
    with pytest.raises(openai.APIStatusError) as failed:
        _complete(client, "tiny:missing")
    assert failed.value.status_code == 502 and failed.value.code == "adapter_load_failed"
    assert "could not load the adapter 'missing'" in failed.value.message
    # Streams get the same refusals before any byte.
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="tiny:nope", messages=[{"role": "user", "content": "x"}], stream=True
        )
    text = stack.metrics()
    # A refused name is never a label value (`finance` has its series on its own pool only).
    assert 'adapter="nope"' not in text and 'adapter="finance",pool="base"' not in text
    assert metric(text, "llmgw_adapter_loads_total", 'adapter="missing",outcome="failed"') >= 1


def test_a_failing_load_is_tried_once_per_replica_per_backoff_period(stack: LoraStack) -> None:
    """Issue 39: 100 requests for an adapter that cannot load made 46 load attempts. With the failure
    remembered per replica (5 s backoff by default), 40 requests in a second cost at most one attempt per
    replica, and every one still gets the 502 naming the adapter."""
    client = stack.client()
    before = metric(stack.metrics(), "llmgw_adapter_loads_total", 'adapter="missing",outcome="failed"')
    for _ in range(40):
        with pytest.raises(openai.APIStatusError) as failed:
            _complete(client, "tiny:missing")
        assert failed.value.status_code == 502 and failed.value.code == "adapter_load_failed"
    text = stack.metrics()
    attempts = metric(text, "llmgw_adapter_loads_total", 'adapter="missing",outcome="failed"') - before
    assert attempts <= len(stack.sims), attempts
    assert metric(text, "llmgw_adapter_loads_total", 'adapter="missing",outcome="backoff"') >= 40 - len(
        stack.sims
    )
