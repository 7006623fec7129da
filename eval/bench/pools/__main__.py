"""Compare replica-picking strategies on simulator replicas and print the issue-5 figures.

    python -m eval.bench.pools [--scenario slow-replica|shared-prefix|all] [--duration S]

Each run starts fresh simulators and a gateway (caches cold, queues empty), offers the same
open-loop arrivals to each strategy, and reads prefix-cache and per-replica request counters from
the simulators. A report, not a test: figures depend on the machine (`nice` is applied to the
simulators; keep runs short on shared machines).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from eval.bench.pools._load import percentile
from eval.bench.pools._scenarios import RunResult, Scenario, run, shared_prefix, slow_replica


def summary(r: RunResult) -> dict[str, Any]:
    ttfts = [x.ttft for x in r.results if x.ttft is not None]
    loads = r.replica_requests
    mean_load = statistics.fmean(loads) if loads else 0.0
    return {
        "strategy": r.strategy,
        "requests": len(r.results),
        "ok": sum(x.ok for x in r.results),
        "ttft_mean_s": round(statistics.fmean(ttfts), 4) if ttfts else None,
        "ttft_p50_s": round(percentile(ttfts, 50), 4),
        "ttft_p99_s": round(percentile(ttfts, 99), 4),
        "prefix_hit_rate": round(r.prefix_hits / r.prefix_queries, 4) if r.prefix_queries else None,
        "prefix_hit_rate_with_warmup": round(r.whole_run_hit_rate, 4),
        "replica_requests": loads,
        "max_over_mean_load": round(max(loads) / mean_load, 3) if mean_load else None,
    }


def compare(sc: Scenario, strategies: tuple[str, str], work: Path, warmup: float) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    for strategy in strategies:
        print(f"  {sc.name}: {strategy} ...", file=sys.stderr, flush=True)
        runs.append(summary(run(sc, strategy, work, warmup)))
        print("   ", json.dumps(runs[-1]), file=sys.stderr, flush=True)
    out: dict[str, Any] = {"scenario": sc.name, "rate_per_s": sc.rate, "duration_s": sc.duration}
    out["warmup_s"] = warmup
    out["runs"] = runs
    base, new = runs
    if sc.name == "slow-replica":
        out["p99_ttft_cut"] = round(1 - new["ttft_p99_s"] / base["ttft_p99_s"], 3)
    else:
        out["mean_ttft_ratio"] = round(base["ttft_mean_s"] / new["ttft_mean_s"], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.bench.pools", description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", choices=["slow-replica", "shared-prefix", "all"], default="all")
    ap.add_argument("--duration", type=float, default=40.0, help="seconds of offered load per run")
    ap.add_argument(
        "--warmup", type=float, default=10.0, help="first seconds left out of the figures (cold caches)"
    )
    ap.add_argument("--slow-rate", type=float, default=9.0, help="requests/s offered in slow-replica")
    ap.add_argument("--prefix-rate", type=float, default=8.0, help="requests/s offered in shared-prefix")
    ap.add_argument("--out", type=Path, help="write the JSON report here")
    args = ap.parse_args(argv)
    reports = []
    with tempfile.TemporaryDirectory(prefix="bench-pools-") as tmp:
        work = Path(tmp)
        if args.scenario in ("slow-replica", "all"):
            sc = slow_replica(args.duration, args.slow_rate)
            reports.append(compare(sc, ("round_robin", "least_load"), work, args.warmup))
        if args.scenario in ("shared-prefix", "all"):
            sc = shared_prefix(args.duration, args.prefix_rate)
            reports.append(compare(sc, ("round_robin", "prefix_affinity"), work, args.warmup))
    text = json.dumps(reports, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
