"""The chart's spend ledger (issue 43): PostgreSQL (postgresql.mode none | internal | external), the
policy's `ledger` block, the migration hook Job, the database URL as a read-only file, the NetworkPolicy
of the in-chart database, what the schema and the templates refuse, the ledger scenarios of
helm/llm-gateway/ci/ (linted, rendered and validated as `make helm-check` does for ci/), and the spend
alerts and dashboard row.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.ledger.config import LedgerConfig
from tests.chart.test_chart_rendered import _component_pods, _reachable_by
from tests.support.chart import (
    CHART,
    HELMS,
    ROOT,
    SHARED,
    Doc,
    helm_template,
    of_kind,
    pod_specs,
    policy_text,
    tool,
)

LEDGER_CI = CHART / "ci"  # the chart's own scenarios (ci/ at the root is what `make helm-check` covers)
LEDGER_SCENARIOS = ["ledger-external", "ledger-internal"]
K8S_VERSIONS = ("1.30.0", "1.34.0")
FULL = "llmgw-llm-gateway"  # helm_template's release `llmgw`
NS = "llm"
PG = f"{FULL}-postgresql"
JOB = f"{FULL}-ledger-migrate"
URL_FILE = "/etc/llmgw-postgresql/url"
SCHEMA_ERROR = re.compile(r"values don't meet the specifications of the schema", re.I)
EXTERNAL = {"mode": "external", "external": {"existingSecret": "pg-url", "key": "url"}}


def render(values: dict[str, Any], tmp: Path, helm: str = "helm4") -> list[Doc]:
    r = helm_template(values, helm=helm, tmp=tmp)
    assert r.ok, r.stderr
    return r.docs


def scenario(name: str) -> dict[str, Any]:
    data = yaml.safe_load((LEDGER_CI / f"{name}-values.yaml").read_text())
    assert isinstance(data, dict) and data
    return data


def gateway(docs: list[Doc]) -> tuple[Doc, Doc]:
    """(pod spec, container) of the gateway Deployment."""
    [d] = [
        d
        for d in of_kind(docs, "Deployment")
        if d["metadata"]["labels"]["app.kubernetes.io/component"] == "gateway"
    ]
    spec = d["spec"]["template"]["spec"]
    [c] = spec["containers"]
    return spec, c


def named(docs: list[Doc], kind: str, name: str) -> Doc:
    [d] = [d for d in of_kind(docs, kind) if d["metadata"]["name"] == name]
    return d


def jobs(docs: list[Doc]) -> list[Doc]:
    return of_kind(docs, "Job")


def database_objects(docs: list[Doc]) -> list[tuple[str, str]]:
    return sorted(
        (d["kind"], d["metadata"]["name"])
        for d in docs
        if d["metadata"].get("labels", {}).get("app.kubernetes.io/component")
        in ("postgresql", "ledger-migrate")
    )


def ledger_of(docs: list[Doc]) -> Any:
    return yaml.safe_load(policy_text(docs)).get("ledger")


def url_file(spec: Doc, container: Doc) -> tuple[str, str]:
    """(Secret, key) behind LLMGW_DATABASE_URL_FILE in a pod: a read-only mount of one Secret key."""
    env = {e["name"]: e for e in container["env"]}
    assert env["LLMGW_DATABASE_URL_FILE"] == {"name": "LLMGW_DATABASE_URL_FILE", "value": URL_FILE}
    assert "LLMGW_DATABASE_URL" not in env, "the URL itself must never be an environment value"
    directory, filename = URL_FILE.rsplit("/", 1)
    [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == directory]
    assert mount["readOnly"] is True
    [volume] = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    secret = volume["secret"]
    assert secret["defaultMode"] == 0o440
    [item] = secret["items"]
    assert item["path"] == filename
    return secret["secretName"], item["key"]


# --- postgresql.mode: what is rendered and what the gateway gets -------------------------------------------


def test_mode_none_is_the_default_and_renders_no_database(tmp_path: Path) -> None:
    docs = render({}, tmp_path)
    assert database_objects(docs) == []
    assert ledger_of(docs) is None
    spec, c = gateway(docs)
    assert not [e for e in c["env"] if e["name"].startswith("LLMGW_DATABASE_URL")]
    assert not [v for v in spec["volumes"] if "secret" in v and "postgresql" in v["secret"]["secretName"]]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["postgresql"]["mode"] == "none" and values["ledger"]["enabled"] is None


def test_mode_internal_runs_postgresql_with_a_generated_password(tmp_path: Path) -> None:
    docs = render(
        {
            "postgresql": {
                "mode": "internal",
                "internal": {"persistence": {"size": "50Gi", "storageClass": "fast-ssd"}},
            }
        },
        tmp_path,
    )
    assert database_objects(docs) == [
        ("Job", JOB),
        ("NetworkPolicy", PG),
        ("Secret", PG),
        ("Service", PG),
        ("StatefulSet", PG),
    ]
    secret = named(docs, "Secret", PG)
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert re.fullmatch(r"[A-Za-z0-9]{40}", data["password"]), "a random, URL-safe password"
    assert data["database-url"] == f"postgresql://llmgw:{data['password']}@{PG}:5432/llmgw"
    # A new password at every render without a cluster (the kept one comes from lookup).
    again = named(render({"postgresql": {"mode": "internal"}}, tmp_path), "Secret", PG)
    assert again["data"]["password"] != secret["data"]["password"]

    sts = named(docs, "StatefulSet", PG)
    assert sts["spec"]["replicas"] == 1 and sts["spec"]["serviceName"] == PG
    spec = sts["spec"]["template"]["spec"]
    [c] = spec["containers"]
    values = yaml.safe_load((CHART / "values.yaml").read_text())["postgresql"]["internal"]
    assert c["image"] == f"postgres:{values['image']['tag']}"
    assert re.fullmatch(r"\d+\.\d+-alpine", values["image"]["tag"]), "pinned to a minor release"
    assert spec["securityContext"]["runAsUser"] == 70 and spec["securityContext"]["fsGroup"] == 70
    assert spec["automountServiceAccountToken"] is False
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["POSTGRES_PASSWORD_FILE"] == "/secrets/password" and "POSTGRES_PASSWORD" not in env
    assert env["POSTGRES_USER"] == "llmgw" and env["POSTGRES_DB"] == "llmgw"
    assert env["PGDATA"].startswith("/var/lib/postgresql/data/"), "below the volume root (lost+found)"
    for probe in ("readinessProbe", "startupProbe"):
        assert c[probe]["exec"]["command"][0] == "pg_isready"
        assert "127.0.0.1" in c[probe]["exec"]["command"], f"{probe}: over TCP, not the init socket"
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert mounts["/var/lib/postgresql/data"] == "data"
    assert {"/var/run/postgresql", "/tmp", "/dev/shm"} <= set(mounts), "writable paths on a read-only root"
    [pvc] = sts["spec"]["volumeClaimTemplates"]
    assert pvc["metadata"]["name"] == "data"
    assert pvc["spec"]["storageClassName"] == "fast-ssd"
    assert pvc["spec"]["resources"]["requests"]["storage"] == "50Gi"
    [password] = [v for v in spec["volumes"] if v["name"] == "password"]
    assert password["secret"] == {
        "secretName": PG,
        "defaultMode": 0o440,
        "items": [{"key": "password", "path": "password"}],
    }

    svc = named(docs, "Service", PG)
    assert svc["spec"]["ports"] == [
        {"name": "postgresql", "port": 5432, "targetPort": "postgresql", "protocol": "TCP"}
    ]
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels[k] == v for k, v in svc["spec"]["selector"].items())

    spec, c = gateway(docs)
    assert url_file(spec, c) == (PG, "database-url")


def test_mode_external_reads_the_url_from_the_existing_secret(tmp_path: Path) -> None:
    docs = render({"postgresql": EXTERNAL}, tmp_path)
    assert database_objects(docs) == [("Job", JOB)]
    spec, c = gateway(docs)
    assert url_file(spec, c) == ("pg-url", "url")


@pytest.mark.parametrize("mode", [EXTERNAL, {"mode": "internal"}], ids=["external", "internal"])
def test_the_url_is_never_in_the_environment_or_a_configmap(mode: dict[str, Any], tmp_path: Path) -> None:
    docs = render({"postgresql": mode}, tmp_path)
    for name, _, spec in pod_specs(docs):
        for c in spec.get("initContainers", []) + spec["containers"]:
            for e in c.get("env", []):
                assert "postgresql://" not in str(e.get("value", "")), f"{name}: {e['name']}"
                ref = e.get("valueFrom", {}).get("secretKeyRef", {})
                assert ref.get("name") not in (PG, "pg-url"), f"{name}: {e['name']} from the database Secret"
    for cm in of_kind(docs, "ConfigMap"):
        assert "postgresql://" not in json.dumps(cm.get("data", {})), cm["metadata"]["name"]


# --- the policy's ledger block ---------------------------------------------------------------------------


def test_the_policy_gets_only_the_ledger_settings_given(tmp_path: Path) -> None:
    assert ledger_of(render({"postgresql": {"mode": "internal"}}, tmp_path)) == {"enabled": True}
    given = {
        "retentionDays": 400,
        "batchRows": 500,
        "flushMs": 200,
        "memoryRows": 50000,
        "spoolMaxRows": 2000000,
        "migrateOnStart": False,
    }
    block = ledger_of(render({"postgresql": EXTERNAL, "ledger": given}, tmp_path))
    assert block == {
        "enabled": True,
        "retention_days": 400,
        "batch_rows": 500,
        "flush_ms": 200,
        "memory_rows": 50000,
        "spool_max_rows": 2000000,
        "migrate_on_start": False,
    }
    assert all(type(v) is int for k, v in block.items() if k not in ("enabled", "migrate_on_start"))
    # The gateway's own model of the section takes it as rendered.
    LedgerConfig.model_validate(block)
    partial = ledger_of(render({"postgresql": EXTERNAL, "ledger": {"retentionDays": 30}}, tmp_path))
    assert partial == {"enabled": True, "retention_days": 30}


def test_ledger_enabled_false_keeps_the_database_but_not_the_ledger(tmp_path: Path) -> None:
    docs = render({"postgresql": {"mode": "internal"}, "ledger": {"enabled": False}}, tmp_path)
    assert ledger_of(docs) is None
    assert jobs(docs) == []
    assert ("StatefulSet", PG) in database_objects(docs)
    spec, c = gateway(docs)
    assert url_file(spec, c) == (PG, "database-url")


# --- the migration Job ------------------------------------------------------------------------------------


def _job(docs: list[Doc]) -> tuple[Doc, Doc, Doc]:
    [job] = jobs(docs)
    spec = job["spec"]["template"]["spec"]
    [c] = spec["containers"]
    return job, spec, c


@pytest.mark.parametrize(
    ("mode", "hook", "secret"),
    [
        pytest.param(EXTERNAL, "pre-install,pre-upgrade", ("pg-url", "url"), id="external"),
        # The in-chart database does not exist before the install's resources: after them.
        pytest.param({"mode": "internal"}, "post-install,pre-upgrade", (PG, "database-url"), id="internal"),
    ],
)
def test_migration_job_is_a_hook_with_the_gateway_image_and_url(
    mode: dict[str, Any], hook: str, secret: tuple[str, str], tmp_path: Path
) -> None:
    docs = render({"postgresql": mode}, tmp_path)
    job, spec, c = _job(docs)
    assert job["metadata"]["name"] == JOB
    notes = job["metadata"]["annotations"]
    assert notes["helm.sh/hook"] == hook
    assert int(notes["helm.sh/hook-weight"]) < 0
    # A failed Job stays for `kubectl logs`; the next attempt replaces it.
    assert notes["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    assert job["spec"]["backoffLimit"] <= 3
    assert job["spec"]["activeDeadlineSeconds"] > 300
    assert "ttlSecondsAfterFinished" not in job["spec"], "a failed Job must stay for its logs"
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in spec, "the gateway's account does not exist before an install"
    _, gw = gateway(docs)
    assert c["image"] == gw["image"]
    assert c["args"] == ["db", "migrate", "--wait-s", "300"]
    assert url_file(spec, c) == secret


def test_an_upgrade_that_turns_the_in_chart_database_on_migrates_after_it(tmp_path: Path) -> None:
    values = tmp_path / "v.yaml"
    values.write_text(yaml.safe_dump({"postgresql": {"mode": "internal"}}))
    args = [str(tool("helm4")), "template", "llmgw", str(CHART), "-n", NS, "-f", str(values)]
    # No cluster: lookup finds no Secret, as on the upgrade that first turns `internal` on.
    proc = subprocess.run([*args, "--is-upgrade"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    [job] = [d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "Job"]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"


def test_migration_settings(tmp_path: Path) -> None:
    docs = render(
        {
            "postgresql": EXTERNAL,
            "ledger": {"migration": {"waitSeconds": 60, "backoffLimit": 0, "activeDeadlineSeconds": 120}},
        },
        tmp_path,
    )
    job, _, c = _job(docs)
    assert c["args"] == ["db", "migrate", "--wait-s", "60"]
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] == 120


# --- NetworkPolicy ----------------------------------------------------------------------------------------


def test_only_the_gateway_and_the_migration_reach_the_in_chart_database(tmp_path: Path) -> None:
    docs = render({"postgresql": {"mode": "internal"}}, tmp_path)
    [policy] = [p for p in of_kind(docs, "NetworkPolicy") if p["metadata"]["name"] == PG]
    assert policy["spec"]["ingress"][0]["ports"] == [{"port": "postgresql", "protocol": "TCP"}]
    [(_, database)] = _component_pods(docs, "postgresql")
    allowed = [lbl for _, lbl in _component_pods(docs, "gateway") + _component_pods(docs, "ledger-migrate")]
    assert len(allowed) == 2
    for lbl in allowed:
        assert _reachable_by(docs, database, lbl, NS, NS), f"{lbl} cannot reach PostgreSQL"
    others = [lbl for c in ("pool", "redis", "test") for _, lbl in _component_pods(docs, c)]
    assert len(others) == 3
    for lbl in [*others, {"app.kubernetes.io/name": "prometheus"}, {"app": "curious-pod"}]:
        assert not _reachable_by(docs, database, lbl, NS, NS), f"PostgreSQL reachable from {lbl}"


# --- refused values ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("helm", HELMS)
@pytest.mark.parametrize(
    ("values", "needle"),
    [
        pytest.param({"postgresql": {"mode": "cloudsql"}}, "mode", id="mode-enum"),
        pytest.param({"postgresql": {"url": "postgresql://x"}}, "url", id="unknown-postgresql-key"),
        pytest.param({"postgresql": {"internal": {"username": "Gate-Way"}}}, "username", id="bad-username"),
        pytest.param({"ledger": {"retentionDays": 0}}, "retentionDays", id="retention-zero"),
        pytest.param({"ledger": {"batchRows": "500"}}, "batchRows", id="batch-rows-string"),
        pytest.param({"ledger": {"retention_days": 400}}, "retention_days", id="policy-name-in-values"),
        pytest.param({"ledger": {"enabled": "yes"}}, "enabled", id="enabled-not-bool"),
        pytest.param({"config": {"ledger": {"enabled": True}}}, "ledger", id="ledger-in-config"),
    ],
)
def test_schema_refuses_bad_ledger_values(
    helm: str, values: dict[str, Any], needle: str, tmp_path: Path
) -> None:
    r = helm_template(values, helm=helm, tmp=tmp_path)
    assert not r.ok, f"{helm} rendered {values}"
    assert SCHEMA_ERROR.search(r.stderr), f"not a schema error:\n{r.stderr}"
    assert needle in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param(
            {"ledger": {"enabled": True}}, "ledger.enabled needs a database", id="ledger-without-database"
        ),
        pytest.param(
            {"postgresql": {"mode": "external"}},
            "postgresql.mode is external: set postgresql.external.existingSecret",
            id="external-without-secret",
        ),
        pytest.param(
            {"postgresql": {"mode": "internal", "external": {"existingSecret": "pg"}}},
            "postgresql.external.existingSecret is set but postgresql.mode is internal",
            id="secret-without-external",
        ),
        pytest.param(
            {"postgresql": EXTERNAL, "ledger": {"migration": {"activeDeadlineSeconds": 300}}},
            "ledger.migration.activeDeadlineSeconds (300) must exceed ledger.migration.waitSeconds (300)",
            id="deadline-within-wait",
        ),
    ],
)
def test_render_time_ledger_checks(values: dict[str, Any], message: str, tmp_path: Path) -> None:
    r = helm_template(values, tmp=tmp_path)
    assert not r.ok, f"rendered {values}"
    assert message in r.stderr, r.stderr


# --- the ledger scenarios: what `make helm-check` does for ci/*-values.yaml ------------------------------


def test_the_ledger_scenarios_exist() -> None:
    assert sorted(p.name.removesuffix("-values.yaml") for p in LEDGER_CI.glob("ledger-*-values.yaml")) == (
        LEDGER_SCENARIOS
    )


@pytest.mark.parametrize("helm", HELMS)
@pytest.mark.parametrize("name", LEDGER_SCENARIOS)
def test_ledger_scenario_lints_and_validates(name: str, helm: str, tmp_path: Path) -> None:
    values = str(LEDGER_CI / f"{name}-values.yaml")
    lint = subprocess.run(
        [str(tool(helm)), "lint", "--strict", "--quiet", str(CHART), "-f", values],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    rendered = subprocess.run(
        [
            str(tool(helm)),
            "template",
            "llmgw",
            str(CHART),
            "-n",
            NS,
            "--kube-version",
            "1.30.0",
            "-f",
            values,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rendered.returncode == 0, rendered.stderr
    path = tmp_path / f"{name}.yaml"
    path.write_text(rendered.stdout)
    validate = str(Path(sys.executable).parent / "kubernetes-validate")
    for version in K8S_VERSIONS:
        proc = subprocess.run(
            [validate, "--strict", "--quiet", "--no-warn", "-k", version, str(path)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, f"Kubernetes {version}:\n{proc.stdout}{proc.stderr}"
    crs = subprocess.run(
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
    assert crs.returncode == 0, crs.stderr


@pytest.mark.parametrize("name", LEDGER_SCENARIOS)
def test_ledger_scenario_policy_passes_llmgw_config_check(name: str, tmp_path: Path) -> None:
    docs = render(scenario(name), tmp_path)
    assert ledger_of(docs)["enabled"] is True
    path = tmp_path / "config.yaml"
    path.write_text(policy_text(docs))
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", "config", "check", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("name", LEDGER_SCENARIOS)
def test_ledger_scenario_pods_are_locked_down(name: str, tmp_path: Path) -> None:
    docs = render(scenario(name), tmp_path)
    assert jobs(docs)
    for pod, _, spec in pod_specs(docs):
        assert spec["securityContext"]["runAsNonRoot"] is True, pod
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", pod
        assert spec.get("automountServiceAccountToken") is False or pod.startswith("Deployment/"), pod
        for c in spec.get("initContainers", []) + spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False, pod
            assert "ALL" in sc["capabilities"]["drop"], pod
            assert c["resources"]["requests"] and "memory" in c["resources"]["limits"], pod


def test_install_notes_name_the_migration_job() -> None:
    proc = subprocess.run(
        [
            str(tool("helm4")),
            "install",
            "gw",
            str(CHART),
            "-n",
            NS,
            "--dry-run=client",
            "-f",
            str(LEDGER_CI / "ledger-internal-values.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    notes = proc.stdout.split("NOTES:", 1)[1]
    assert "kubectl -n llm logs job/gw-llm-gateway-ledger-migrate" in notes
    assert "WARNING" not in notes


# --- alerts and the dashboard row -------------------------------------------------------------------------

SPEND_ALERTS = {
    "LLMGatewayOrgBudget80",
    "LLMGatewayOrgBudgetExhausted",
    "LLMGatewayLedgerDropping",
    "LLMGatewayLedgerBehind",
}


def test_spend_alerts_are_in_the_prometheus_rule(tmp_path: Path) -> None:
    docs = render(scenario("ledger-internal"), tmp_path)
    [rule] = of_kind(docs, "PrometheusRule")
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert SPEND_ALERTS <= set(rules)
    assert rules["LLMGatewayOrgBudget80"]["labels"]["severity"] == "warning"
    assert rules["LLMGatewayOrgBudgetExhausted"]["labels"]["severity"] == "critical"
    assert rules["LLMGatewayLedgerDropping"]["labels"]["severity"] == "critical"
    for name in SPEND_ALERTS:
        assert {"summary", "description"} <= set(rules[name]["annotations"]), name
    assert 'budget="usd_per_month"' in rules["LLMGatewayOrgBudget80"]["expr"]


def test_spend_and_budgets_row_on_the_tenants_and_cost_dashboard() -> None:
    dash = json.loads((CHART / "files" / "dashboards" / "tenants-cost.json").read_text())
    panels = dash["panels"]
    [row] = [p for p in panels if p["type"] == "row" and p["title"] == "Spend and budgets"]
    below = [p for p in panels if p["type"] != "row" and p["gridPos"]["y"] > row["gridPos"]["y"]]
    exprs = " ".join(t["expr"] for p in below for t in p["targets"])
    for series in (
        "rate(llmgw_cost_usd_total",
        "llmgw_budget_used_ratio",
        "llmgw_ledger_rows_total",
        "llmgw_ledger_backlog_rows",
        "llmgw_ledger_write_errors_total",
        "llmgw_ledger_last_write_timestamp_seconds",
    ):
        assert series in exprs, f"no panel of the row queries {series}"
    for p in below:
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert all('namespace=~"$namespace"' in t["expr"] for t in p["targets"]), p["title"]
