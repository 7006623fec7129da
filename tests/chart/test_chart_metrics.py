"""KEDA triggers, alerts and dashboards query series the system really exports.

A real gateway runs the production scenario's rendered policy (endpoints pointed at simulator
replicas serving the same model names, plus one pool with no replica at all), real Redis behind the
limiter, the spend ledger on (`postgresql.mode: external`: a real PostgreSQL, its URL read from a file
as the chart mounts it), and serves a few requests; its /metrics and the simulators' /metrics (vLLM's
names) are the ground truth, together with shared/reference/vllm.md for vLLM's names.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
import yaml

from gateway.config_pool import Speculative
from tests.support.chart import (
    CHART,
    ROOT,
    SCENARIOS,
    SHARED,
    Doc,
    helm_template,
    kustomize,
    of_kind,
    policy_text,
)
from tests.support.postgres import PG_BIN, PostgresServer
from tests.support.procs import free_port
from tests.support.redis_server import REDIS_SERVER
from tests.support.stack import Stack

# Labels Prometheus (operator) attaches to every scraped series: selectors may use them freely.
TARGET_LABELS = {"namespace", "service", "pod", "job", "instance", "endpoint", "container"}
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "by", "without", "or", "and", "unless", "on", "ignoring",
    "group_left", "group_right", "bool", "offset", "rate", "irate", "increase", "vector",
    "histogram_quantile", "label_values", "absent", "clamp_min", "clamp_max", "topk", "bottomk", "time",
    "delta", "deriv",
}  # fmt: skip
SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}")
MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"')
HIST_SUFFIX = re.compile(r"_(bucket|sum|count)$")


@dataclass(frozen=True)
class Exposition:
    """Families (TYPE lines) and, per sample name, the label keys and label sets seen."""

    families: dict[str, str]
    samples: dict[str, list[dict[str, str]]]

    @classmethod
    def parse(cls, text: str) -> Exposition:
        families: dict[str, str] = {}
        samples: dict[str, list[dict[str, str]]] = {}
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(" ", 3)
                families[name] = kind
            elif line and not line.startswith("#"):
                m = re.match(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? ", line)
                assert m, line
                labels = dict(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
                samples.setdefault(m.group(1), []).append(labels)
        return cls(families, samples)

    def has(self, name: str) -> bool:
        if name in self.families or name in self.samples:
            return True
        base = HIST_SUFFIX.sub("", name)
        return self.families.get(base) in ("histogram", "summary")


def selectors(query: str) -> list[tuple[str, dict[str, tuple[str, str]]]]:
    """(metric, {label: (op, value)}) of every braced selector in a PromQL query."""
    return [
        (m.group(1), {k: (op, v) for k, op, v in MATCHER.findall(m.group(2))})
        for m in SELECTOR.finditer(query)
    ]


def metric_names(query: str) -> set[str]:
    """Every metric name in a PromQL query, braced or bare."""
    q = re.sub(r'"(?:[^"\\]|\\.)*"', '""', query)
    q = re.sub(r"\{[^}]*\}", "", q)
    q = re.sub(r"\[[^\]]*\]", "", q)
    q = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", q)
    q = re.sub(r"\blabel_values\(\s*([^,)]+)(,[^)]*)?\)", r"\1", q)  # Grafana: (metric, label)
    q = re.sub(r"\b\d+(\.\d+)?(ms|[smhdwy])?\b", "", q)  # numbers and durations (offset 1h)
    names = set()
    for m in re.finditer(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*(\()?", q):
        word, call = m.group(1), m.group(2)
        if not call and word not in PROMQL_WORDS:
            names.add(word)
    return names


def vllm_reference_names() -> set[str]:
    text = (SHARED / "reference" / "vllm.md").read_text(encoding="utf-8")
    return set(re.findall(r"`(vllm:[a-z_:]+)`", text))


@dataclass(frozen=True)
class Live:
    gateway: Exposition
    sim: Exposition
    served: dict[str, str]  # pool -> served model name
    gateway_url: str
    aliases: list[str]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    if REDIS_SERVER is None or shutil.which("redis-server") is None:
        pytest.fail("redis-server is missing: apt-get install -y redis-server (.ci/run installs it)")
    if PG_BIN is None:
        pytest.fail("PostgreSQL is missing: apt-get install -y postgresql (.ci/run installs it)")
    tmp = tmp_path_factory.mktemp("live")
    # The spend ledger on: its series are among those the alerts and dashboards query.
    ledger = {"postgresql": {"mode": "external", "external": {"existingSecret": "llm-gateway-db"}}}
    r = helm_template(ledger, scenario="production", tmp=tmp)
    assert r.ok, r.stderr
    policy = yaml.safe_load(policy_text(r.docs))
    assert policy["ledger"] == {"enabled": True}
    served = {p["name"]: p["model"] for p in policy["pools"]}
    ports = {name: free_port() for name in served}
    for pool in policy["pools"]:
        pool["endpoints"] = {"static": [f"http://127.0.0.1:{ports[pool['name']]}"]}
        pool.pop("admission", None)
    # A pool with no replica at all (what KEDA sees at zero): its demand gauge must still be exported.
    policy["pools"].append(
        {"name": "cold", "model": "cold", "endpoints": {"dns": {"name": "cold.invalid.", "port": 8000}}}
    )
    policy["tenancy"]["auth"] = "disabled"
    config = tmp / "config.yaml"
    config.write_text(yaml.safe_dump(policy))
    with PostgresServer(tmp / "pg") as pg, Stack(tmp) as s:
        # The chart's way: the URL in a file (a mounted Secret key, LLMGW_DATABASE_URL_FILE).
        url_file = tmp / "database-url"
        url_file.write_text(pg.create_database("ledger") + "\n")
        redis = s.redis()
        for p in ("small", "large"):
            s.sim(
                served[p], "--profile", "instant", *_speculative_args(policy, p), port=ports[p], ready=False
            )
        s.ready()
        gw_port = free_port()
        # The chart's way: the policy and port from the environment (LLMGW_CONFIG, LLMGW_PORT).
        env = {
            "LLMGW_REDIS_URL": redis.url,
            "LLMGW_PORT": str(gw_port),
            "LLMGW_CONFIG": str(config),
            "LLMGW_DATABASE_URL_FILE": str(url_file),
        }
        s.spawn(["serve"], "/readyz", name="gateway", port=gw_port, env={"LLMGW_DRAIN_DELAY_S": "0", **env})
        url = f"http://127.0.0.1:{gw_port}"
        aliases = [m["name"] for m in policy["models"]]
        with httpx.Client(base_url=url, timeout=30) as client:
            for alias in aliases:
                for stream in (False, True):
                    body = {
                        "model": alias,
                        "messages": [{"role": "user", "content": "hi"}],
                        "max_tokens": 8,
                        "stream": stream,
                    }
                    resp = client.post("/v1/chat/completions", json=body)
                    assert resp.status_code == 200, resp.text
            gateway = Exposition.parse(client.get("/metrics").text)
        sim = Exposition.parse(httpx.get(f"http://127.0.0.1:{ports['small']}/metrics").text)
        yield Live(gateway, sim, served, url, aliases)


def _speculative_args(policy: dict[str, object], name: str) -> list[str]:
    """The simulator gets the `--speculative-config` the chart gives the pool's engine."""
    pools = policy["pools"]
    assert isinstance(pools, list)
    spec = next(p for p in pools if p["name"] == name).get("speculative")
    if not spec:
        return []
    return ["--speculative-config", json.dumps(Speculative.model_validate(spec).engine_config())]


def _scaled_objects() -> list[tuple[str, list[Doc]]]:
    out = []
    for scenario in SCENARIOS:
        r = helm_template(scenario=scenario)
        assert r.ok, r.stderr
        if of_kind(r.docs, "ScaledObject"):
            out.append((f"chart:{scenario}", r.docs))
    docs = kustomize("prod")
    out.append(("kustomize:prod", docs))
    return out


def test_keda_queries_use_exported_names_and_labels(live: Live) -> None:
    sources = _scaled_objects()
    assert {s for s, _ in sources} >= {"chart:production", "chart:scale-to-zero", "kustomize:prod"}
    vllm_ref = vllm_reference_names()
    for source, docs in sources:
        policy = yaml.safe_load(policy_text(docs))
        pools = {p["name"] for p in policy["pools"]}
        deployments = {d["metadata"]["name"]: d for d in of_kind(docs, "Deployment")}
        for so in of_kind(docs, "ScaledObject"):
            where = f"{source} {so['metadata']['name']}"
            target = deployments[so["spec"]["scaleTargetRef"]["name"]]
            args = target["spec"]["template"]["spec"]["containers"][0]["args"]
            served = next(a.split("=", 1)[1] for a in args if a.startswith("--served-model-name="))
            queries = [t["metadata"]["query"] for t in so["spec"]["triggers"] if t["type"] == "prometheus"]
            used = [s for q in queries for s in selectors(q)]
            assert {name for name, _ in used} >= {
                "llmgw_pool_queued_requests",
                "vllm:num_requests_waiting",
                "vllm:kv_cache_usage_perc",
            }, f"{where}: missing the demand, queue or KV trigger"
            for q in queries:
                assert metric_names(q) == {name for name, _ in selectors(q)}, (
                    f"{where}: unlabelled series in {q}"
                )
            for name, matchers in used:
                if name.startswith("llmgw_"):
                    assert live.gateway.has(name), f"{where}: the gateway does not export {name}"
                    seen = set().union(*(set(s) for s in live.gateway.samples[name]))
                    assert set(matchers) - TARGET_LABELS <= seen, (
                        f"{where}: {name} has no label {set(matchers) - seen}"
                    )
                    assert matchers["pool"][1] in pools, (
                        f"{where}: {name} pool={matchers['pool'][1]} is no pool"
                    )
                else:
                    assert name in vllm_ref, (
                        f"{where}: {name} is not a vLLM metric (shared/reference/vllm.md)"
                    )
                    assert live.sim.has(name), (
                        f"{where}: the vLLM-compatible simulator does not export {name}"
                    )
                    seen = set().union(*(set(s) for s in live.sim.samples[name]))
                    assert "model" not in matchers, f"{where}: vLLM labels series model_name, not model"
                    assert matchers.get("model_name") == ("=", served), (
                        f"{where}: model_name must be {served!r}"
                    )
                    assert set(matchers) - TARGET_LABELS <= seen, (
                        f"{where}: {name} has no label {set(matchers) - seen}"
                    )


def test_demand_gauge_exists_for_a_pool_without_replicas(live: Live) -> None:
    pools = {s["pool"] for s in live.gateway.samples["llmgw_pool_queued_requests"]}
    assert pools == {*live.served, "cold"}


def test_gateway_series_carry_the_pool_labels_keda_selects(live: Live) -> None:
    pools = {s.get("pool") for s in live.gateway.samples["llmgw_requests_total"]}
    assert {"small", "large"} <= pools
    models = {s["model_name"] for s in live.sim.samples["vllm:num_requests_waiting"]}
    assert models == {live.served["small"]}


def _rule_and_panel_queries() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for path in sorted((CHART / "files" / "alerts").glob("*.yaml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            out += [(f"{path.name}:{r['alert']}", r["expr"]) for r in group["rules"]]
    for path in sorted((CHART / "files" / "dashboards").glob("*.json")):
        dash = json.loads(path.read_text())
        for panel in dash["panels"]:
            out += [(f"{path.name}:{panel['title']}", t["expr"]) for t in panel.get("targets", [])]
        for var in dash["templating"]["list"]:
            if var["type"] == "query":
                out.append((f"{path.name}:${var['name']}", var["definition"]))
    return out


def test_alerts_and_dashboards_query_exported_metrics(live: Live) -> None:
    vllm_ref = vllm_reference_names()
    queries = _rule_and_panel_queries()
    assert len(queries) > 40
    missing = []
    for where, query in queries:
        names = metric_names(query)
        assert names, f"{where}: no metric in {query!r}"
        for name in names:
            ok = (
                live.gateway.has(name) if name.startswith("llmgw_") else HIST_SUFFIX.sub("", name) in vllm_ref
            )
            if not ok:
                missing.append(f"{where}: {name}")
    assert not missing, "queries over metrics nobody exports:\n" + "\n".join(missing)


def test_metric_name_extraction_can_fail() -> None:
    q = 'sum by (model) (rate(llmgw_requests_totl{code=~"5.."}[5m])) / sum(vllm:num_requests_wating)'
    assert metric_names(q) == {"llmgw_requests_totl", "vllm:num_requests_wating"}
    assert selectors(q) == [("llmgw_requests_totl", {"code": ("=~", "5..")})]


def test_helm_test_script_completes_through_a_real_gateway(live: Live) -> None:
    script = CHART / "files" / "tests" / "smoke.py"
    env = {**os.environ, "GATEWAY_URL": live.gateway_url, "MODEL": live.aliases[0], "DEADLINE_S": "10"}
    ok = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout.startswith("OK:"), ok.stdout + ok.stderr
    env["MODEL"] = "no-such-model"
    bad = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "FAIL: HTTP 404" in bad.stderr, bad.stdout + bad.stderr


def test_root_is_the_checkout() -> None:
    assert (ROOT / "helm" / "llm-gateway" / "Chart.yaml").is_file()
