"""`make bench-lora` / `python -m eval.bench.lora`: adapter-aware picking vs round robin for LoRA adapters.

Setup (issue 29's acceptance): 8 adapters, Zipf-like popularity (s = 1.1, seeded: a0 gets ~40 % of the
requests, a7 ~4 %), 2 simulator replicas of the `small` profile with `--enable-lora --max-loras 2` and
every adapter given by `--lora-modules`; a request whose adapter is not in one of the 2 GPU slots
swaps it in (`--lora-swap-ms`, 30 ms by default), and one whose adapter cannot get a slot (both hold
adapters of running requests) waits in the queue, as in vLLM. Two sides, each on fresh replicas and
its own gateway, the same open-loop Poisson arrivals and the same request -> adapter draws:
- round_robin: `balancing: round_robin`, `lora.affinity: false` (the picker ignores adapters);
- adapter_aware: `balancing: least_load`, `lora.affinity: true`.
Figures: client-side TTFT (streamed; request sent -> first SSE event), mean and P99; adapter swaps per
1,000 requests from the replicas' `sim:lora_swaps_total`; and baseline / adapter-aware ratios. The JSON
report goes to bench-results/lora/. A report, not a test: the figures depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from eval.bench.lora.report import ratios, summarize, table
from eval.bench.lora.stack import AWARE, BASELINE, Replicas, Side, SideRun, policy, policy_yaml, run_side
from eval.bench.lora.workload import Workload, adapter_names
from eval.bench.procs import ROOT, dump_logs
from eval.sim.adapters import write_adapter


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m eval.bench.lora", description=__doc__.split("\n")[0])
    p.add_argument("--adapters", type=int, default=8)
    p.add_argument("--zipf-s", type=float, default=1.1, help="popularity exponent")
    p.add_argument("--rate", type=float, default=16.0, help="requests per second offered (Poisson)")
    p.add_argument("--duration", type=float, default=150.0, help="seconds of arrivals per side")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens per answer (ignore_eos)")
    p.add_argument("--max-loras", type=int, default=2)
    p.add_argument("--swap-ms", type=float, default=30.0, help="the simulators' --lora-swap-ms")
    p.add_argument("--profile", default="small", help="the simulators' profile")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, help="the JSON report (default bench-results/lora/lora-<time>.json)")
    return p.parse_args(argv)


def check_policies(sides: tuple[Side, ...], adapters: dict[str, Path], reps: Replicas) -> str | None:
    """Why the gateway refuses a side's policy, else None."""
    from gateway.config import ConfigError, parse_policy

    for side in sides:
        try:
            parse_policy(policy_yaml(policy(side, [1, 2], adapters, reps)), f"<{side.name}>")
        except ConfigError as exc:
            return f"{side.name}: {exc}"
    return None


def report(a: argparse.Namespace, wl: Workload, runs: list[SideRun]) -> dict[str, Any]:
    rows = []
    for run in runs:
        row = summarize(
            run.side.name, run.results, run.swaps, [wl.adapter(i) for i in range(len(run.results))]
        )
        row["replica_requests"] = run.replica_requests
        row["seconds"] = round(run.seconds, 1)
        rows.append(row)
    count = len(runs[0].results) if runs else 0
    return {
        "setup": {
            "adapters": a.adapters,
            "zipf_s": a.zipf_s,
            "shares": wl.shares(count),
            "replicas": 2,
            "max_loras": a.max_loras,
            "swap_ms": a.swap_ms,
            "profile": a.profile,
            "rate_per_s": a.rate,
            "duration_s": a.duration,
            "max_tokens": a.max_tokens,
            "seed": a.seed,
        },
        "runs": rows,
        "ratio_baseline_over_aware": ratios(rows[0], rows[1]),
    }


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    reps = Replicas(max_loras=a.max_loras, max_rank=8, swap_ms=a.swap_ms, profile=a.profile)
    sides = (BASELINE, AWARE)
    count = math.ceil(a.rate * a.duration * 1.5) + 200  # more draws than Poisson arrivals, surely
    wl = Workload.zipf(a.adapters, a.zipf_s, a.seed, count, a.max_tokens)
    with tempfile.TemporaryDirectory(prefix="bench-lora-") as tmp:
        work = Path(tmp)
        adapters = {n: write_adapter(work / "adapters" / n, 8) for n in adapter_names(a.adapters)}
        refused = check_policies(sides, adapters, reps)
        if refused is not None:
            print(f"bench-lora: the gateway does not take the policy: {refused}", file=sys.stderr)
            return 2
        runs: list[SideRun] = []
        for side in sides:
            print(f"bench-lora: {side.name} ...", file=sys.stderr, flush=True)
            try:
                runs.append(run_side(side, wl, adapters, reps, (a.rate, a.duration, a.seed), work))
            except Exception:
                dump_logs(work)
                raise
    out = report(a, wl, runs)
    print(table(out["runs"], out["ratio_baseline_over_aware"]))
    path = a.out or ROOT / "bench-results" / "lora" / f"lora-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
