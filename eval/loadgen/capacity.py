"""`llmgw bench capacity`: the goodput knee vs simulator replica count, and alert/KEDA thresholds.

For each replica count N: start N `llmgw sim` processes (one profile, extra flags passed through), sweep
offered load `N x rates-per-replica` against them directly (the client round-robins over the replicas,
as an ideal balancer would), and find the knee (stats.py). While each level runs, every replica's
`/metrics` is scraped every 0.5 s for `vllm:num_requests_waiting`, `vllm:num_requests_running` and the
KV-cache usage (`vllm:kv_cache_usage_perc`, or the older `vllm:gpu_cache_usage_perc`).

Suggested thresholds are what a replica shows *at the knee*: the P90 over scrapes and replicas of the
waiting queue (at least 1) and of KV usage at the knee level. Below them a replica is still inside its
SLO envelope; a sustained average above them means the pool is past its knee, which is the point to
alert and to scale out (a KEDA Prometheus trigger on `avg(vllm:num_requests_waiting)`, an alert on KV
usage). The report also shows the level just past the knee, the contrast the thresholds separate.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from eval.loadgen.report import FORMAT, format_knee, workload_echo, write_json
from eval.loadgen.runner import Level
from eval.loadgen.stats import percentile
from eval.loadgen.sweep import build_report, prompts_for, run_sweep, write_outputs
from eval.loadgen.workload import Workload, with_overrides

_GAUGES = {
    "vllm:num_requests_waiting": "waiting",
    "vllm:num_requests_running": "running",
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:gpu_cache_usage_perc": "kv_usage_legacy",
}


def parse_gauges(text: str) -> dict[str, float]:
    """The gauges above from a Prometheus text exposition (summed over label sets)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        key = _GAUGES.get(name)
        if key is None:
            continue
        try:
            value = float(line.rsplit(" ", 1)[1])
        except (IndexError, ValueError):
            continue
        out[key] = out.get(key, 0.0) + value
    if "kv_usage" not in out and "kv_usage_legacy" in out:
        out["kv_usage"] = out["kv_usage_legacy"]
    out.pop("kv_usage_legacy", None)
    return out


def _dist(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"p50": percentile(values, 50), "p90": percentile(values, 90), "max": max(values)}


class MetricsWatcher:
    """Scrapes the replicas while one level runs; `stop()` returns the distributions it saw."""

    def __init__(self, urls: list[str], interval_s: float = 0.5) -> None:
        self._urls = [u.rstrip("/") + "/metrics" for u in urls]
        self._interval = interval_s
        self._seen: dict[str, list[float]] = {"waiting": [], "running": [], "kv_usage": []}

    async def observe(self, level: Level) -> Callable[[], Awaitable[dict[str, Any]]]:
        task = asyncio.create_task(self._loop())

        async def stop() -> dict[str, Any]:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            seen, self._seen = self._seen, {k: [] for k in self._seen}
            return {name: _dist(values) for name, values in seen.items()} | {"scrapes": len(seen["waiting"])}

        return stop

    async def _loop(self) -> None:
        timeout = aiohttp.ClientTimeout(total=2)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                for url in self._urls:
                    try:
                        async with session.get(url) as resp:
                            gauges = parse_gauges(await resp.text())
                    except (aiohttp.ClientError, TimeoutError):
                        continue
                    for key, values in self._seen.items():
                        if key in gauges:
                            values.append(gauges[key])
                await asyncio.sleep(self._interval)


def _wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"simulator exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=1.0):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout_s}s")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_replicas(
    n: int, profile: str, names: list[str], extra: list[str], log_dir: Path
) -> tuple[list[subprocess.Popen[bytes]], list[str]]:
    procs: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        for i in range(n):
            port = _free_port()
            args = ["--host", "127.0.0.1", "--port", str(port), "--profile", profile]
            args += ["--served-model-name", *names, *extra]
            with open(log_dir / f"sim-{n}-{i}.log", "wb") as log:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "gateway", "sim", *args], stdout=log, stderr=subprocess.STDOUT
                    )
                )
            urls.append(f"http://127.0.0.1:{port}")
        for proc, url in zip(procs, urls, strict=True):
            _wait_ready(url + "/health", proc)
    except BaseException:
        stop_replicas(procs)
        raise
    return procs, urls


def stop_replicas(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def thresholds(level: dict[str, Any]) -> dict[str, Any]:
    observed = level.get("observed") or {}
    waiting, kv = observed.get("waiting"), observed.get("kv_usage")
    return {
        # A queue threshold below 1 would fire on any single waiting request.
        "num_requests_waiting": max(1, math.ceil(waiting["p90"])) if waiting else None,
        "kv_cache_usage_perc": round(kv["p90"], 3) if kv else None,
    }


def _past_knee(summaries: list[dict[str, Any]], knee: int | None) -> dict[str, Any] | None:
    """The lowest level above the knee (levels run sorted by load), or the first one without a knee."""
    at = 0 if knee is None else knee + 1
    if at >= len(summaries):
        return None
    s = summaries[at]
    attainment = s["goodput"]["slo_attainment"]
    return {"level": s["level"], "slo_attainment": attainment, "observed": s.get("observed")}


def run_capacity(workload: Workload, source: str | None, args: argparse.Namespace) -> int:
    per_replica = args.rates_per_replica or (workload.sweep.rates if workload.sweep else []) or [1, 2, 4, 8]
    names = sorted({a.name for a in workload.aliases})
    prompts = prompts_for(workload)
    rows: list[dict[str, Any]] = []
    for n in args.replicas:
        procs, urls = start_replicas(n, args.profile, names, list(args.sim_arg), args.out / "logs")
        try:
            # The simulators take no key; the workload's tenants are for gateways.
            sweep: dict[str, Any] = {"rates": [r * n for r in per_replica], "concurrencies": []}
            if workload.sweep is not None:
                sweep["knee_fraction"] = workload.sweep.knee_fraction
            overrides = {"target": {"base_urls": urls}, "tenants": [], "sweep": sweep}
            w = with_overrides(source or "defaults", workload.model_dump(mode="json"), overrides)
            watcher = MetricsWatcher(urls)
            results, summaries = asyncio.run(run_sweep(w, prompts, args.quiet, watcher.observe))
        finally:
            stop_replicas(procs)
        report = build_report(w, source, summaries)
        written = write_outputs(args.out, report, results, not args.no_plots, prefix=f"replicas-{n}")
        knee_i = report["knee_index"]
        row = {
            "replicas": n,
            "knee": report["knee"],
            "suggested_thresholds": thresholds(summaries[knee_i]) if knee_i is not None else None,
            # What the replicas look like one level past the knee: the contrast the thresholds separate.
            "past_knee": _past_knee(summaries, knee_i),
            "levels": summaries,
            "files": [str(p) for p in written],
        }
        rows.append(row)
        print(f"{n} replica(s): {format_knee(report['knee'])}; thresholds {row['suggested_thresholds']}")
    out = {
        "format": FORMAT,
        "kind": "capacity",
        "profile": args.profile,
        "sim_args": list(args.sim_arg),
        "rates_per_replica": per_replica,
        "workload": workload_echo(workload, source),
        "replicas": rows,
    }
    files = [write_json(args.out / "capacity.json", out)]
    if not args.no_plots:
        from eval.loadgen.plot import plot_capacity

        files.append(plot_capacity(rows, args.out / "capacity.png"))
    print("wrote " + ", ".join(str(p) for p in files))
    return 0
