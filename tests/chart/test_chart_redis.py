"""The chart's Redis (redis.mode internal | external | sentinel | cluster | none, with redis.auth and
redis.tls in every mode): the environment and the read-only files the gateway gets, the in-chart Sentinel
group's objects, what the schema and the templates refuse, the Redis scenarios of ci/
(linted, rendered and validated as `make helm-check` does for ci/), and files/redis/redis.sh run with
real redis-server processes: data nodes and sentinels that announce hostnames, hand the primary over in
preStop, rejoin after a failover, over TLS with an ACL user.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.sentinel
import yaml

from tests.support.chart import CHART, HELMS, ROOT, Doc, helm_template, of_kind, pod_specs, tool
from tests.support.poll import wait_until
from tests.support.procs import free_port

CHART_CI = ROOT / "ci"  # `make helm-check` lints, renders and validates every ci/*-values.yaml
REDIS_SCENARIOS = ["cluster-tls", "sentinel"]
K8S_VERSIONS = ("1.30.0", "1.34.0")
FULL = "llmgw-llm-gateway"  # helm_template's release `llmgw`
NS = "llm"
SCHEMA_ERROR = re.compile(r"values don't meet the specifications of the schema", re.I)
MEMORY_POLICY = {
    "limits": {"backend": "memory"},
    "tenancy": {"auth": "required", "store": "memory"},
    "cache": {"backend": "memory"},
}
REDIS_SERVER = shutil.which("redis-server")
# redis-py's Sentinel is untyped: the gateway's side of the tests, through it.
Sentinel: Any = redis.sentinel.Sentinel


def render(values: dict[str, Any], tmp: Path, helm: str = "helm4") -> list[Doc]:
    r = helm_template(values, helm=helm, tmp=tmp)
    assert r.ok, r.stderr
    return r.docs


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


def redis_env(container: Doc) -> dict[str, Any]:
    return {
        e["name"]: e["value"] if "value" in e else e["valueFrom"]
        for e in container["env"]
        if e["name"].startswith("LLMGW_REDIS")
    }


def named(docs: list[Doc], kind: str, name: str) -> Doc:
    [d] = [d for d in of_kind(docs, kind) if d["metadata"]["name"] == name]
    return d


def redis_objects(docs: list[Doc]) -> list[tuple[str, str]]:
    return sorted(
        (d["kind"], d["metadata"]["name"])
        for d in docs
        if d["metadata"].get("labels", {}).get("app.kubernetes.io/component", "").startswith("redis")
    )


def sentinel_fqdns(n: int = 3) -> str:
    return ",".join(
        f"{FULL}-redis-sentinel-{i}.{FULL}-redis-sentinel.{NS}.svc.cluster.local:26379" for i in range(n)
    )


# --- the Redis scenarios: what `make helm-check` does for ci/*-values.yaml ------------------------------


def test_the_redis_scenarios_exist() -> None:
    assert all((CHART_CI / f"{scenario}-values.yaml").is_file() for scenario in REDIS_SCENARIOS)


@pytest.mark.parametrize("scenario", REDIS_SCENARIOS)
def test_redis_scenario_pods_are_locked_down(scenario: str, tmp_path: Path) -> None:
    docs = render(yaml.safe_load((CHART_CI / f"{scenario}-values.yaml").read_text()), tmp_path)
    for name, _, spec in pod_specs(docs):
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec.get("automountServiceAccountToken") is not True or name.startswith("Deployment/"), name
        for c in spec.get("initContainers", []) + spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False, name
            assert "ALL" in sc["capabilities"]["drop"], name
            assert c["resources"]["requests"] and "memory" in c["resources"]["limits"], name


# --- what the gateway gets, per mode ---------------------------------------------------------------------

TLS_SERVER = {"enabled": True, "server": {"secretName": "redis-server-tls"}}
CA_FILE = "/etc/llmgw-redis/tls-ca/ca.crt"


@pytest.mark.parametrize(
    ("values", "env", "objects"),
    [
        pytest.param(
            {},
            {
                "LLMGW_REDIS_MODE": "standalone",
                "LLMGW_REDIS_URL": f"redis://{FULL}-redis:6379/0",
                "LLMGW_REDIS_TLS": "false",
            },
            [
                ("ConfigMap", f"{FULL}-redis-scripts"),
                ("NetworkPolicy", f"{FULL}-redis"),
                ("Service", f"{FULL}-redis"),
                ("StatefulSet", f"{FULL}-redis"),
            ],
            id="internal",
        ),
        pytest.param(
            {"redis": {"auth": {"username": "gw", "secretName": "redis-auth"}, "tls": TLS_SERVER}},
            {
                "LLMGW_REDIS_MODE": "standalone",
                "LLMGW_REDIS_URL": f"rediss://{FULL}-redis:6379/0",
                "LLMGW_REDIS_USERNAME": "gw",
                "LLMGW_REDIS_PASSWORD_FILE": "/etc/llmgw-redis/auth/password",
                "LLMGW_REDIS_TLS": "true",
                "LLMGW_REDIS_TLS_VERIFY": "full",
                "LLMGW_REDIS_TLS_CA_FILE": CA_FILE,
            },
            [
                ("ConfigMap", f"{FULL}-redis-scripts"),
                ("NetworkPolicy", f"{FULL}-redis"),
                ("Service", f"{FULL}-redis"),
                ("StatefulSet", f"{FULL}-redis"),
            ],
            id="internal-auth-tls",
        ),
        pytest.param(
            {"redis": {"mode": "external", "external": {"url": "redis://redis.data:6379/2"}}},
            {
                "LLMGW_REDIS_MODE": "standalone",
                "LLMGW_REDIS_URL": "redis://redis.data:6379/2",
                "LLMGW_REDIS_TLS": "false",
            },
            [],
            id="external-url",
        ),
        pytest.param(
            {
                "redis": {
                    "mode": "external",
                    "external": {"secretName": "redis-url", "key": "url"},
                    "auth": {"secretName": "redis-auth", "key": "pw"},
                    "tls": {
                        "enabled": True,
                        "verify": "ca",
                        "serverName": "redis.internal",
                        "ca": {"secretName": "ca"},
                    },
                }
            },
            {
                "LLMGW_REDIS_MODE": "standalone",
                "LLMGW_REDIS_URL": {"secretKeyRef": {"name": "redis-url", "key": "url"}},
                "LLMGW_REDIS_PASSWORD_FILE": "/etc/llmgw-redis/auth/password",
                "LLMGW_REDIS_TLS": "true",
                "LLMGW_REDIS_TLS_VERIFY": "ca",
                "LLMGW_REDIS_TLS_CA_FILE": CA_FILE,
                "LLMGW_REDIS_TLS_SERVER_NAME": "redis.internal",
            },
            [],
            id="external-secret-auth-tls",
        ),
        pytest.param(
            {"redis": {"mode": "sentinel"}},
            {
                "LLMGW_REDIS_MODE": "sentinel",
                "LLMGW_REDIS_SENTINELS": sentinel_fqdns(),
                "LLMGW_REDIS_SENTINEL_MASTER": "mymaster",
                "LLMGW_REDIS_TLS": "false",
            },
            [
                ("ConfigMap", f"{FULL}-redis-scripts"),
                ("NetworkPolicy", f"{FULL}-redis"),
                ("NetworkPolicy", f"{FULL}-redis-sentinel"),
                ("PodDisruptionBudget", f"{FULL}-redis"),
                ("PodDisruptionBudget", f"{FULL}-redis-sentinel"),
                ("Service", f"{FULL}-redis-headless"),
                ("Service", f"{FULL}-redis-sentinel"),
                ("StatefulSet", f"{FULL}-redis"),
                ("StatefulSet", f"{FULL}-redis-sentinel"),
            ],
            id="sentinel-in-chart",
        ),
        pytest.param(
            {
                "redis": {
                    "mode": "sentinel",
                    "sentinel": {
                        "masterName": "cache",
                        "external": {
                            "sentinels": ["s-0.data:26379", "10.0.0.7:26379"],
                            "auth": {"username": "watch", "secretName": "sentinel-auth", "key": "pw"},
                        },
                    },
                    "auth": {"secretName": "redis-auth"},
                }
            },
            {
                "LLMGW_REDIS_MODE": "sentinel",
                "LLMGW_REDIS_SENTINELS": "s-0.data:26379,10.0.0.7:26379",
                "LLMGW_REDIS_SENTINEL_MASTER": "cache",
                "LLMGW_REDIS_SENTINEL_USERNAME": "watch",
                "LLMGW_REDIS_SENTINEL_PASSWORD": {"secretKeyRef": {"name": "sentinel-auth", "key": "pw"}},
                "LLMGW_REDIS_PASSWORD_FILE": "/etc/llmgw-redis/auth/password",
                "LLMGW_REDIS_TLS": "false",
            },
            [],
            id="sentinel-external",
        ),
        pytest.param(
            {
                "redis": {
                    "mode": "cluster",
                    "cluster": {"seeds": ["clustercfg.example.cache.amazonaws.com:6379", "10.0.0.9:6380"]},
                    "auth": {"username": "llmgw", "secretName": "redis-auth"},
                    "tls": {
                        "enabled": True,
                        "ca": {"configMapName": "redis-ca", "key": "bundle.pem"},
                        "clientCert": {"secretName": "client-tls"},
                    },
                }
            },
            {
                "LLMGW_REDIS_MODE": "cluster",
                "LLMGW_REDIS_URL": "rediss://clustercfg.example.cache.amazonaws.com:6379,rediss://10.0.0.9:6380",
                "LLMGW_REDIS_USERNAME": "llmgw",
                "LLMGW_REDIS_PASSWORD_FILE": "/etc/llmgw-redis/auth/password",
                "LLMGW_REDIS_TLS": "true",
                "LLMGW_REDIS_TLS_VERIFY": "full",
                "LLMGW_REDIS_TLS_CA_FILE": CA_FILE,
                "LLMGW_REDIS_TLS_CERT_FILE": "/etc/llmgw-redis/tls-client/tls.crt",
                "LLMGW_REDIS_TLS_KEY_FILE": "/etc/llmgw-redis/tls-client/tls.key",
            },
            [],
            id="cluster-tls",
        ),
        pytest.param(
            {"redis": {"mode": "cluster", "cluster": {"seeds": ["redis-cluster:6379"]}}},
            {
                "LLMGW_REDIS_MODE": "cluster",
                "LLMGW_REDIS_URL": "redis://redis-cluster:6379",
                "LLMGW_REDIS_TLS": "false",
            },
            [],
            id="cluster-plain",
        ),
        pytest.param(
            {"redis": {"mode": "external", "external": {"url": "rediss://redis.data:6380/0"}}},
            {
                "LLMGW_REDIS_MODE": "standalone",
                "LLMGW_REDIS_URL": "rediss://redis.data:6380/0",
                "LLMGW_REDIS_TLS": "true",
            },
            [],
            id="external-rediss-url-alone",
        ),
        pytest.param({"redis": {"mode": "none"}, "config": MEMORY_POLICY}, {}, [], id="none"),
    ],
)
def test_gateway_env_per_mode(
    values: dict[str, Any], env: dict[str, Any], objects: list[tuple[str, str]], tmp_path: Path
) -> None:
    docs = render(values, tmp_path)
    _, c = gateway(docs)
    assert redis_env(c) == env
    assert redis_objects(docs) == objects
    # No password in the manifest: a file, or (the sentinels' own) a Secret reference.
    assert not any(
        "PASSWORD" in e["name"] and "value" in e and not e["name"].endswith("_FILE") for e in c["env"]
    )


def test_gateway_mounts_redis_secrets_read_only(tmp_path: Path) -> None:
    docs = render(
        {
            "redis": {
                "mode": "cluster",
                "cluster": {"seeds": ["redis:6379"]},
                "auth": {"username": "gw", "secretName": "redis-auth", "key": "pw"},
                "tls": {
                    "enabled": True,
                    "ca": {"secretName": "redis-ca", "key": "bundle.pem"},
                    "clientCert": {"secretName": "client-tls", "certKey": "cert.pem", "keyKey": "key.pem"},
                },
            }
        },
        tmp_path,
    )
    spec, c = gateway(docs)
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    env = redis_env(c)
    files = {k: v for k, v in env.items() if k.endswith("_FILE")}
    assert set(files) == {
        "LLMGW_REDIS_PASSWORD_FILE",
        "LLMGW_REDIS_TLS_CA_FILE",
        "LLMGW_REDIS_TLS_CERT_FILE",
        "LLMGW_REDIS_TLS_KEY_FILE",
    }
    expected = {  # file -> (volume source, object, key inside it, mode)
        "LLMGW_REDIS_PASSWORD_FILE": ("secret", "redis-auth", "pw", 0o440),
        "LLMGW_REDIS_TLS_CA_FILE": ("secret", "redis-ca", "bundle.pem", 0o444),
        "LLMGW_REDIS_TLS_CERT_FILE": ("secret", "client-tls", "cert.pem", 0o440),
        "LLMGW_REDIS_TLS_KEY_FILE": ("secret", "client-tls", "key.pem", 0o440),
    }
    for var, path in files.items():
        directory, filename = path.rsplit("/", 1)
        mount = mounts[directory]
        assert mount["readOnly"] is True, f"{var}: {directory} is writable"
        assert not directory.startswith("/etc/llmgw/"), "nested in the read-only policy ConfigMap mount"
        source, name, key, mode = expected[var]
        vol = volumes[mount["name"]][source]
        assert vol["secretName"] == name
        assert {"key": key, "path": filename} in vol["items"]
        assert vol["defaultMode"] == mode, f"{var}: mode {oct(vol['defaultMode'])}"
    # No secret of Redis' reaches the environment.
    refs = [
        e["valueFrom"]["secretKeyRef"]["name"] for e in c["env"] if "secretKeyRef" in e.get("valueFrom", {})
    ]
    assert not {"redis-auth", "client-tls", "redis-ca"} & set(refs)

    # The CA from a ConfigMap instead.
    docs = render(
        {
            "redis": {
                "mode": "external",
                "external": {"url": "rediss://redis:6380/0"},
                "tls": {"enabled": True, "ca": {"configMapName": "redis-ca"}},
            }
        },
        tmp_path,
    )
    spec, c = gateway(docs)
    [vol] = [v for v in spec["volumes"] if v["name"] == "redis-tls-ca"]
    assert vol["configMap"] == {
        "name": "redis-ca",
        "defaultMode": 0o444,
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
    }
    assert {"name": "redis-tls-ca", "mountPath": "/etc/llmgw-redis/tls-ca", "readOnly": True} in c[
        "volumeMounts"
    ]


def test_in_chart_redis_reads_credentials_from_read_only_files(tmp_path: Path) -> None:
    docs = render(
        {
            "redis": {
                "mode": "sentinel",
                "auth": {"username": "gw", "secretName": "redis-auth", "key": "pw"},
                "tls": {
                    "enabled": True,
                    "server": {"secretName": "redis-tls"},
                    "clientCert": {"secretName": "c"},
                },
            }
        },
        tmp_path,
    )
    for name in (f"{FULL}-redis", f"{FULL}-redis-sentinel"):
        spec = named(docs, "StatefulSet", name)["spec"]["template"]["spec"]
        [c] = spec["containers"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        for vol in ("auth", "tls", "scripts"):
            assert mounts[vol]["readOnly"] is True, f"{name}: {vol}"
        assert volumes["auth"]["secret"] == {
            "secretName": "redis-auth",
            "defaultMode": 0o440,
            "items": [{"key": "pw", "path": "password"}],
        }
        assert volumes["tls"]["secret"]["secretName"] == "redis-tls"
        assert [i["path"] for i in volumes["tls"]["secret"]["items"]] == ["tls.crt", "tls.key", "ca.crt"]
        # The generated configuration holds the password: in memory, not on a volume.
        assert volumes["conf"]["emptyDir"]["medium"] == "Memory"
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["REDIS_PASSWORD_FILE"] == "/auth/password" and env["REDIS_USERNAME"] == "gw"
        assert env["REDIS_TLS"] == "yes" and env["REDIS_TLS_AUTH_CLIENTS"] == "yes"
        assert not any("secretKeyRef" in e.get("valueFrom", {}) for e in c["env"])
        assert "pw" not in " ".join(c["command"])
    # The gateway trusts the servers' CA when redis.tls.ca is empty.
    spec, _ = gateway(docs)
    [ca] = [v for v in spec["volumes"] if v["name"] == "redis-tls-ca"]
    assert ca["secret"]["secretName"] == "redis-tls" and ca["secret"]["items"] == [
        {"key": "ca.crt", "path": "ca.crt"}
    ]


# --- the in-chart Sentinel group ------------------------------------------------------------------------


def test_sentinel_statefulsets(tmp_path: Path) -> None:
    docs = render(
        {
            "redis": {
                "mode": "sentinel",
                "sentinel": {
                    "masterName": "llmgw",
                    "replicas": 3,
                    "downAfterMilliseconds": 3000,
                    "failoverTimeout": 20000,
                },
                "internal": {"persistence": {"enabled": True, "size": "5Gi"}, "maxmemory": "1gb"},
            }
        },
        tmp_path,
    )
    headless = f"{FULL}-redis-headless"
    sname = f"{FULL}-redis-sentinel"
    nodes_list = [f"{FULL}-redis-{i}.{headless}.{NS}.svc.cluster.local:6379" for i in range(4)]
    sentinels_list = sentinel_fqdns().split(",")
    script = (CHART / "files" / "redis" / "redis.sh").read_text()
    [cm] = [d for d in of_kind(docs, "ConfigMap") if d["metadata"]["name"] == f"{FULL}-redis-scripts"]
    assert cm["data"]["redis.sh"] == script

    for svc_name in (headless, sname):
        svc = named(docs, "Service", svc_name)
        assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True

    nodes = named(docs, "StatefulSet", f"{FULL}-redis")
    assert nodes["spec"]["replicas"] == 4 and nodes["spec"]["serviceName"] == headless
    assert nodes["spec"]["podManagementPolicy"] == "Parallel"
    assert nodes["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "5Gi"
    tpl = nodes["spec"]["template"]
    assert tpl["metadata"]["annotations"]["checksum/scripts"] == hashlib.sha256(script.encode()).hexdigest()
    [c] = tpl["spec"]["containers"]
    assert c["command"] == ["sh", "/scripts/redis.sh", "node"]
    assert c["readinessProbe"]["exec"]["command"] == ["sh", "/scripts/redis.sh", "ping-node"]
    assert c["livenessProbe"]["tcpSocket"]["port"] == "redis"
    assert c["lifecycle"]["preStop"]["exec"]["command"] == ["sh", "/scripts/redis.sh", "prestop"]
    assert tpl["spec"]["terminationGracePeriodSeconds"] >= 30
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["REDIS_ANNOUNCE_HOST"] == f"$(POD_NAME).{headless}.{NS}.svc.cluster.local"
    assert env["REDIS_MASTER_NAME"] == "llmgw"
    assert env["REDIS_INITIAL_PRIMARY"] == nodes_list[0]
    assert env["REDIS_NODES"].split() == nodes_list
    assert env["REDIS_SENTINELS"].split() == sentinels_list
    assert env["REDIS_MAXMEMORY"] == "1gb" and env["REDIS_DATA_DIR"] == "/data"
    assert {"name": "data", "mountPath": "/data"} in c["volumeMounts"]
    # POD_NAME comes before the value that expands it.
    names = [e["name"] for e in c["env"]]
    assert names.index("POD_NAME") < names.index("REDIS_ANNOUNCE_HOST")

    sentinels = named(docs, "StatefulSet", sname)
    assert sentinels["spec"]["replicas"] == 3 and sentinels["spec"]["serviceName"] == sname
    [s] = sentinels["spec"]["template"]["spec"]["containers"]
    assert s["command"] == ["sh", "/scripts/redis.sh", "sentinel"]
    assert s["ports"] == [{"name": "sentinel", "containerPort": 26379, "protocol": "TCP"}]
    assert s["readinessProbe"]["exec"]["command"] == ["sh", "/scripts/redis.sh", "ping-sentinel"]
    senv = {e["name"]: e.get("value", e.get("valueFrom")) for e in s["env"]}
    assert senv["REDIS_ANNOUNCE_HOST"] == f"$(POD_NAME).{sname}.{NS}.svc.cluster.local"
    assert senv["REDIS_QUORUM"] == "2"
    assert senv["REDIS_DOWN_AFTER_MS"] == "3000" and senv["REDIS_FAILOVER_TIMEOUT_MS"] == "20000"
    assert senv["REDIS_NODES"].split() == nodes_list and senv["REDIS_SENTINELS"].split() == sentinels_list

    # Every variable the StatefulSets set is one redis.sh reads.
    read = set(re.findall(r"\$\{(\w+):=", script))
    for container in (c, s):
        assert {e["name"] for e in container["env"]} - {"POD_NAME"} <= read, container["name"]

    for pdb_name, component in ((f"{FULL}-redis", "redis"), (sname, "redis-sentinel")):
        pdb = named(docs, "PodDisruptionBudget", pdb_name)
        assert pdb["spec"]["maxUnavailable"] == 1
        assert pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == component

    # NetworkPolicies: the gateway and the group itself reach nodes and sentinels; the pools do not.
    def admitted(target: str) -> list[str]:
        [p] = [
            p
            for p in of_kind(docs, "NetworkPolicy")
            if p["spec"]["podSelector"]["matchLabels"].get("app.kubernetes.io/component") == target
        ]
        return sorted(
            peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
            for peer in p["spec"]["ingress"][0]["from"]
        )

    assert admitted("redis") == ["gateway", "redis", "redis-sentinel"]
    assert admitted("redis-sentinel") == ["gateway", "redis", "redis-sentinel"]


def test_sentinel_pdbs_can_be_turned_off(tmp_path: Path) -> None:
    docs = render({"redis": {"mode": "sentinel", "sentinel": {"pdb": {"enabled": False}}}}, tmp_path)
    assert not [d for d in of_kind(docs, "PodDisruptionBudget") if "redis" in d["metadata"]["name"]]


# --- refusals ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("helm", HELMS)
@pytest.mark.parametrize(
    ("values", "needle"),
    [
        pytest.param({"redis": {"mode": "replicated"}}, "mode", id="mode-enum"),
        pytest.param({"redis": {"mode": "cluster"}}, "seeds", id="cluster-without-seeds"),
        pytest.param(
            {"redis": {"mode": "cluster", "cluster": {"seeds": ["rediss://redis:6379"]}}},
            "seeds",
            id="seed-as-url",
        ),
        pytest.param({"redis": {"auth": {"username": "gw"}}}, "secretName", id="username-without-password"),
        pytest.param(
            {"redis": {"tls": {"enabled": True, "ca": {"secretName": "a", "configMapName": "b"}}}},
            "configMapName",
            id="ca-from-secret-and-configmap",
        ),
        pytest.param({"redis": {"tls": {"verify": "strict"}}}, "verify", id="verify-enum"),
        pytest.param(
            {"redis": {"mode": "sentinel", "sentinel": {"external": {"sentinels": ["sentinel-0"]}}}},
            "sentinels",
            id="sentinel-without-port",
        ),
        pytest.param({"redis": {"sentinel": {"replicas": 0}}}, "replicas", id="sentinel-without-replicas"),
        pytest.param({"redis": {"sentinel": {"masterName": ""}}}, "masterName", id="empty-master-name"),
        pytest.param({"redis": {"tls": {"insecure": True}}}, "insecure", id="unknown-tls-key"),
        pytest.param({"redis": {"tls": {"enabled": "yes"}}}, "enabled", id="tls-enabled-not-bool"),
    ],
)
def test_schema_refuses_bad_redis_values(
    helm: str, values: dict[str, Any], needle: str, tmp_path: Path
) -> None:
    r = helm_template(values, helm=helm, tmp=tmp_path)
    assert not r.ok, f"{helm} rendered {values}"
    assert SCHEMA_ERROR.search(r.stderr), f"not a schema error:\n{r.stderr}"
    assert needle in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("values", "message", "skip_schema"),
    [
        pytest.param(
            {"redis": {"tls": {"ca": {"secretName": "ca"}}}},
            "redis.tls.ca is set but redis.tls.enabled is false",
            False,
            id="ca-without-tls",
        ),
        pytest.param(
            {
                "redis": {
                    "mode": "cluster",
                    "cluster": {"seeds": ["r:6379"]},
                    "tls": {"clientCert": {"secretName": "c"}},
                }
            },
            "redis.tls.clientCert is set but redis.tls.enabled is false",
            False,
            id="client-cert-without-tls",
        ),
        pytest.param(
            {"redis": {"tls": {"enabled": True}}},
            "redis.tls.enabled with the in-chart Redis (redis.mode internal) needs "
            "redis.tls.server.secretName",
            False,
            id="internal-tls-without-server-cert",
        ),
        pytest.param(
            {"redis": {"mode": "sentinel", "tls": {"enabled": True}}},
            "redis.tls.enabled with the in-chart Redis (redis.mode sentinel) needs "
            "redis.tls.server.secretName",
            False,
            id="sentinel-tls-without-server-cert",
        ),
        pytest.param(
            {"redis": {"mode": "cluster", "cluster": {"seeds": ["r:6379"]}, "tls": TLS_SERVER}},
            "redis.tls.server is for the in-chart Redis",
            False,
            id="server-cert-for-external",
        ),
        pytest.param(
            {
                "redis": {
                    "mode": "external",
                    "external": {"url": "redis://redis:6379/0"},
                    "tls": {"enabled": True},
                }
            },
            "redis.tls.enabled is true but redis.external.url (redis://redis:6379/0) is redis://",
            False,
            id="redis-url-with-tls",
        ),
        pytest.param(
            {"redis": {"mode": "none", "auth": {"secretName": "a"}}, "config": MEMORY_POLICY},
            "redis.mode is none: redis.auth and redis.tls do not apply",
            False,
            id="none-with-auth",
        ),
        pytest.param(
            {
                "redis": {
                    "mode": "cluster",
                    "cluster": {"seeds": ["r:6379"]},
                    "tls": {"enabled": True, "serverName": "r"},
                }
            },
            "redis.tls.serverName does not apply to redis.mode cluster",
            False,
            id="cluster-with-server-name",
        ),
        pytest.param(
            {
                "redis": {
                    "mode": "sentinel",
                    "sentinel": {"external": {"sentinels": ["s:26379"], "auth": {"username": "watch"}}},
                }
            },
            "redis.sentinel.external.auth.username (watch) needs its password",
            False,
            id="sentinel-user-without-password",
        ),
        pytest.param(
            {"redis": {"mode": "sentinel", "sentinel": {"external": {"auth": {"secretName": "s"}}}}},
            "redis.sentinel.external.auth is for external sentinels",
            False,
            id="sentinel-auth-for-in-chart-sentinels",
        ),
        # What the schema refuses first, refused in words too (helm template --skip-schema-validation).
        pytest.param(
            {"redis": {"mode": "cluster"}},
            "redis.mode is cluster: list seed nodes of the cluster in redis.cluster.seeds",
            True,
            id="cluster-without-seeds",
        ),
        pytest.param(
            {"redis": {"auth": {"username": "gw"}}},
            "redis.auth.username (gw) needs its password: set redis.auth.secretName",
            True,
            id="username-without-password",
        ),
        pytest.param(
            {
                "redis": {
                    "tls": {
                        "enabled": True,
                        "server": {"secretName": "s"},
                        "ca": {"secretName": "a", "configMapName": "b"},
                    }
                }
            },
            "redis.tls.ca: give secretName or configMapName, not both",
            True,
            id="ca-twice",
        ),
        pytest.param(
            {"redis": {"mode": "sentinel", "sentinel": {"masterName": ""}}},
            "redis.mode is sentinel: redis.sentinel.masterName must name the monitored primary",
            True,
            id="sentinel-without-master-name",
        ),
    ],
)
def test_render_time_redis_checks(
    values: dict[str, Any], message: str, skip_schema: bool, tmp_path: Path
) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    args = [str(tool("helm4")), "template", "llmgw", str(CHART), "-n", NS, "-f", str(path)]
    if skip_schema:
        args.append("--skip-schema-validation")
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0, f"rendered {values}"
    assert message in proc.stderr, proc.stderr


# --- files/redis/redis.sh with real redis-server processes -------------------------------------------------


@dataclass
class Rendered:
    script: Path
    node: dict[str, str]
    sentinel: dict[str, str]


def rendered_group(values: dict[str, Any], tmp: Path) -> Rendered:
    """The script and the two containers' environments as the chart renders them for the Sentinel group."""
    docs = render(values, tmp)
    [cm] = [d for d in of_kind(docs, "ConfigMap") if d["metadata"]["name"] == f"{FULL}-redis-scripts"]
    script = tmp / "redis.sh"
    script.write_text(cm["data"]["redis.sh"])

    def env(name: str) -> dict[str, str]:
        [c] = named(docs, "StatefulSet", name)["spec"]["template"]["spec"]["containers"]
        return {e["name"]: e["value"] for e in c["env"] if "value" in e}

    return Rendered(script, env(f"{FULL}-redis"), env(f"{FULL}-redis-sentinel"))


# What differs between a pod and this machine: ports (all processes share 127.0.0.1, each announcing
# `localhost`, a hostname: what resolve-hostnames / announce-hostnames are for), the lists built from
# them, and the paths of the mounted files.
LOCAL = {
    "REDIS_PORT",
    "SENTINEL_PORT",
    "REDIS_ANNOUNCE_HOST",
    "REDIS_INITIAL_PRIMARY",
    "REDIS_NODES",
    "REDIS_SENTINELS",
    "REDIS_CONF_DIR",
    "REDIS_DATA_DIR",
    "REDIS_PASSWORD_FILE",
    "REDIS_TLS_CERT_FILE",
    "REDIS_TLS_KEY_FILE",
    "REDIS_TLS_CA_FILE",
}


class Group:
    """Data nodes and sentinels started through redis.sh, on this machine."""

    def __init__(
        self, rendered: Rendered, tmp: Path, nodes: int, sentinels: int, files: dict[str, str]
    ) -> None:
        if REDIS_SERVER is None:
            pytest.fail("redis-server is missing: apt-get install -y redis-server (.ci/run installs it)")
        self.r = rendered
        self.tmp = tmp
        self.node_ports = [free_port() for _ in range(nodes)]
        self.sentinel_ports = [free_port() for _ in range(sentinels)]
        self.files = files
        self.procs: dict[tuple[str, int], subprocess.Popen[bytes]] = {}
        nodes_list = " ".join(f"localhost:{p}" for p in self.node_ports)
        sentinels_list = " ".join(f"localhost:{p}" for p in self.sentinel_ports)
        self.common = {
            "REDIS_ANNOUNCE_HOST": "localhost",
            "REDIS_INITIAL_PRIMARY": f"localhost:{self.node_ports[0]}",
            "REDIS_NODES": nodes_list,
            "REDIS_SENTINELS": sentinels_list,
            **files,
        }

    def env(self, kind: str, i: int, **over: str) -> dict[str, str]:
        base = self.r.node if kind == "node" else self.r.sentinel
        kept = {k: v for k, v in base.items() if k not in LOCAL}
        conf = self.tmp / f"{kind}{i}"
        (conf / "data").mkdir(parents=True, exist_ok=True)
        env = {**kept, **self.common, "REDIS_CONF_DIR": str(conf), "REDIS_DATA_DIR": str(conf / "data")}
        if kind == "node":
            env["REDIS_PORT"] = str(self.node_ports[i])
        else:
            env["SENTINEL_PORT"] = str(self.sentinel_ports[i])
        env.update(over)
        return {"PATH": os.environ["PATH"], **env}

    def start(self, kind: str, i: int, **over: str) -> None:
        log = (self.tmp / f"{kind}{i}.log").open("ab")
        self.procs[(kind, i)] = subprocess.Popen(
            ["sh", str(self.r.script), kind],
            env=self.env(kind, i, **over),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        probe = "ping-node" if kind == "node" else "ping-sentinel"
        proc = self.procs[(kind, i)]

        def exited() -> None:
            if proc.poll() is not None:
                raise RuntimeError(f"{kind} {i} exited: {(self.tmp / f'{kind}{i}.log').read_text()[-2000:]}")

        wait_until(
            lambda: self.run(kind, i, probe).returncode == 0, f"{kind} {i} to answer", timeout=15, fail=exited
        )

    def run(self, kind: str, i: int, command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["sh", str(self.r.script), command],
            env=self.env(kind, i),
            capture_output=True,
            text=True,
            timeout=60,
        )

    def stop(self, kind: str, i: int) -> None:
        proc = self.procs.pop((kind, i))
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        for kind, i in list(self.procs):
            self.stop(kind, i)

    def conf(self, kind: str, i: int) -> str:
        return (self.tmp / f"{kind}{i}" / ("redis.conf" if kind == "node" else "sentinel.conf")).read_text()


@pytest.fixture
def group_factory(tmp_path: Path) -> Iterator[Any]:
    with ExitStack() as stack:

        def make(rendered: Rendered, nodes: int, sentinels: int, files: dict[str, str]) -> Group:
            g = Group(rendered, tmp_path, nodes, sentinels, files)
            stack.callback(g.close)
            return g

        yield make


# A password that needs quoting in a Redis configuration file.
PASSWORD = 'p"a\\ss word'


def test_sentinel_group_from_the_chart_scripts(tmp_path: Path, group_factory: Any) -> None:
    rendered = rendered_group(
        {
            "redis": {
                "mode": "sentinel",
                "auth": {"username": "llmgw", "secretName": "redis-auth"},
                "sentinel": {
                    "masterName": "llmgw",
                    "replicas": 1,
                    "downAfterMilliseconds": 1000,
                    "failoverTimeout": 10000,
                },
            }
        },
        tmp_path,
    )
    pw = tmp_path / "password"
    pw.write_text(PASSWORD + "\n")  # `kubectl create secret --from-file` of an echo'd file
    g: Group = group_factory(rendered, 2, 3, {"REDIS_PASSWORD_FILE": str(pw)})
    n0, n1 = g.node_ports
    g.start("node", 0)
    g.start("node", 1)
    for i in range(3):
        g.start("sentinel", i)
    assert f"replicaof localhost {n0}" in g.conf("node", 1)
    assert "replicaof" not in g.conf("node", 0)
    conf = g.conf("sentinel", 0)
    assert conf.index("sentinel resolve-hostnames yes") < conf.index("sentinel monitor llmgw localhost")
    assert "sentinel announce-hostnames yes" in conf and "sentinel auth-user llmgw llmgw" in conf
    # The configuration holds the password: this user's alone.
    assert (tmp_path / "node0" / "redis.conf").stat().st_mode & 0o777 == 0o600

    sentinel: Any = redis.Redis(port=g.sentinel_ports[0], decode_responses=True)

    def group_formed() -> bool:
        replicas = sentinel.sentinel_slaves("llmgw")
        peers = sentinel.sentinel_sentinels("llmgw")
        return (
            [(r["ip"], r["port"]) for r in replicas] == [("localhost", n1)]
            and not replicas[0]["is_sdown"]
            and sorted((p["ip"], p["port"]) for p in peers)
            == [("localhost", p) for p in sorted(g.sentinel_ports[1:])]
        )

    # Hostnames, not 127.0.0.1, for the primary, its replica and the other sentinels.
    wait_until(group_formed, "the sentinels to know the replica and each other by hostname", timeout=30)
    assert sentinel.sentinel_get_master_addr_by_name("llmgw") == ("localhost", n0)

    # The gateway's side: the ACL user through the sentinels' answer.
    client = Sentinel([("localhost", p) for p in g.sentinel_ports], socket_timeout=2).master_for(
        "llmgw", username="llmgw", password=PASSWORD, socket_timeout=2, decode_responses=True
    )
    client.set("budget", "42")

    # preStop of the primary: the sentinels name the replica before it stops.
    done = g.run("node", 0, "prestop")
    assert done.returncode == 0, done.stderr
    assert sentinel.sentinel_get_master_addr_by_name("llmgw") == ("localhost", n1), done.stderr
    g.stop("node", 0)

    # The old primary restarts and follows the new one (the sentinels' answer, not pod 0 by default).
    g.start("node", 0)
    assert f"replicaof localhost {n1}" in g.conf("node", 0)
    old = redis.Redis(port=n0, username="llmgw", password=PASSWORD, decode_responses=True)
    wait_until(
        lambda: old.info("replication").get("master_link_status") == "up",
        "the old primary to replicate",
        timeout=30,
    )
    assert client.get("budget") == "42"
    assert old.get("budget") == "42"

    # Every sentinel lost: one restarting with nothing finds the primary by asking the nodes.
    for i in range(3):
        g.stop("sentinel", i)
    shutil.rmtree(tmp_path / "sentinel0")
    g.start("sentinel", 0)
    assert f"sentinel monitor llmgw localhost {n1} 2" in g.conf("sentinel", 0)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _certificates(d: Path) -> None:
    """A CA, a server certificate (also for client use, as the nodes use it towards each other) and a
    client certificate, all for `localhost`."""
    d.mkdir()
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "1",
        "-subj",
        "/CN=test-ca",
        cwd=d,
    )
    (d / "ext.cnf").write_text("subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n")
    for name in ("tls", "client"):
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.crt", "-days", "1", "-extfile", "ext.cnf", cwd=d,
        )  # fmt: skip


def test_sentinel_group_over_tls(tmp_path: Path, group_factory: Any) -> None:
    if shutil.which("openssl") is None:
        pytest.fail("openssl is missing: apt-get install -y openssl")
    rendered = rendered_group(
        {
            "redis": {
                "mode": "sentinel",
                "auth": {"secretName": "redis-auth"},
                "tls": {
                    "enabled": True,
                    "server": {"secretName": "redis-tls"},
                    "clientCert": {"secretName": "gw"},
                },
                "sentinel": {"replicas": 1, "downAfterMilliseconds": 1000},
            }
        },
        tmp_path,
    )
    assert rendered.node["REDIS_TLS"] == "yes" and rendered.node["REDIS_TLS_AUTH_CLIENTS"] == "yes"
    certs = tmp_path / "certs"
    _certificates(certs)
    pw = tmp_path / "password"
    pw.write_text("tls-secret")
    files = {
        "REDIS_PASSWORD_FILE": str(pw),
        "REDIS_TLS_CERT_FILE": str(certs / "tls.crt"),
        "REDIS_TLS_KEY_FILE": str(certs / "tls.key"),
        "REDIS_TLS_CA_FILE": str(certs / "ca.crt"),
    }
    g: Group = group_factory(rendered, 2, 1, files)
    n0, n1 = g.node_ports
    g.start("node", 0)
    g.start("sentinel", 0, REDIS_QUORUM="1")
    # No replica in sync: the primary's preStop hands over to nobody.
    alone = g.run("node", 0, "prestop")
    assert alone.returncode == 0 and "no replica in sync" in alone.stderr, alone.stderr
    g.start("node", 1)  # ready once in sync (ping-node)
    assert "port 0" in g.conf("node", 0) and f"tls-port {n0}" in g.conf("node", 0)

    tls: dict[str, Any] = {
        "ssl": True,
        "ssl_ca_certs": str(certs / "ca.crt"),
        "ssl_certfile": str(certs / "client.crt"),
        "ssl_keyfile": str(certs / "client.key"),
        "ssl_cert_reqs": "required",
        "ssl_check_hostname": True,  # verify full: the sentinels' hostnames match the certificate
        "socket_timeout": 2,
    }
    replica = redis.Redis(host="localhost", port=n1, password="tls-secret", decode_responses=True, **tls)
    wait_until(
        lambda: replica.info("replication").get("master_link_status") == "up",
        "replication over TLS",
        timeout=30,
    )
    sentinels = Sentinel([("localhost", g.sentinel_ports[0])], sentinel_kwargs=tls, socket_timeout=2)
    wait_until(
        lambda: len(sentinels.discover_slaves("mymaster")) == 1,
        "the sentinel to see the replica over TLS",
        timeout=30,
    )
    assert sentinels.discover_master("mymaster") == ("localhost", n0)
    primary = sentinels.master_for("mymaster", password="tls-secret", decode_responses=True, **tls)
    primary.set("k", "v")
    wait_until(lambda: replica.get("k") == "v", "the write to replicate", timeout=10)
    # No plain-text listener, and no session without a client certificate.
    with pytest.raises((redis.ConnectionError, redis.TimeoutError)):
        redis.Redis(port=n0, password="tls-secret", socket_timeout=2).ping()
    no_cert = {k: v for k, v in tls.items() if k not in ("ssl_certfile", "ssl_keyfile")}
    with pytest.raises((redis.ConnectionError, redis.TimeoutError)):
        redis.Redis(host="localhost", port=n0, password="tls-secret", **no_cert).ping()


def test_standalone_in_chart_redis_from_the_chart_script(tmp_path: Path, group_factory: Any) -> None:
    """redis.mode internal: the same script, no Sentinel settings; AOF on, the password required."""
    docs = render({"redis": {"auth": {"secretName": "redis-auth"}}}, tmp_path)
    [cm] = [d for d in of_kind(docs, "ConfigMap") if d["metadata"]["name"] == f"{FULL}-redis-scripts"]
    script = tmp_path / "redis.sh"
    script.write_text(cm["data"]["redis.sh"])
    [c] = named(docs, "StatefulSet", f"{FULL}-redis")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert "REDIS_MASTER_NAME" not in env and c.get("lifecycle") is None
    pw = tmp_path / "password"
    pw.write_text(PASSWORD)
    g: Group = group_factory(Rendered(script, env, {}), 1, 0, {"REDIS_PASSWORD_FILE": str(pw)})
    g.start("node", 0)
    conf = g.conf("node", 0)
    for line in (
        "appendonly yes",
        "appendfsync everysec",
        'save ""',
        "maxmemory-policy noeviction",
        "maxmemory 256mb",
    ):
        assert line in conf.splitlines(), line
    assert "replicaof" not in conf and "replica-announce-ip" not in conf
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=g.node_ports[0]).set("k", "v")
    assert redis.Redis(port=g.node_ports[0], password=PASSWORD).set("k", "v")
    assert (g.tmp / "node0" / "data" / "appendonlydir").is_dir()
    # The preStop of a standalone Redis does nothing.
    assert g.run("node", 0, "prestop").returncode == 0
