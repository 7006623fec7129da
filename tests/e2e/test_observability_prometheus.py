"""Dashboards and alerts against a real Prometheus scraping a running gateway and its simulators.

The openai SDK drives a scripted run: streams to an alias whose pool has one normal and one slowed
replica (round robin, so exactly half of the streams miss the 300 ms TTFT objective), cascades that
escalate (two priced calls each, all but the first: the cost guard), a pool that is down (5xx), a
pool with no replica (held, then refused), a speculative pool (ngram drafts), a LoRA pool loading an
adapter on demand, a key over its request budget (429), feedback, including a rating from another org
(404), and the drift canary between two pools. Then every panel
query of the chart's dashboards and every alert expression must return at least one series. Alert
thresholds are turned into `bool` comparisons (so healthy series count) and `offset 1h` into
`offset 10s` (the run lasts seconds, not hours); metric names and labels are queried unchanged.
Goodput and cost must have the values the script implies, and the speculative pool's acceptance
figures the values its engine's counters imply.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
import yaml

from eval.sim.adapters import write_adapter
from gateway.tenancy.keys import generate_key, hash_key
from tests.support.chart import CHART
from tests.support.poll import wait_until
from tests.support.procs import free_port
from tests.support.prom import metric
from tests.support.prometheus import Prom, every_value
from tests.support.stack import Stack

STREAMS = 20  # half on the slowed replica
HELD = 6  # requests at once on the pool that runs one at a time
CASCADES = 4
PRICE = (2.0, 6.0)  # USD per million input / output tokens, every priced pool but `cheap`
# The cascade's cheap tier costs a quarter of that: the cost guard (cost_budget 1.0: never more than
# strong-only) can afford an escalation only out of what cheap answers saved (router/cost_guard.py's
# ledger), so with equal prices it would never escalate.
CHEAP_DIVISOR = 4
RATE = "1m"
SPEC_CONFIG = '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3,"prompt_lookup_min":1}'
SPEC_REQUESTS = 4
SCRAPES = {"timeout": 60.0, "interval": 0.5}  # Prometheus scrapes every second or so


@dataclass(frozen=True)
class ObsStack:
    gateway: str
    keys: dict[str, str]  # acme, globex, tiny
    prom: Prom
    ids: list[str]  # request ids of the streams
    spent: float  # USD the streams' usage costs at PRICE
    cascade_spent: float  # USD the cascades' summed usage costs at PRICE
    spec_sim: str  # the speculative pool's simulator


def _policy(sims: dict[str, str], keys: dict[str, str], dead: str, adapter: Path) -> str:
    price = f"{{input_per_mtok: {PRICE[0]}, output_per_mtok: {PRICE[1]}}}"
    cheap_price = (
        f"{{input_per_mtok: {PRICE[0] / CHEAP_DIVISOR}, output_per_mtok: {PRICE[1] / CHEAP_DIVISOR}}}"
    )
    timeouts = "{connect_s: 1, first_token_s: 10, total_s: 30}"
    return f"""\
pools:
  - name: mixed
    model: m
    endpoints: {{static: ["{sims["fast"]}", "{sims["slowed"]}"]}}
    balancing: {{strategy: round_robin}}
    price: {price}
    timeouts: {timeouts}
  - {{name: cheap, model: m, endpoints: {{static: ["{sims["fast"]}"]}}, price: {cheap_price},
     timeouts: {timeouts}}}
  - {{name: strong, model: m, endpoints: {{static: ["{sims["strong"]}"]}}, price: {price},
     timeouts: {timeouts}}}
  - {{name: down, model: m, endpoints: {{static: ["{dead}"]}}, timeouts: {timeouts}}}
  - name: cold
    model: m
    endpoints: {{dns: {{name: cold.invalid., port: 8000}}}}
    admission: {{cold_start_timeout_s: 0.2}}
  # One request at a time on the slowed engine: a few at once wait in the hold queue (the fairness panels).
  - name: held
    model: m
    endpoints: {{static: ["{sims["slowed"]}"]}}
    saturation: {{inflight: 1}}
    admission: {{max_queued: 16, max_wait_s: 30}}
    timeouts: {timeouts}
  - name: spec
    model: m
    endpoints: {{static: ["{sims["spec"]}"]}}
    # A window longer than the run: the acceptance panels still have series when they are queried.
    speculative: {{method: ngram, num_speculative_tokens: 3, acceptance_window_s: 600}}
    timeouts: {timeouts}
  - name: lora
    model: m
    endpoints: {{static: ["{sims["lora"]}"]}}
    lora: {{runtime_loading: true, adapters: [{{name: support, source: {adapter}, rank: 8}}]}}
    timeouts: {timeouts}
models:
  - {{name: support, route: {{pool: lora, adapter: support}}, max_tokens: {{default: 3, cap: 8}}}}
  - {{name: chat, route: {{pool: mixed}}, max_tokens: {{default: 3, cap: 8}}, slo_class: interactive}}
  - {{name: down, route: {{pool: down}}, slo_class: interactive}}
  - {{name: cold, route: {{pool: cold}}}}
  - {{name: held, route: {{pool: held}}, max_tokens: {{default: 1, cap: 1}}}}
  - {{name: plain, route: {{pool: cheap}}, max_tokens: {{default: 3, cap: 8}}, cache: {{ttl_s: 600}}}}
  - name: spec
    route: {{speculative: {{pool: spec, plain: cheap, switch_batch: 8}}}}
    max_tokens: {{default: 24, cap: 32}}
  - name: auto
    max_tokens: {{default: 4, cap: 8}}
    slo_class: batch
    route:
      policy:
        tiers: [{{pool: cheap}}, {{pool: strong}}]
        cascade:
          # exp(mean logprob) never reaches 1: every cheap answer is rejected; the cost guard
          # escalates all but the first (a cold start has saved nothing yet).
          scorers: [{{kind: logprob, accept_threshold: 1.0}}]
          max_escalations: 1
          cost_budget: 1.0  # exports the cost guard's gauges (the alert on escalation rate)
        explore: {{rate: 1.0, tier: standard}}  # exports the live estimate's gauges (the dashboard)
slo_classes:
  interactive: {{ttft_ms: 300}}
  batch: {{e2e_ms: 60000}}
drift:  # the drift canary's gauges (its dashboard panels and alert); the two simulators agree
  every_s: 1
  max_tokens: 2
  prompts: ["drift canary"]
  pairs: [{{a: cheap, b: strong}}]
limits:
  backend: redis
tenancy:
  keys:
    - {{id: acme, sha256: {hash_key(keys["acme"])}, org: acme, app: web}}
    - {{id: globex, sha256: {hash_key(keys["globex"])}, org: globex, app: web}}
    - {{id: tiny, sha256: {hash_key(keys["tiny"])}, org: globex, app: batch, limits: {{requests_per_min: 1}}}}
"""


@pytest.fixture(scope="module")
def obs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObsStack]:
    tmp = tmp_path_factory.mktemp("obs")
    keys = {name: generate_key() for name in ("acme", "globex", "tiny")}
    adapter = write_adapter(tmp / "support")
    extra = {
        "fast": ["--profile", "instant"],
        # Every engine step takes 600 ms: no first token before 0.6 s, twice the objective.
        "slowed": ["--profile", "instant", "--step-base-ms", "600"],
        "strong": ["--profile", "instant"],
        # The speculative pool's engine: vLLM's spec-decode counters (the acceptance panels).
        "spec": ["--profile", "instant", "--speculative-config", SPEC_CONFIG],
        # The LoRA pool's engine: the gateway loads the adapter on it (the adapter panels).
        "lora": ["--profile", "instant", "--enable-lora", "--allow-runtime-lora-updating"],
    }
    with Stack(tmp) as s:
        redis = s.redis()
        sims = {name: s.sim("m", *args, name=f"sim-{name}", ready=False) for name, args in extra.items()}
        policy = tmp / "policy.yaml"
        urls = {name: sim.url for name, sim in sims.items()}
        policy.write_text(_policy(urls, keys, f"http://127.0.0.1:{free_port()}", adapter))
        env = {"LLMGW_REDIS_URL": redis.url}  # the limiter on Redis: its health series exist
        gw = s.gateway(policy, env=env)
        targets = {"gateway": [gw.address], "vllm": [sim.address for sim in sims.values()]}
        prom = s.prometheus(targets)
        yield _drive(gw.url, keys, prom, urls["spec"])


def _client(gateway: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway}/v1", api_key=key, max_retries=0, timeout=30)


def _stream_once(client: openai.OpenAI) -> tuple[str, dict[str, int]]:
    raw = client.chat.completions.with_raw_response.create(
        model="chat",
        messages=[{"role": "user", "content": "hello there"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    usage: dict[str, int] = {}
    for chunk in raw.parse():
        if chunk.usage is not None:
            usage = {"in": chunk.usage.prompt_tokens, "out": chunk.usage.completion_tokens}
    return raw.headers["x-request-id"], usage


def _drive(gateway: str, keys: dict[str, str], prom: Prom, spec_sim: str) -> ObsStack:
    """The scripted run; what it implies is checked by the tests below."""
    acme = _client(gateway, keys["acme"])
    wait_until(prom.targets_up, "every target scraped", **SCRAPES)
    # The hold queue's fairness series: requests waiting behind one another on `held` while Prometheus
    # scrapes (from an org whose cost and accepted outputs no test counts), before anything else runs.
    globex = _client(gateway, keys["globex"])
    with ThreadPoolExecutor(HELD) as ex:
        waiting = [
            ex.submit(
                globex.chat.completions.create, model="held", messages=[{"role": "user", "content": f"h{i}"}]
            )
            for i in range(HELD)
        ]
        wait_until(lambda: prom.query("llmgw_pool_tenant_share"), "a backlogged tenant scraped", **SCRAPES)
        for fut in waiting:
            fut.result()
    with ThreadPoolExecutor(STREAMS) as ex:
        streamed = list(ex.map(lambda _: _stream_once(acme), range(STREAMS)))
    cascades = [
        acme.chat.completions.create(model="auto", messages=[{"role": "user", "content": f"q{i}"}])
        for i in range(CASCADES)
    ]
    for alias in ("down", "down", "cold"):
        with pytest.raises(openai.APIStatusError):
            acme.chat.completions.create(model=alias, messages=[{"role": "user", "content": "x"}])
    # The cache panels: a deterministic request twice (a miss, then a hit), from an org whose cost
    # and accepted outputs no test counts.
    for _ in range(2):
        globex.chat.completions.create(
            model="plain", messages=[{"role": "user", "content": "c"}], temperature=0
        )
        time.sleep(0.2)  # the write happens after the answer went out
    # The speculative alias, from an org whose cost no test counts: one at a time, so its batch stays
    # under the switch point and every request drafts on the speculative pool (the acceptance panels).
    for i in range(SPEC_REQUESTS):
        globex.chat.completions.create(model="spec", messages=[{"role": "user", "content": f"s{i}"}])
    # The adapter alias, streamed (its TTFT panel), from an org whose cost no test counts.
    for _ in range(2):
        for _chunk in globex.chat.completions.create(
            model="support", messages=[{"role": "user", "content": "t"}], stream=True
        ):
            pass
    tiny = _client(gateway, keys["tiny"])
    with pytest.raises(openai.RateLimitError):
        for _ in range(3):
            tiny.chat.completions.create(model="plain", messages=[{"role": "user", "content": "x"}])
    spent = sum(u["in"] * PRICE[0] + u["out"] * PRICE[1] for _, u in streamed) / 1e6
    cascade_spent = (
        sum(
            c.usage.prompt_tokens * PRICE[0] + c.usage.completion_tokens * PRICE[1]
            for c in cascades
            if c.usage
        )
        / 1e6
    )
    # One rating (accepted), so the feedback panels have a series whatever order the tests run in.
    rated = httpx.post(
        f"{gateway}/v1/feedback",
        json={"request_id": streamed[1][0], "accepted": True, "score": 0.9},
        headers={"authorization": f"Bearer {keys['acme']}"},
    )
    assert rated.status_code == 200, rated.text
    # Every target scraped after the run ended: the counters Prometheus holds are final.
    ended = time.time()
    wait_until(
        lambda: (stamps := prom.query("timestamp(up)")) and min(float(r["value"][1]) for r in stamps) > ended,
        "a scrape of every target after the run",
        **SCRAPES,
    )
    return ObsStack(gateway, keys, prom, [rid for rid, _ in streamed], spent, cascade_spent, spec_sim)


def test_goodput_drops_by_the_share_sent_to_the_slowed_replica(obs: ObsStack) -> None:
    met = obs.prom.value('sum(llmgw_slo_requests_total{model="chat",pool="mixed",outcome="met"})')
    missed = obs.prom.value('sum(llmgw_slo_requests_total{model="chat",pool="mixed",outcome="missed"})')
    assert (met, missed) == (STREAMS / 2, STREAMS / 2)
    # The pool that is down: its 5xx answers miss.
    assert obs.prom.value('sum(llmgw_slo_requests_total{model="down",outcome="missed"})') == 2
    # Cascades meet their generous end-to-end class.
    assert obs.prom.value('sum(llmgw_slo_requests_total{model="auto",outcome="met"})') == CASCADES


def test_cost_is_usage_at_the_pool_prices(obs: ObsStack) -> None:
    spent = obs.prom.value('sum(llmgw_cost_usd_total{org="acme",pool="mixed"})')
    assert spent == pytest.approx(obs.spent, rel=1e-9)
    # Cascades: every call, each on its pool; the client's usage is the sum of the calls (the cheap
    # pool's price is PRICE / CHEAP_DIVISOR, so its cost at PRICE is that many times its own).
    cheap = obs.prom.value('sum(llmgw_cost_usd_total{org="acme",pool="cheap"})')
    strong = obs.prom.value('sum(llmgw_cost_usd_total{org="acme",pool="strong"})')
    assert cheap and strong
    assert cheap * CHEAP_DIVISOR + strong == pytest.approx(obs.cascade_spent, rel=1e-9)
    accepted = obs.prom.value('sum(llmgw_accepted_outputs_total{org="acme"})')
    assert accepted == STREAMS + CASCADES
    # The unpriced pools cost nothing that is counted, and failures are not accepted outputs.
    assert obs.prom.query('llmgw_cost_usd_total{pool=~"down|cold"}') == []


def test_feedback_only_from_the_requests_own_org(obs: ObsStack) -> None:
    rid = obs.ids[0]
    url = f"{obs.gateway}/v1/feedback"

    def rate(key: str, accepted: bool) -> httpx.Response:
        headers = {"authorization": f"Bearer {obs.keys[key]}"}
        return httpx.post(url, json={"request_id": rid, "accepted": accepted}, headers=headers)

    assert httpx.post(url, json={"request_id": rid, "accepted": False}).status_code == 401
    other = rate("globex", False)
    assert other.status_code == 404, other.text
    assert rate("acme", False).status_code == 200
    assert rate("acme", True).status_code == 409
    text = httpx.get(f"{obs.gateway}/metrics").text
    assert metric(text, "llmgw_rejected_outputs_total", 'org="acme"') == 1
    assert metric(text, "llmgw_rejected_outputs_total", 'org="globex"') == 0
    kept = STREAMS + CASCADES - 1
    total = metric(text, "llmgw_cost_usd_total", 'org="acme"')
    per = metric(text, "llmgw_cost_per_accepted_output_usd", 'org="acme"')
    assert per == pytest.approx(total / kept)


def test_the_gateways_acceptance_figures_are_the_engines_counters(obs: ObsStack) -> None:
    # The pool's window (600 s) spans the whole run and the engine started at zero, so the window's
    # increase is the engine's whole count.
    engine = httpx.get(f"{obs.spec_sim}/metrics").text
    drafts = metric(engine, "vllm:spec_decode_num_drafts_total")
    proposed = metric(engine, "vllm:spec_decode_num_draft_tokens_total")
    accepted = metric(engine, "vllm:spec_decode_num_accepted_tokens_total")
    assert drafts > 0 and proposed >= drafts
    gateway = httpx.get(f"{obs.gateway}/metrics").text
    pool = 'pool="spec"'
    assert metric(gateway, "llmgw_pool_spec_window_draft_tokens", pool) == proposed
    assert metric(gateway, "llmgw_pool_spec_acceptance_ratio", pool) == pytest.approx(accepted / proposed)
    length = metric(gateway, "llmgw_pool_spec_mean_acceptance_length", pool)
    assert length == pytest.approx(1 + accepted / drafts)
    # Pools without speculation have no figures (0/0 is not an acceptance of 0).
    assert 'llmgw_pool_spec_acceptance_ratio{pool="mixed"}' not in gateway


def _queries() -> list[tuple[str, str]]:
    """(where, expr) of every dashboard panel target and every alert rule."""
    out: list[tuple[str, str]] = []
    for path in sorted((CHART / "files" / "dashboards").glob("*.json")):
        dash = json.loads(path.read_text())
        panels = [p for row in dash.get("panels", []) for p in [row, *row.get("panels", [])]]
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append((f"{path.name}: {p.get('title')}", t["expr"]))
    for path in sorted((CHART / "files" / "alerts").glob("*.yaml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                out.append((f"{path.name}: {rule.get('alert') or rule.get('record')}", rule["expr"]))
    return out


# Gauges exported only while a state lasts (a tenant waiting in a hold queue): gone, and so stale, by the
# time the queries run; asked for over the run instead, so they must still have been exported.
_WHILE_IT_LASTS = re.compile(r"llmgw_pool_tenant_(?:due_)?share(?:\{[^}]*\})?")


# Series exported only where the spend ledger (PostgreSQL, policy `ledger`) runs or an org has a dollar
# budget, neither of which this run configures (issue 43). A query over them may come back empty only
# while Prometheus holds no series of that name at all: once the run produces them, it must answer.
_ONLY_WITH_LEDGER_OR_BUDGETS = re.compile(r"\bllmgw_(?:ledger_[a-z_]+|budget_used_ratio)\b")


def _never_produced(expr: str, prom: Prom) -> bool:
    return any(not prom.query(name) for name in set(_ONLY_WITH_LEDGER_OR_BUDGETS.findall(expr)))


def _runnable(expr: str) -> str:
    expr = _WHILE_IT_LASTS.sub(lambda m: f"last_over_time({m.group(0)}[10m])", expr)
    expr = expr.replace("$__rate_interval", RATE).replace('=~"$namespace"', '=~".*"')
    expr = re.sub(r"\$\{?\w+\}?", ".*", expr)
    return every_value(re.sub(r"offset\s+\d+[smhd]", "offset 10s", expr))


def test_every_dashboard_query_and_alert_expression_returns_series(obs: ObsStack) -> None:
    queries = _queries()
    assert len(queries) > 30
    # `offset 10s` needs ten seconds of history past the run's first samples.
    wait_until(lambda: obs.prom.query("llmgw_requests_total offset 15s"), "15 s of history", **SCRAPES)
    # A query on a metric nobody exports must come back empty, or this check proves nothing.
    assert obs.prom.query(_runnable("sum(rate(llmgw_not_exported_total[$__rate_interval])) > 1")) == []
    empty = [
        (where, expr)
        for where, expr in queries
        if not obs.prom.query(_runnable(expr)) and not _never_produced(expr, obs.prom)
    ]
    assert not empty, "queries with no series:\n" + "\n".join(f"{w}: {e}" for w, e in empty)
