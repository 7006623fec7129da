"""The image tag follows the release: the package version (pyproject, `gateway.__version__`) is the
chart's appVersion, the tag the chart's images default to, and the tag every manifest, scenario and
build example names for the gateway's own images (docs/design/018-layout.md, CHANGELOG.md)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

from gateway import __version__
from tests.support.chart import CHART, ROOT, helm_template, pod_specs

# The gateway's own images (Dockerfile targets `runtime` and `sim`).
OWN_IMAGE = re.compile(r"ghcr\.io/llm-gateway/(llm-gateway(?:-sim)?):([\w.-]+)")
OWN_NAMES = {"ghcr.io/llm-gateway/llm-gateway", "ghcr.io/llm-gateway/llm-gateway-sim"}


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as f:
        version = tomllib.load(f)["project"]["version"]
    assert isinstance(version, str)
    return version


def test_the_package_and_the_chart_name_one_version() -> None:
    chart = _yaml(CHART / "Chart.yaml")
    assert __version__ == _version()
    assert chart["appVersion"] == _version()


def test_the_chart_images_default_to_the_app_version() -> None:
    values = _yaml(CHART / "values.yaml")
    assert values["image"]["tag"] == "", "an empty tag is the chart's appVersion"
    assert values["poolDefaults"]["simImage"]["tag"] == ""


def test_every_tag_of_our_images_is_the_version() -> None:
    files = [
        ROOT / "Dockerfile",
        *sorted((ROOT / "k8s").rglob("*.yaml")),
        *sorted((ROOT / "ci").glob("*.yaml")),
    ]
    refs = [
        (p.relative_to(ROOT).as_posix(), m[1], m[2]) for p in files for m in OWN_IMAGE.finditer(p.read_text())
    ]
    assert refs, "no image reference found: the pattern is stale"
    wrong = [r for r in refs if r[2] != _version()]
    assert not wrong, f"image tags other than {_version()}: {wrong}"


def test_kustomize_overlays_and_scenarios_pin_the_version() -> None:
    pins = []
    for path in sorted((ROOT / "k8s" / "overlays").glob("*/kustomization.yaml")):
        pins += [
            (path.name, i["name"], i["newTag"])
            for i in _yaml(path).get("images", [])
            if i["name"] in OWN_NAMES
        ]
    for path in sorted((ROOT / "ci").glob("*-values.yaml")):
        tag = (_yaml(path).get("image") or {}).get("tag")
        if tag is not None:
            pins.append((path.name, "image.tag", tag))
    assert pins, "no overlay pins our image: the test is stale"
    assert [p for p in pins if p[2] != _version()] == []


def test_the_rendered_chart_runs_the_version() -> None:
    rendered = helm_template()
    assert rendered.ok, rendered.stderr
    images = {c["image"] for _, _, spec in pod_specs(rendered.docs) for c in spec["containers"]}
    ours = {i for i in images if OWN_IMAGE.fullmatch(i)}
    assert f"ghcr.io/llm-gateway/llm-gateway:{_version()}" in ours, images
    assert {i.rsplit(":", 1)[1] for i in ours} == {_version()}
