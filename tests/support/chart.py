"""Rendering the Helm chart and the kustomize overlays for tests, and reading what they render.

The binaries come from scripts/install-k8s-tools (.tools/bin); CI installs them before the tests. A
missing binary fails the test with that instruction: rendering tests are never skipped.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "llm-gateway"
TOOLS = ROOT / ".tools" / "bin"
SHARED = ROOT.parent / "shared"
SCENARIOS = sorted(p.name.removesuffix("-values.yaml") for p in (ROOT / "ci").glob("*-values.yaml"))
OVERLAYS = sorted(p.name for p in (ROOT / "k8s" / "overlays").iterdir() if p.is_dir())
HELMS = ("helm3", "helm4")
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"}

Doc = dict[str, Any]


def tool(name: str) -> Path:
    path = TOOLS / name
    if not path.is_file():
        pytest.fail(f"{path} is missing: run scripts/install-k8s-tools (make k8s-tools; CI does)")
    return path


@dataclass(frozen=True)
class Rendered:
    ok: bool
    docs: list[Doc]
    stderr: str


def helm_template(
    values: Mapping[str, Any] | None = None,
    scenario: str | None = None,
    helm: str = "helm4",
    tmp: Path | None = None,
    namespace: str = "llm",
) -> Rendered:
    """`helm template` of the chart with a ci scenario and/or extra values (a dict, written as YAML)."""
    args = [str(tool(helm)), "template", "llmgw", str(CHART), "-n", namespace]
    if scenario is not None:
        args += ["-f", str(ROOT / "ci" / f"{scenario}-values.yaml")]
    if values is not None:
        assert tmp is not None, "extra values need a tmp dir"
        path = tmp / f"values-{len(list(tmp.iterdir()))}.yaml"
        path.write_text(yaml.safe_dump(dict(values)), encoding="utf-8")
        args += ["-f", str(path)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d] if proc.returncode == 0 else []
    return Rendered(proc.returncode == 0, docs, proc.stderr)


def kustomize(overlay: str) -> list[Doc]:
    out = subprocess.run(
        [str(tool("kubectl")), "kustomize", str(ROOT / "k8s" / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def of_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d.get("kind") == kind]


def pod_specs(docs: list[Doc]) -> Iterator[tuple[str, Doc, Doc]]:
    """(name, pod metadata, pod spec) of every pod the documents would create."""
    for d in docs:
        name = f"{d['kind']}/{d['metadata']['name']}"
        if d["kind"] in WORKLOADS:
            tpl = d["spec"]["template"]
            yield name, tpl.get("metadata", {}), tpl["spec"]
        elif d["kind"] == "Pod":
            yield name, d["metadata"], d["spec"]


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A Kubernetes LabelSelector (matchLabels + matchExpressions) against a label set."""
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def policy_text(docs: list[Doc]) -> str:
    [text] = [
        d["data"]["config.yaml"] for d in of_kind(docs, "ConfigMap") if "config.yaml" in d.get("data", {})
    ]
    assert isinstance(text, str)
    return text
