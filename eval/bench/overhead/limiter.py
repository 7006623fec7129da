"""The limiter comparison (issue 3): a second gateway with auth + the Redis limiter against the spine.

The limiter gateway serves the same upstream with a policy that authenticates one static key and runs the
Redis backend with limits far above what the benchmark can reach, so every request pays the full
admission path (key lookup, one Redis round trip for admission, settlement) and none is refused. The
comparison is limiter - spine at the same percentile, the two measured interleaved on the same core.
"""

from __future__ import annotations

import math
import re
import urllib.request
from pathlib import Path
from typing import Any

from eval.bench.overhead.policy import pool_and_model_yaml

BACKEND_HISTOGRAM = "llmgw_ratelimit_backend_seconds"

# Limits no benchmark run can reach: the limiter does all its work and never refuses.
UNREACHABLE_LIMITS = """\
limits:
  backend: redis
  tiers:
    standard:
      key: {requests_per_min: 100000000, tokens_per_min: 100000000000, concurrent: 100000}
      org: {tokens_per_min: 100000000000}
  global: {requests_per_min: 100000000}
"""


# Appended to UNREACHABLE_LIMITS's `limits:` block: admission overlapped with the pool call
# (limits.speculative, docs/design/017). With these limits every key stays far from them, so every
# request after a key's first one is admitted speculatively.
SPECULATIVE = "  speculative: {enabled: true}\n"


def unreachable_limits(speculative: bool = False) -> str:
    return UNREACHABLE_LIMITS + (SPECULATIVE if speculative else "")


def write_limiter_policy(path: Path, upstream_port: int, key_sha256: str, speculative: bool = False) -> None:
    """The limiter gateway's policy: the spine's pool and model, plus auth (one static key) and limits."""
    path.write_text(
        pool_and_model_yaml(upstream_port) + unreachable_limits(speculative) + "tenancy:\n"
        f"  keys: [{{id: bench, sha256: {key_sha256}, org: bench, app: bench}}]\n"
    )


def parse_histogram(text: str, name: str = BACKEND_HISTOGRAM) -> dict[str, Any]:
    """A Prometheus histogram from exposition text, label sets summed: `count`, `sum_s` and cumulative
    `buckets` by their `le` label ("0.0005", ..., "+Inf")."""
    buckets: dict[str, float] = {}
    total = count = 0.0
    pattern = re.compile(rf"^{re.escape(name)}(_bucket|_sum|_count)(\{{[^}}]*\}})? (\S+)$")
    for line in text.splitlines():
        m = pattern.match(line)
        if not m:
            continue
        kind, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
        if kind == "_sum":
            total += value
        elif kind == "_count":
            count += value
        elif le := re.search(r'le="([^"]+)"', labels):
            buckets[le.group(1)] = buckets.get(le.group(1), 0.0) + value
    return {"count": int(count), "sum_s": total, "buckets": {k: int(v) for k, v in buckets.items()}}


def histogram_delta(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """Observations between two scrapes of the same histogram."""
    b = before.get("buckets", {})
    return {
        "count": after["count"] - before.get("count", 0),
        "sum_s": after["sum_s"] - before.get("sum_s", 0.0),
        "buckets": {k: v - b.get(k, 0) for k, v in after["buckets"].items()},
    }


def summarize_histogram(h: dict[str, Any]) -> dict[str, Any]:
    """Count, mean, and bucket-bound percentiles in ms: `p50_le_ms`/`p99_le_ms` are the upper bound of
    the bucket holding that quantile (None when it is the +Inf bucket)."""
    if h.get("error") or not h.get("count"):
        return dict(h)
    count = h["count"]
    ordered = sorted(h["buckets"].items(), key=lambda kv: float(kv[0]))

    def upper_bound(q: float) -> float | None:
        for le, cum in ordered:
            if cum >= q * count:
                bound = float(le)
                return None if math.isinf(bound) else round(bound * 1000, 3)
        return None

    return {
        "count": count,
        "mean_ms": round(h["sum_s"] / count * 1000, 4),
        "p50_le_ms": upper_bound(0.50),
        "p99_le_ms": upper_bound(0.99),
        "buckets": h["buckets"],
    }


def scrape_histogram(port: int, name: str = BACKEND_HISTOGRAM) -> dict[str, Any]:
    """The gateway's `/metrics`, reduced to one histogram ({"error": ...} when the scrape fails)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5.0) as resp:
            return parse_histogram(resp.read().decode(), name)
    except OSError as exc:
        return {"error": str(exc)}


def backend_phases(after_latency: dict[str, Any], after_all: dict[str, Any]) -> dict[str, Any]:
    """The admission-call histogram per phase: the latency rounds (concurrency 1 and 8 plus warm-up,
    where the figure is close to the Redis round trip) and the throughput runs (concurrency 32, where
    it also holds the wait for the saturated event loop)."""
    if after_latency.get("error") or after_all.get("error"):
        err = after_latency.get("error") or after_all.get("error")
        return {"latency_phase": {"error": err}, "throughput_phase": {"error": err}}
    return {
        "latency_phase": summarize_histogram(after_latency),
        "throughput_phase": summarize_histogram(histogram_delta(after_all, after_latency)),
    }


def compare_latency(latency: dict[str, Any]) -> dict[str, Any]:
    """Per `mode@conc` that has a limiter side: spine and limiter P50/P99 and the delta limiter - spine,
    and how busy both cores were during each side's batches. The spine is the limiter's own ("spine")
    when it has one, else the main gateway."""
    out: dict[str, Any] = {}
    for key, row in latency.items():
        lim, spine = row.get("limiter"), row.get("spine") or row.get("gateway")
        if not lim or not spine or not lim.get("n") or not spine.get("n"):
            continue
        cell: dict[str, Any] = {"mode": row["mode"], "concurrency": row["concurrency"], "n": lim["n"]}
        for q in ("p50", "p99"):
            cell[f"spine_{q}_ms"] = spine[f"{q}_ms"]
            cell[f"limiter_{q}_ms"] = lim[f"{q}_ms"]
            cell[f"delta_{q}_ms"] = round(lim[f"{q}_ms"] - spine[f"{q}_ms"], 4)
        for side, stats in (("spine", spine), ("limiter", lim)):
            for core in ("gateway_core_busy", "load_core_busy"):
                cell[f"{side}_{core}"] = stats.get(core)
        theirs = row.get("before-limiter")
        if theirs and theirs.get("n"):  # `--before`: the other checkout's limiter over the same spine
            for q in ("p50", "p99"):
                cell[f"before_delta_{q}_ms"] = round(theirs[f"{q}_ms"] - spine[f"{q}_ms"], 4)
        cell["errors"] = lim.get("errors", 0)
        out[key] = cell
    return out
