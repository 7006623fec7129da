"""Offline checks of rendered Kubernetes manifests that kubernetes-validate cannot do (scripts/helm-check).

    python scripts/k8s_validate.py crs SCHEMA_DIR FILE...      custom resources against shared/k8s-schemas
    python scripts/k8s_validate.py policy FILE OUT             write the gateway policy of the rendered
                                                               ConfigMap to OUT (for `llmgw config check`)

`crs` validates every ScaledObject, ServiceMonitor, PrometheusRule, ... against the CRD's JSON Schema in
strict mode: the upstream schemas allow unknown fields (the API server prunes them), so a typo such as
`spec.minReplicas` would pass; like `kubectl apply --validate=strict`, we reject it. A document whose
API group is neither built into Kubernetes nor covered by a schema fails too: nothing is skipped
silently. kubernetes-validate covers the built-in kinds.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import yaml

# API groups served by Kubernetes itself: kubernetes-validate checks these (per version, strictly).
CORE_GROUPS = {
    "",
    "apps",
    "batch",
    "autoscaling",
    "policy",
    "networking.k8s.io",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "scheduling.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
}


def _strict(node: Any) -> Any:
    """Close every object schema that lists properties and does not say otherwise."""
    if isinstance(node, dict):
        if (
            node.get("type") == "object"
            and "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            node["additionalProperties"] = False
        for value in node.values():
            _strict(value)
    elif isinstance(node, list):
        for value in node:
            _strict(value)
    return node


def load_schemas(schema_dir: Path) -> dict[tuple[str, str], jsonschema.Draft7Validator]:
    schemas: dict[tuple[str, str], jsonschema.Draft7Validator] = {}
    for path in sorted(schema_dir.glob("*.json")):
        schema = _strict(json.loads(path.read_text(encoding="utf-8")))
        key = (schema["properties"]["apiVersion"]["enum"][0], schema["properties"]["kind"]["enum"][0])
        schemas[key] = jsonschema.Draft7Validator(schema)
    if not schemas:
        raise SystemExit(f"no CRD schemas (*.json) in {schema_dir}")
    return schemas


def documents(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for doc in yaml.safe_load_all(fh):
            if doc:
                if not isinstance(doc, dict):
                    raise SystemExit(f"{path}: a document is not a mapping: {doc!r:.80}")
                yield doc


def check_crs(schemas: dict[tuple[str, str], jsonschema.Draft7Validator], path: Path) -> list[str]:
    """Problems of the custom resources in one file (empty = valid); counts what was checked."""
    problems: list[str] = []
    for doc in documents(path):
        api, kind = str(doc.get("apiVersion", "")), str(doc.get("kind", ""))
        name = (doc.get("metadata") or {}).get("name", "?")
        group = api.rpartition("/")[0]
        validator = schemas.get((api, kind))
        if validator is None:
            if group not in CORE_GROUPS:
                problems.append(f"{path}: {kind}/{name}: no schema for {api} {kind} in the CRD schema dir")
            continue
        for err in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
            where = "/".join(map(str, err.absolute_path)) or "(top level)"
            problems.append(f"{path}: {kind}/{name}: {where}: {err.message}")
    return problems


def policy_of(path: Path) -> str:
    """The gateway policy (`config.yaml`) of the one gateway ConfigMap in a rendered file."""
    found = [
        doc["data"]["config.yaml"]
        for doc in documents(path)
        if doc.get("kind") == "ConfigMap" and "config.yaml" in (doc.get("data") or {})
    ]
    if len(found) != 1:
        raise SystemExit(f"{path}: expected one ConfigMap with config.yaml, found {len(found)}")
    text: str = found[0]
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    crs = sub.add_parser("crs", help="validate custom resources against CRD JSON Schemas (strict)")
    crs.add_argument("schema_dir", type=Path)
    crs.add_argument("files", type=Path, nargs="+")
    pol = sub.add_parser("policy", help="write the rendered gateway policy to OUT")
    pol.add_argument("file", type=Path)
    pol.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    if args.command == "policy":
        args.out.write_text(policy_of(args.file), encoding="utf-8")
        return 0
    schemas = load_schemas(args.schema_dir)
    problems: list[str] = []
    checked = 0
    for path in args.files:
        problems += check_crs(schemas, path)
        checked += sum(1 for d in documents(path) if (d.get("apiVersion"), d.get("kind")) in schemas)
    for line in problems:
        print(line, file=sys.stderr)
    if not problems:
        print(f"custom resources OK: {checked} checked against {args.schema_dir}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
