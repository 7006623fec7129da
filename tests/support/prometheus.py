"""A real Prometheus server (Debian's `prometheus` package) on loopback, for observability tests.

`running_prometheus` writes a config that scrapes the given targets every second, starts the server
on a free port with a temporary TSDB, and yields a small query client. `every_value` rewrites a
PromQL expression so that it keeps every series it computes instead of filtering them: comparisons
get the `bool` modifier (an alert's threshold then yields 0/1 instead of dropping healthy series).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.procs import free_port, stop, wait_http

PROMETHEUS = shutil.which("prometheus")


class Prom:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str) -> list[dict[str, Any]]:
        r = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = r.json()
        assert r.status_code == 200 and body["status"] == "success", (expr, body)
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def value(self, expr: str) -> float | None:
        """The single value of a query that yields one series (None while it yields none)."""
        result = self.query(expr)
        if not result:
            return None
        assert len(result) == 1, (expr, result)
        return float(result[0]["value"][1])

    def targets_up(self) -> bool:
        r = httpx.get(f"{self.url}/api/v1/targets", timeout=10).json()
        active = r["data"]["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)


def start_prometheus(tmp: Path, targets: dict[str, list[str]]) -> tuple[Prom, subprocess.Popen[bytes]]:
    """Prometheus scraping `targets` (job -> ["host:port", ...]) every second, ready; the caller stops
    the process."""
    if PROMETHEUS is None:
        pytest.fail(
            "prometheus is missing: apt-get install -y --no-install-recommends prometheus (.ci/run does)"
        )
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": hosts}]} for job, hosts in targets.items()
        ],
    }
    cfg = tmp / "prometheus.yml"
    cfg.write_text(yaml.safe_dump(config))
    port = free_port()
    log = tmp / "prometheus.log"
    with log.open("wb") as out:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={cfg}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/-/ready", proc, timeout=60, log=log)
    except BaseException:
        stop(proc)
        raise
    return Prom(url), proc


@contextmanager
def running_prometheus(tmp: Path, targets: dict[str, list[str]]) -> Iterator[Prom]:
    """Prometheus scraping `targets` (job -> ["host:port", ...]) every second until the block ends."""
    prom, proc = start_prometheus(tmp, targets)
    try:
        yield prom
    finally:
        stop(proc)


_COMPARISON = re.compile(r"(==|!=|>=|<=|>|<)(?!\s*bool\b)")


def every_value(expr: str) -> str:
    """`expr` with `bool` after each comparison outside selectors, strings and ranges."""
    out: list[str] = []
    i, depth_brace, quote = 0, 0, ""
    while i < len(expr):
        c = expr[i]
        if quote:
            out.append(c)
            if c == "\\":
                out.append(expr[i + 1])
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
            out.append(c)
        elif c == "{":
            depth_brace += 1
            out.append(c)
        elif c == "}":
            depth_brace -= 1
            out.append(c)
        elif depth_brace == 0 and (m := _COMPARISON.match(expr, i)):
            out.append(m.group(1) + " bool")
            i += len(m.group(1))
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)
