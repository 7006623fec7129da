"""The vLLM metric names the chart's dashboards and alerts use, and the families on a /metrics page:
what the conformance suites hold each engine to."""

from __future__ import annotations

import re
from pathlib import Path

CHART = Path(__file__).resolve().parents[2] / "helm" / "llm-gateway" / "files"


def names_in_chart() -> set[str]:
    names: set[str] = set()
    files = [*(CHART / "dashboards").glob("*.json"), *(CHART / "alerts").glob("*.yaml")]
    assert len(files) >= 3, files
    for path in files:
        names.update(re.findall(r"vllm:[A-Za-z0-9_:]+", path.read_text()))
    assert names, "no vllm: metric in the chart's dashboards and alerts"
    return names


def families(text: str) -> set[str]:
    """Sample names on the page and their families (a histogram's _bucket/_sum/_count, a counter's _total)."""
    out: set[str] = set()
    for line in text.splitlines():
        if line.startswith("vllm:"):
            name = re.split(r"[{ ]", line, maxsplit=1)[0]
            out.add(name)
            for suffix in ("_bucket", "_sum", "_count", "_total"):
                if name.endswith(suffix):
                    out.add(name.removesuffix(suffix))
    return out
