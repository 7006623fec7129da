"""LoRA pools in the chart: one `lora` value per pool becomes the engine's `--enable-lora` flags (vLLM
and simulator pools alike), the adapters' volume or init container, and the policy pool's `lora`
(gateway/config_lora.py), and the two say the same thing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config import parse_policy
from tests.chart import test_chart_rendered as rendered
from tests.chart.test_chart_values import SCHEMA_ERROR, refused
from tests.support.chart import HELMS, Doc, helm_template, of_kind, policy_text

PRICE = {"input_per_mtok": 0.1, "output_per_mtok": 0.2}
PVC = {"persistentVolumeClaim": {"claimName": "lora-adapters", "readOnly": True}}
FETCH = {"image": "busybox:1.37", "command": ["sh", "-c"], "args": ['cp -r /src/* "$ADAPTER_DIR"']}
VALUES: dict[str, Any] = {
    "pools": [
        {"name": "small", "model": "m"},
        {
            # Every adapter from the start (--lora-modules), from a PVC.
            "name": "base",
            "model": "m",
            "lora": {
                "enabled": True,
                "maxLoras": 2,
                "maxLoraRank": 8,
                "maxCpuLoras": 4,
                "adapters": [
                    {"name": "support-v2", "rank": 8, "price": PRICE},
                    {"name": "sql.v1", "rank": 4, "path": "/model-cache/adapters/sql"},
                ],
                "volume": PVC,
            },
        },
        {
            # Loaded at run time by the gateway; fetched into an emptyDir by an init container.
            "name": "rt-sim",
            "model": "m",
            "engine": "sim",
            "lora": {
                "enabled": True,
                "runtimeLoading": True,
                "affinity": False,
                "maxCpuLoras": 2,
                "adapters": [{"name": "lora-a", "rank": 8}, {"name": "lora-b", "rank": 8}],
                "initContainer": FETCH,
                "mountPath": "/lora",
            },
            "gateway": {"lora": {"load_factor": 2.0}},
        },
        {
            # Run-time loading, but every replica starts with the adapters too.
            "name": "rt-pre",
            "model": "m",
            "lora": {
                "enabled": True,
                "runtimeLoading": True,
                "preload": True,
                "adapters": [{"name": "a", "rank": 16}],
            },
        },
        {
            # Declared but off: nothing of it is rendered.
            "name": "unadapted",
            "model": "m",
            "lora": {"enabled": False, "adapters": [{"name": "a", "rank": 8}], "volume": PVC},
        },
    ],
    "config": {
        "models": [
            {"name": "small", "route": {"pool": "small"}},
            {"name": "support", "route": {"pool": "base", "adapter": "support-v2"}},
            {"name": "b", "route": {"pool": "rt-sim", "adapter": "lora-b"}},
        ]
    },
}


@pytest.fixture(scope="module", params=HELMS)
def docs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[Doc]:
    r = helm_template(VALUES, helm=request.param, tmp=tmp_path_factory.mktemp("lora"))
    assert r.ok, r.stderr
    return r.docs


def _pod(docs: list[Doc], pool: str) -> Doc:
    [dep] = [d for d in of_kind(docs, "Deployment") if d["metadata"]["name"].endswith(f"-pool-{pool}")]
    spec: Doc = dep["spec"]["template"]["spec"]
    return spec


def _server(docs: list[Doc], pool: str) -> Doc:
    containers: list[Doc] = _pod(docs, pool)["containers"]
    [c] = containers
    return c


def _lora_args(args: list[str]) -> list[str]:
    """The LoRA flags and the adapters after --lora-modules (the args from --enable-lora on)."""
    if "--enable-lora" not in args:
        assert not [a for a in args if "lora" in a], args
        return []
    i = args.index("--enable-lora")
    tail = args[i:]
    assert not [a for a in args[:i] if "lora" in a], args
    return tail


def _env(container: Doc) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def _policy_pools(docs: list[Doc]) -> dict[str, Doc]:
    return {p["name"]: p for p in yaml.safe_load(policy_text(docs))["pools"]}


def test_policy_carries_the_gateway_contract(docs: list[Doc]) -> None:
    pools = _policy_pools(docs)
    assert "lora" not in pools["small"] and "lora" not in pools["unadapted"]
    assert pools["base"]["lora"] == {
        "max_loras": 2,
        "max_rank": 8,
        "runtime_loading": False,
        "affinity": True,
        "adapters": [
            {"name": "support-v2", "source": "/adapters/support-v2", "rank": 8, "price": PRICE},
            {"name": "sql.v1", "source": "/model-cache/adapters/sql", "rank": 4},
        ],
    }
    assert pools["rt-sim"]["lora"] == {
        "max_loras": 1,
        "max_rank": 16,
        "runtime_loading": True,
        "affinity": False,
        "load_factor": 2.0,  # the pool's `gateway.lora` merges in
        "adapters": [
            {"name": "lora-a", "source": "/lora/lora-a", "rank": 8},
            {"name": "lora-b", "source": "/lora/lora-b", "rank": 8},
        ],
    }
    assert pools["rt-pre"]["lora"]["runtime_loading"] is True
    models = {m["name"]: m for m in yaml.safe_load(policy_text(docs))["models"]}
    assert models["support"]["route"] == {"pool": "base", "adapter": "support-v2"}


def test_policy_parses_and_the_engine_flags_agree(docs: list[Doc]) -> None:
    policy = parse_policy(policy_text(docs), "configmap")
    pools = {p.name: p for p in policy.pools}
    assert pools["small"].lora is None and pools["unadapted"].lora is None
    for name in ("base", "rt-sim", "rt-pre"):
        lora = pools[name].lora
        assert lora is not None
        args = _lora_args(_server(docs, name)["args"])
        assert args[:3] == [
            "--enable-lora",
            f"--max-loras={lora.max_loras}",
            f"--max-lora-rank={lora.max_rank}",
        ]
        modules = args[args.index("--lora-modules") + 1 :] if "--lora-modules" in args else []
        if not lora.runtime_loading or name == "rt-pre":
            # One flag, every adapter after it: vLLM keeps only the last of a repeated --lora-modules.
            assert args.count("--lora-modules") == 1
            assert modules == [f"{a.name}={a.source}" for a in lora.adapters]
        else:
            assert modules == []
        env = _env(_server(docs, name))
        assert ("VLLM_ALLOW_RUNTIME_LORA_UPDATING" in env) is lora.runtime_loading
        if lora.runtime_loading:
            assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    base = _lora_args(_server(docs, "base")["args"])
    assert "--max-cpu-loras=4" in base
    sim = _server(docs, "rt-sim")
    assert sim["args"][0] == "sim"  # the simulator takes vLLM's flags ...
    assert not [a for a in sim["args"] if a.startswith("--max-cpu-loras")]  # ... but not this vLLM-only one
    for name in ("small", "unadapted"):
        assert _lora_args(_server(docs, name)["args"]) == []
        assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in _env(_server(docs, name))


def test_adapters_volume_and_init_container(docs: list[Doc]) -> None:
    # A given volume source, mounted read-only; no init container.
    base = _pod(docs, "base")
    assert "initContainers" not in base
    [vol] = [v for v in base["volumes"] if v["name"] == "adapters"]
    assert vol == {"name": "adapters", **PVC}
    [mount] = [m for m in base["containers"][0]["volumeMounts"] if m["name"] == "adapters"]
    assert mount == {"name": "adapters", "mountPath": "/adapters", "readOnly": True}
    # An init container filling an emptyDir at mountPath; the server reads it.
    rt = _pod(docs, "rt-sim")
    [init] = rt["initContainers"]
    assert init["image"] == FETCH["image"]
    assert init["command"] == FETCH["command"] and init["args"] == FETCH["args"]
    assert _env(init)["ADAPTER_DIR"] == "/lora"
    assert {m["name"]: m.get("readOnly", False) for m in init["volumeMounts"]} == {
        "adapters": False,
        "tmp": False,
    }
    [vol] = [v for v in rt["volumes"] if v["name"] == "adapters"]
    assert "emptyDir" in vol
    [mount] = [m for m in rt["containers"][0]["volumeMounts"] if m["name"] == "adapters"]
    assert mount == {"name": "adapters", "mountPath": "/lora", "readOnly": True}
    # Adapters at paths the replica has anyway (or off): no volume of the chart's.
    for name in ("rt-pre", "unadapted", "small"):
        pod = _pod(docs, name)
        assert "initContainers" not in pod
        assert not [v for v in pod["volumes"] if v["name"] == "adapters"]


def test_init_container_writes_into_a_given_volume(tmp_path: Path) -> None:
    values = {
        "pools": [
            {
                "name": "p",
                "model": "m",
                "lora": {
                    "enabled": True,
                    "adapters": [{"name": "a", "rank": 8}],
                    "volume": {"persistentVolumeClaim": {"claimName": "cache"}},
                    "initContainer": {
                        **FETCH,
                        "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "2Gi"}},
                    },
                },
            }
        ]
    }
    r = helm_template(values, tmp=tmp_path)
    assert r.ok, r.stderr
    pod = _pod(r.docs, "p")
    [vol] = [v for v in pod["volumes"] if v["name"] == "adapters"]
    assert vol == {"name": "adapters", "persistentVolumeClaim": {"claimName": "cache"}}
    [init] = pod["initContainers"]
    assert init["resources"] == {"requests": {"cpu": "1"}, "limits": {"memory": "2Gi"}}


def test_lora_pods_stay_locked_down(docs: list[Doc]) -> None:
    rendered.test_every_pod_is_locked_down(docs)
    rendered.test_pools_probe_health_and_mount_caches(docs)
    rendered.test_policy_names_every_pool_service(docs)


def test_rendered_lora_objects_validate(docs: list[Doc], tmp_path: Path) -> None:
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    validate = Path(sys.executable).parent / "kubernetes-validate"
    proc = subprocess.run(
        [str(validate), "--strict", "--quiet", "--no-warn", "-k", "1.30.0", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rendered.test_rendered_policy_passes_llmgw_config_check(docs, tmp_path)


def _pool(lora: dict[str, Any]) -> dict[str, Any]:
    return {"pools": [{"name": "p", "model": "m", "lora": lora}]}


ONE = [{"name": "a", "rank": 8}]


@pytest.mark.parametrize("helm", HELMS)
@pytest.mark.parametrize(
    ("lora", "needle"),
    [
        pytest.param({"enabled": True, "maxLoraRank": 12, "adapters": ONE}, "maxLoraRank", id="rank-choice"),
        pytest.param({"enabled": True, "maxLoras": 0, "adapters": ONE}, "maxLoras", id="zero-loras"),
        pytest.param({"enabled": True, "maxCpuLoras": 0, "adapters": ONE}, "maxCpuLoras", id="zero-cpu"),
        pytest.param({"enabled": True, "adapters": ONE, "runtime": True}, "runtime", id="unknown-key"),
        pytest.param({"enabled": True, "adapters": [{"name": "Support_V2", "rank": 8}]}, "name", id="name"),
        pytest.param({"enabled": True, "adapters": [{"name": "a"}]}, "rank", id="adapter-without-rank"),
        pytest.param(
            {"enabled": True, "adapters": [{"name": "a", "rank": 8, "src": "/x"}]}, "src", id="adapter-key"
        ),
        pytest.param(
            {"enabled": True, "adapters": [{"name": "a", "rank": 8, "price": {"input_per_mtok": 1}}]},
            "output_per_mtok",
            id="half-price",
        ),
        pytest.param(
            {"enabled": True, "adapters": ONE, "initContainer": {"command": ["sh"]}},
            "image",
            id="init-no-image",
        ),
        pytest.param(
            {"enabled": True, "adapters": ONE, "initContainer": {"image": "x", "script": "y"}},
            "script",
            id="init-key",
        ),
        pytest.param(
            {"enabled": True, "adapters": ONE, "volume": {"emptyDir": {}, "configMap": {"name": "x"}}},
            "volume",
            id="two-volume-sources",
        ),
        pytest.param(
            {"enabled": True, "adapters": ONE, "mountPath": "adapters"}, "mountPath", id="relative-mount"
        ),
    ],
)
def test_schema_refuses_bad_lora_values(helm: str, lora: dict[str, Any], needle: str, tmp_path: Path) -> None:
    err = refused(_pool(lora), helm, tmp_path)
    assert SCHEMA_ERROR.search(err), err
    assert needle in err, err


@pytest.mark.parametrize(
    ("lora", "message"),
    [
        pytest.param(
            {"enabled": True}, "pools[p].lora: enabled needs at least one entry in adapters", id="none"
        ),
        pytest.param(
            {"enabled": True, "adapters": [{"name": "a", "rank": 8}, {"name": "a", "rank": 8}]},
            'pools[p].lora: duplicate adapter name "a"',
            id="duplicate",
        ),
        pytest.param(
            {"enabled": True, "maxLoraRank": 8, "adapters": [{"name": "a", "rank": 16}]},
            'pools[p].lora: adapter "a" has rank 16, above maxLoraRank 8',
            id="rank-above-max",
        ),
        pytest.param(
            {"enabled": True, "maxLoras": 4, "maxCpuLoras": 2, "adapters": ONE},
            "pools[p].lora: maxCpuLoras (2) must be at least maxLoras (4)",
            id="cpu-below-gpu",
        ),
        pytest.param(
            {"enabled": True, "adapters": [{"name": "p", "rank": 8}]},
            'pools[p].lora: adapter "p" is named like the served model',
            id="named-like-the-model",
        ),
    ],
)
def test_render_time_lora_checks(lora: dict[str, Any], message: str, tmp_path: Path) -> None:
    err = refused(_pool(lora), "helm4", tmp_path)
    assert message in err, err


def test_a_pool_named_like_a_yaml_boolean_stays_a_string(tmp_path: Path) -> None:
    """`on`, `off`, `yes`, `no` are valid pool names (DNS labels); unquoted they became booleans."""
    out = helm_template(
        {"pools": [{"name": "on", "model": "m"}, {"name": "no", "model": "mm"}]}, tmp=tmp_path
    )
    assert out.ok, out.stderr
    docs = out.docs
    labels = [
        d["metadata"]["labels"]["llm-gateway.io/pool"]
        for d in docs
        if "llm-gateway.io/pool" in d.get("metadata", {}).get("labels", {})
    ]
    assert labels and set(labels) == {"on", "no"}
    assert {p["name"] for p in yaml.safe_load(policy_text(docs))["pools"]} == {"on", "no"}
