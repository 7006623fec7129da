"""Bad values are refused before anything reaches a cluster: by values.schema.json (both Helm
majors, whose validators word errors differently) or by the chart's own render-time checks."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.chart import CHART, HELMS, SCENARIOS, helm_template

SCHEMA_ERROR = re.compile(r"values don't meet the specifications of the schema", re.I)


def refused(values: dict[str, Any], helm: str, tmp_path: Path) -> str:
    r = helm_template(values, helm=helm, tmp=tmp_path)
    assert not r.ok, f"{helm} rendered values it should refuse: {values}"
    return r.stderr


@pytest.mark.parametrize("helm", HELMS)
@pytest.mark.parametrize(
    ("values", "needles"),
    [
        pytest.param({"gateway": {"replicas": -1}}, ["replicas", "0"], id="negative-gateway-replicas"),
        pytest.param(
            {"pools": [{"name": "small", "model": "m", "replicas": -2}]}, ["replicas"], id="negative-pool"
        ),
        pytest.param({"gatway": {"replicas": 2}}, ["gatway"], id="unknown-top-level-key"),
        pytest.param({"gateway": {"replica": 2}}, ["replica"], id="unknown-nested-key"),
        pytest.param({"pools": [{"name": "small"}]}, ["model"], id="pool-without-model"),
        pytest.param(
            {"pools": [{"name": "small", "model": "m", "keda": {"queueThreshold": 5}}]},
            ["queueThreshold"],
            id="keda-threshold-number",
        ),
        pytest.param(
            {
                "pools": [
                    {
                        "name": "small",
                        "model": "m",
                        "keda": {
                            "extraTriggers": [
                                {"type": "cpu", "metadata": {"type": "Utilization", "value": 60}},
                            ]
                        },
                    }
                ]
            },
            ["value"],
            id="keda-extra-trigger-metadata-number",
        ),
        pytest.param({"pools": [{"name": "Small_Pool", "model": "m"}]}, ["name"], id="pool-name-not-dns"),
        pytest.param({"redis": {"mode": "replicated"}}, ["mode"], id="redis-mode-enum"),
        pytest.param(
            {"redis": {"mode": "external", "external": {"url": "redis://user:secret@redis:6379/0"}}},
            ["url"],
            id="redis-url-with-password",
        ),
    ],
)
def test_schema_refuses_bad_values(
    helm: str, values: dict[str, Any], needles: list[str], tmp_path: Path
) -> None:
    err = refused(values, helm, tmp_path)
    assert SCHEMA_ERROR.search(err), f"not a schema error:\n{err}"
    for needle in needles:
        assert needle in err, f"error does not name {needle!r}:\n{err}"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param(
            {"gateway": {"terminationGracePeriodSeconds": 20, "drainSeconds": 30}},
            "terminationGracePeriodSeconds (20) must be at least drainDelaySeconds + drainSeconds (33)",
            id="grace-shorter-than-drain",
        ),
        pytest.param(
            {"keda": {"enabled": True}},
            "keda.enabled needs monitoring.serviceMonitor.enabled",
            id="keda-without-scraping",
        ),
        pytest.param(
            {"redis": {"mode": "none"}},
            "redis.mode is none but config.limits.backend, config.tenancy.store or config.cache.backend "
            "is redis",
            id="redis-none-but-policy-needs-it",
        ),
        pytest.param(
            {"pools": [{"name": "a", "model": "m", "keda": {"minReplicaCount": 5, "maxReplicaCount": 2}}]},
            "pools[a].keda: minReplicaCount (5) must not exceed maxReplicaCount (2)",
            id="keda-min-above-max",
        ),
        pytest.param(
            {"pools": [{"name": "a", "model": "m"}, {"name": "a", "model": "m2"}]},
            'duplicate pool name "a"',
            id="duplicate-pool",
        ),
        pytest.param(
            {"redis": {"mode": "external"}},
            "give redis.external.secretName (preferred) or redis.external.url",
            id="external-redis-without-url",
        ),
    ],
)
def test_render_time_checks(values: dict[str, Any], message: str, tmp_path: Path) -> None:
    err = refused(values, "helm4", tmp_path)
    assert message in err, err


def test_schema_is_strict_everywhere() -> None:
    """Every object in values.schema.json closes its properties (or types its free-form values)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    loose: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            if (
                node.get("type") == "object"
                and "properties" in node
                and node.get("additionalProperties") is not False
            ):
                loose.append(path)
            for k, v in node.items():
                walk(v, f"{path}/{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}/{i}")

    walk(schema, "#")
    assert not loose, f"objects accepting unknown keys: {loose}"


def _documented_keys(text: str) -> list[tuple[str, bool]]:
    """(key path, has a comment above it) for every key in values.yaml, outside list items."""
    out: list[tuple[str, bool]] = []
    stack: list[tuple[int, str]] = []
    prev_comment = False
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("# yaml-language-server"):
            continue
        if stripped.startswith("#"):
            prev_comment = True
            continue
        indent = len(line) - len(line.lstrip())
        m = re.match(r"^([A-Za-z_][\w.-]*):", stripped)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        in_list = stripped.startswith("- ") or any(k.startswith("-") for _, k in stack)
        if m and not in_list:
            path = ".".join([k for _, k in stack] + [m.group(1)])
            out.append((path, prev_comment))
            stack.append((indent, m.group(1)))
        elif stripped.startswith("- "):
            stack.append((indent, "-"))
        prev_comment = False
    return out


def test_every_value_is_documented_and_typed() -> None:
    text = (CHART / "values.yaml").read_text()
    assert text.startswith("# yaml-language-server: $schema=values.schema.json"), (
        "line 1 must reference the schema"
    )
    keys = _documented_keys(text)
    assert len(keys) > 100, f"parsed only {len(keys)} keys"
    # Free-form values (resources, policy) are documented at their top; their inner keys are examples.
    free_form = ("config.", "resources.", "Resources.", "strategy.", "labels.")
    undocumented = [k for k, doc in keys if not doc and not any(f in k for f in free_form)]
    assert not undocumented, f"keys without a comment above them: {undocumented}"
    schema = json.loads((CHART / "values.schema.json").read_text())
    readme = (CHART / "README.md").read_text()
    for key, _ in keys:
        if any(f in key for f in free_form):
            continue
        node: Any = schema
        for part in key.split("."):
            props = node.get("properties") if "properties" in node else None
            if props is None and "$ref" in node:
                node = schema["definitions"][node["$ref"].split("/")[-1]]
                props = node.get("properties")
            assert props is not None and part in props, f"{key}: not in values.schema.json"
            node = props[part]
        assert f"`{key}`" in readme, f"{key}: not listed in the chart README"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenarios_are_valid_yaml_over_known_keys(scenario: str) -> None:
    # The scenarios are what CI lints; guard that they stay mappings (an empty file would lint the defaults).
    data = yaml.safe_load((CHART.parents[1] / "ci" / f"{scenario}-values.yaml").read_text())
    assert isinstance(data, dict) and data
