"""Properties of what the chart (every ci scenario, both Helm majors) and the kustomize overlays render."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.chart import (
    CHART,
    HELMS,
    OVERLAYS,
    ROOT,
    SCENARIOS,
    SHARED,
    Doc,
    helm_template,
    kustomize,
    of_kind,
    pod_specs,
    policy_text,
    selector_matches,
    tool,
)

SOURCES = [f"chart:{s}" for s in SCENARIOS] + [f"kustomize:{o}" for o in OVERLAYS]


def render(source: str) -> list[Doc]:
    kind, name = source.split(":")
    if kind == "kustomize":
        return kustomize(name)
    r = helm_template(scenario=name)
    assert r.ok, r.stderr
    return r.docs


@pytest.fixture(scope="module", params=SOURCES)
def docs(request: pytest.FixtureRequest) -> list[Doc]:
    return render(request.param)


def test_scenarios_and_overlays_exist() -> None:
    assert {"minimal", "production", "scale-to-zero"} <= set(SCENARIOS)
    assert {"dev", "prod"} <= set(OVERLAYS)


@pytest.mark.parametrize("helm", HELMS)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_both_helm_majors_render_the_same_objects(helm: str, scenario: str) -> None:
    r = helm_template(scenario=scenario, helm=helm)
    assert r.ok, r.stderr
    assert sorted((d["kind"], d["metadata"]["name"]) for d in r.docs) == sorted(
        (d["kind"], d["metadata"]["name"]) for d in render(f"chart:{scenario}")
    )


def test_every_pod_is_locked_down(docs: list[Doc]) -> None:
    pods = list(pod_specs(docs))
    assert pods
    for name, _, spec in pods:
        psc = spec.get("securityContext") or {}
        assert psc.get("runAsNonRoot") is True, f"{name}: pod runAsNonRoot"
        assert (psc.get("seccompProfile") or {}).get("type") == "RuntimeDefault", f"{name}: pod seccomp"
        if spec.get("automountServiceAccountToken") is not False:
            # Only the gateway, and only to watch EndpointSlices through a Role bound to its account.
            assert name.startswith("Deployment/") and spec.get("serviceAccountName"), f"{name}: token mounted"
            assert _may_watch_endpointslices(docs, spec["serviceAccountName"]), f"{name}: token without a use"
        for c in spec.get("initContainers", []) + spec["containers"]:
            where = f"{name} container {c['name']}"
            sc = c.get("securityContext") or {}
            assert sc.get("allowPrivilegeEscalation") is False, f"{where}: allowPrivilegeEscalation"
            assert sc.get("readOnlyRootFilesystem") is True, f"{where}: readOnlyRootFilesystem"
            assert "ALL" in (sc.get("capabilities") or {}).get("drop", []), f"{where}: capabilities"
            assert sc.get("privileged") is not True, f"{where}: privileged"
            assert (c.get("resources") or {}).get("requests"), f"{where}: resource requests"
            assert "memory" in (c.get("resources") or {}).get("limits", {}), f"{where}: memory limit"


def _may_watch_endpointslices(docs: list[Doc], account: str) -> bool:
    roles = {
        r["metadata"]["name"]
        for r in of_kind(docs, "Role")
        if any(
            "discovery.k8s.io" in rule["apiGroups"]
            and rule["resources"] == ["endpointslices"]
            and set(rule["verbs"]) == {"list", "watch"}
            for rule in r["rules"]
        )
    }
    return any(
        b["roleRef"]["name"] in roles and any(s["name"] == account for s in b["subjects"])
        for b in of_kind(docs, "RoleBinding")
    )


def _env(container: Doc) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def test_gateway_probes_and_graceful_shutdown(docs: list[Doc]) -> None:
    [gw] = [
        d
        for d in of_kind(docs, "Deployment")
        if d["metadata"]["labels"]["app.kubernetes.io/component"] == "gateway"
    ]
    spec = gw["spec"]["template"]["spec"]
    [c] = spec["containers"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    env = _env(c)
    assert env["LLMGW_HOST"] == "0.0.0.0" and env["LLMGW_CONFIG"] == "/etc/llmgw/config.yaml"
    names = {e["name"] for e in c["env"]}
    # Redis is named by a URL, or (sentinel mode) by the sentinels and the primary's name.
    assert "LLMGW_REDIS_URL" in names or {"LLMGW_REDIS_SENTINELS", "LLMGW_REDIS_SENTINEL_MASTER"} <= names
    drain = float(env["LLMGW_DRAIN_SECONDS"]) + float(env["LLMGW_DRAIN_DELAY_S"])
    assert spec["terminationGracePeriodSeconds"] >= drain
    assert spec.get("topologySpreadConstraints"), "gateway pods are not spread"
    [init] = spec["initContainers"]
    assert init["args"] == ["config", "check", "/etc/llmgw/config.yaml"]


def test_pools_probe_health_and_mount_caches(docs: list[Doc]) -> None:
    pools = [
        d
        for d in of_kind(docs, "Deployment")
        if d["metadata"]["labels"]["app.kubernetes.io/component"] == "pool"
    ]
    assert pools
    for d in pools:
        spec = d["spec"]["template"]["spec"]
        [c] = spec["containers"]
        for probe in ("livenessProbe", "readinessProbe"):
            assert c[probe]["httpGet"]["path"] == "/health", d["metadata"]["name"]
        engine_vllm = c.get("command") == ["vllm", "serve"]
        if engine_vllm:
            # Model load takes minutes: the startup probe must allow at least 10 of them.
            sp = c["startupProbe"]
            assert sp["httpGet"]["path"] == "/health"
            assert sp["periodSeconds"] * sp["failureThreshold"] >= 600
            assert int(c["resources"]["limits"]["nvidia.com/gpu"]) >= 1
            mounts = {m["mountPath"] for m in c["volumeMounts"]}
            assert {"/model-cache", "/dev/shm", "/tmp"} <= mounts
            args = c["args"]
            tp = next(a for a in args if a.startswith("--tensor-parallel-size="))
            assert int(tp.split("=")[1]) == int(c["resources"]["limits"]["nvidia.com/gpu"])
            for flag in (
                "--served-model-name=",
                "--max-model-len=",
                "--gpu-memory-utilization=",
                "--max-num-seqs=",
            ):
                assert any(a.startswith(flag) for a in args), f"{d['metadata']['name']}: {flag} missing"
        else:
            assert c["args"][0] == "sim"


def _component_pods(docs: list[Doc], component: str) -> list[tuple[str, dict[str, str]]]:
    return [
        (name, meta.get("labels", {}))
        for name, meta, _ in pod_specs(docs)
        if meta.get("labels", {}).get("app.kubernetes.io/component") == component
    ]


def _admits(peer: Doc, labels: dict[str, str], same_namespace: bool, ns_labels: dict[str, str]) -> bool:
    """Whether one NetworkPolicyPeer admits a pod with `labels` in a namespace with `ns_labels`."""
    if "ipBlock" in peer:
        return True  # an address range admits anything in it: treat as open
    if "namespaceSelector" in peer:
        if not selector_matches(peer["namespaceSelector"], ns_labels):
            return False
    elif not same_namespace:
        return False
    return selector_matches(peer.get("podSelector") or {}, labels)


def _reachable_by(
    docs: list[Doc], target: dict[str, str], labels: dict[str, str], ns: str, own_ns: str
) -> bool:
    policies = [
        p for p in of_kind(docs, "NetworkPolicy") if selector_matches(p["spec"]["podSelector"], target)
    ]
    assert policies, f"no NetworkPolicy selects pods {target}"
    ns_labels = {"kubernetes.io/metadata.name": ns}
    for p in policies:
        for rule in p["spec"].get("ingress", []):
            peers = rule.get("from")
            if not peers:
                return True  # a rule without `from` admits everyone
            if any(_admits(peer, labels, ns == own_ns, ns_labels) for peer in peers):
                return True
    return False


def test_only_the_gateway_and_prometheus_reach_the_pools(docs: list[Doc]) -> None:
    ns = next((d["metadata"].get("namespace") for d in docs if d["metadata"].get("namespace")), "llm")
    gateway = _component_pods(docs, "gateway")
    pools = _component_pods(docs, "pool")
    assert gateway and pools
    prometheus = {"app.kubernetes.io/name": "prometheus"}
    others = [lbl for _, lbl in _component_pods(docs, "redis") + _component_pods(docs, "test")]
    others.append({"app": "curious-pod"})
    for name, target in pools:
        assert _reachable_by(docs, target, gateway[0][1], ns, ns), f"{name}: gateway cannot reach it"
        assert _reachable_by(docs, target, prometheus, "monitoring", ns), (
            f"{name}: Prometheus cannot scrape it"
        )
        assert not _reachable_by(docs, target, prometheus, "default", ns), (
            f"{name}: open to pods of other namespaces"
        )
        for lbl in others:
            assert not _reachable_by(docs, target, lbl, ns, ns), f"{name}: reachable from {lbl}"
    for name, target in _component_pods(docs, "redis"):
        assert _reachable_by(docs, target, gateway[0][1], ns, ns), f"{name}: gateway cannot reach Redis"
        for lbl in [lbl for _, lbl in pools] + [prometheus, {"app": "curious-pod"}]:
            assert not _reachable_by(docs, target, lbl, ns, ns), f"{name}: Redis reachable from {lbl}"


def test_discovery_modes() -> None:
    kube = helm_template(scenario="production")
    dns = helm_template(scenario="minimal")
    assert kube.ok and dns.ok
    kube_pools = yaml.safe_load(policy_text(kube.docs))["pools"]
    assert [list(p["endpoints"]) for p in kube_pools] == [["kubernetes"], ["kubernetes"]]
    assert of_kind(kube.docs, "Role") and of_kind(kube.docs, "RoleBinding")
    assert [list(p["endpoints"]) for p in yaml.safe_load(policy_text(dns.docs))["pools"]] == [["dns"]]
    assert not of_kind(dns.docs, "Role") and not of_kind(dns.docs, "RoleBinding")


def test_rendered_policy_passes_llmgw_config_check(docs: list[Doc], tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(policy_text(docs))
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", "config", "check", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


def test_policy_names_every_pool_service(docs: list[Doc]) -> None:
    """The gateway discovers each pool through its headless Service: the names must agree."""
    policy = yaml.safe_load(policy_text(docs))
    services = {d["metadata"]["name"]: d for d in of_kind(docs, "Service")}
    ns = next((d["metadata"].get("namespace") for d in docs if d["metadata"].get("namespace")), "llm")
    for pool in policy["pools"]:
        if "dns" in pool["endpoints"]:
            dns = pool["endpoints"]["dns"]
            assert dns["name"].endswith(".svc.cluster.local."), "relative names walk the search list"
            svc_name, svc_ns = dns["name"].split(".")[:2]
            assert svc_ns == ns
            port = dns["port"]
        else:
            kube = pool["endpoints"]["kubernetes"]
            svc_name, port = kube["service"], kube["port"]
            assert kube.get("namespace") in (None, ns)
        svc = services[svc_name]
        assert svc["spec"]["clusterIP"] == "None", f"{svc_name}: not headless"
        assert port == svc["spec"]["ports"][0]["port"]
        [deploy] = [
            d
            for d in of_kind(docs, "Deployment")
            if selector_matches(
                {"matchLabels": svc["spec"]["selector"]}, d["spec"]["template"]["metadata"]["labels"]
            )
        ]
        [c] = deploy["spec"]["template"]["spec"]["containers"]
        assert f"--served-model-name={pool['model']}" in c["args"], f"{pool['name']}: served name differs"


def test_scaled_deployments_leave_replicas_to_keda(docs: list[Doc]) -> None:
    deployments = {d["metadata"]["name"]: d for d in of_kind(docs, "Deployment")}
    for so in of_kind(docs, "ScaledObject"):
        target = deployments[so["spec"]["scaleTargetRef"]["name"]]
        assert "replicas" not in target["spec"], f"{target['metadata']['name']}: replicas would fight KEDA"


def test_custom_resources_validate_against_crd_schemas(docs: list[Doc], tmp_path: Path) -> None:
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "k8s_validate.py"),
            "crs",
            str(SHARED / "k8s-schemas"),
            str(path),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr


def test_crd_validation_catches_a_numeric_threshold_and_a_typo(tmp_path: Path) -> None:
    r = helm_template(scenario="production")
    assert r.ok, r.stderr
    so = of_kind(r.docs, "ScaledObject")[0]
    so["spec"]["triggers"][1]["metadata"]["threshold"] = 5
    so["spec"]["minReplicas"] = 1
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump_all([so]))
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "k8s_validate.py"),
            "crs",
            str(SHARED / "k8s-schemas"),
            str(path),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert "triggers/1/metadata/threshold: 5 is not of type 'string'" in proc.stderr
    assert "minReplicas" in proc.stderr


def test_monitoring_objects_when_enabled() -> None:
    r = helm_template(scenario="production")
    assert r.ok, r.stderr
    [rule] = of_kind(r.docs, "PrometheusRule")
    alerts = {a["alert"] for g in rule["spec"]["groups"] for a in g["rules"]}
    sources: set[str] = set()
    for path in sorted((ROOT / "helm" / "llm-gateway" / "files" / "alerts").glob("*.yaml")):
        sources |= {a["alert"] for g in yaml.safe_load(path.read_text())["groups"] for a in g["rules"]}
    assert alerts == sources and len(alerts) >= 10
    dashboards = [
        d for d in of_kind(r.docs, "ConfigMap") if d["metadata"]["labels"].get("grafana_dashboard") == "1"
    ]
    assert len(dashboards) == len(
        list((ROOT / "helm" / "llm-gateway" / "files" / "dashboards").glob("*.json"))
    )
    assert {sm["spec"]["endpoints"][0]["path"] for sm in of_kind(r.docs, "ServiceMonitor")} == {"/metrics"}


def test_helm_test_pod_checks_config_and_a_completion() -> None:
    for scenario in SCENARIOS:
        r = helm_template(scenario=scenario)
        tests = [
            d
            for d in of_kind(r.docs, "Pod")
            if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"
        ]
        assert len(tests) == 1, scenario
        spec: dict[str, Any] = tests[0]["spec"]
        assert spec["initContainers"][0]["args"] == ["config", "check", "/etc/llmgw/config.yaml"]
        [c] = spec["containers"]
        assert c["command"][:2] == ["python", "-c"] and "/v1/chat/completions" in c["command"][2]
        env = {e["name"]: e for e in c["env"]}
        assert env["GATEWAY_URL"]["value"] == "http://llmgw-llm-gateway:80"
        assert "API_KEY" in env


def test_test_key_is_in_the_policy_as_its_sha256() -> None:
    import base64
    import hashlib

    r = helm_template(scenario="minimal")
    [secret] = [d for d in of_kind(r.docs, "Secret") if d["metadata"]["name"].endswith("-test-key")]
    key = base64.b64decode(secret["data"]["api-key"]).decode()
    policy = yaml.safe_load(policy_text(r.docs))
    [entry] = [k for k in policy["tenancy"]["keys"] if k["id"] == "helm-test"]
    assert entry["sha256"] == hashlib.sha256(key.encode()).hexdigest()
    assert entry["models"] == ["small"]


def test_pool_overrides_win_over_defaults_even_when_falsy(tmp_path: Path) -> None:
    r = helm_template(
        {
            "keda": {"enabled": True},
            "monitoring": {"serviceMonitor": {"enabled": True}},
            "pools": [
                {"name": "a", "model": "m", "keda": {"minReplicaCount": 0}},
                {
                    "name": "b",
                    "model": "m",
                    "keda": {"enabled": False},
                    "vllm": {"enablePrefixCaching": False},
                },
            ],
        },
        tmp=tmp_path,
    )
    assert r.ok, r.stderr
    [so] = of_kind(r.docs, "ScaledObject")
    assert so["metadata"]["name"].endswith("-pool-a") and so["spec"]["minReplicaCount"] == 0
    deploy_b = next(d for d in of_kind(r.docs, "Deployment") if d["metadata"]["name"].endswith("-pool-b"))
    assert deploy_b["spec"]["replicas"] == 1
    assert "--no-enable-prefix-caching" in deploy_b["spec"]["template"]["spec"]["containers"][0]["args"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_install_notes_render(scenario: str) -> None:
    """NOTES.txt is rendered only by install/upgrade: an error there would fail `helm install` itself."""
    args = [str(tool("helm4")), "install", "gw", str(CHART), "-n", "llm", "--dry-run=client"]
    proc = subprocess.run(
        [*args, "-f", str(ROOT / "ci" / f"{scenario}-values.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    notes = proc.stdout.split("NOTES:", 1)[1]
    assert "http://gw-llm-gateway.llm.svc:80/v1" in notes
    assert "helm test gw -n llm" in notes
    assert "WARNING" not in notes


def test_install_notes_warn_about_per_process_limits(tmp_path: Path) -> None:
    values = tmp_path / "v.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "redis": {"mode": "none"},
                "config": {
                    "limits": {"backend": "memory"},
                    "tenancy": {"store": "memory"},
                    "cache": {"backend": "memory"},
                },
            }
        )
    )
    proc = subprocess.run(
        [str(tool("helm4")), "install", "gw", str(CHART), "--dry-run=client", "-f", str(values)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "WARNING: config.limits.backend is not redis" in proc.stdout
