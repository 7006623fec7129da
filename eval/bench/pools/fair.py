"""Fair shares of a saturated pool (issue 42): tenant A offers 10x its share, B and C their share.

    python -m eval.bench.pools.fair [--duration S] [--share-rate R] [--slo-ttft-ms MS] [--out FILE]

One simulator replica of small capacity (`max_num_seqs` 4, the gateway holding above 4 in flight),
three tenants with keys of their own (orgs a, b, c; same tier, weight 1), open-loop Poisson streams.
Runs, each on a fresh simulator and gateway: `alone` (B and C only, what they get without A),
`fifo` (A, B, C; `admission.fairness.enabled: false`: arrival order), `fair` (A, B, C; VTC), and A
alone with FIFO and with fair queuing (work conservation: the same throughput). Per tenant: goodput
(requests/s answered with TTFT within the SLO), P99 TTFT, requests answered, answers per second until
the last. A report, not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import secrets
import sys
import tempfile
import time
from collections.abc import Iterator
from hashlib import sha256
from pathlib import Path
from typing import Any

from eval.bench.pools._load import Result, percentile, run_load
from eval.bench.pools._scenarios import MODEL, summary_body
from eval.bench.procs import free_port, simulator, spawned

TENANTS = ("a", "b", "c")
# One replica: ~20 ms per engine step, 32 output tokens, 4 sequences at a time.
SIM_FLAGS = ["--step-base-ms", "20", "--decode-per-seq-ms", "1", "--max-num-seqs", "4"]


def _policy(sim_port: int, keys: dict[str, str], fair: bool, pool_model: str = MODEL) -> str:
    lines = [
        "pools:",
        f"  - name: {MODEL}",
        f"    model: {pool_model}",
        f'    endpoints: {{static: ["http://127.0.0.1:{sim_port}"]}}',
        "    timeouts: {connect_s: 2, first_token_s: 300, total_s: 600}",
        "    saturation: {inflight: 4}",
        f"    admission: {{max_queued: 100000, max_wait_s: 600, fairness: {{enabled: {str(fair).lower()}}}}}",
        "models:",
        f"  - {{name: {MODEL}, route: {{pool: {MODEL}}}, max_tokens: {{default: 32, cap: 64}}}}",
        "limits: {backend: memory}",
        "tenancy:",
        "  keys:",
    ]
    for t, key in keys.items():
        digest = sha256(key.encode()).hexdigest()
        lines.append(f"    - {{id: {t}, sha256: {digest}, org: {t}, app: bench}}")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def _stack(
    work: Path, name: str, keys: dict[str, str], fair: bool, engine: tuple[int, str] | None = None
) -> Iterator[str]:
    """A gateway (and a simulator, unless `engine` names a running one: its port and model)."""
    gw = free_port()
    policy = work / f"{name}.yaml"
    with contextlib.ExitStack() as stack:
        if engine is None:
            port, model = free_port(), MODEL
            flags = ["--served-model-name", MODEL, *SIM_FLAGS]
            stack.enter_context(simulator(port, flags, work / f"{name}-sim.log"))
        else:
            port, model = engine
        policy.write_text(_policy(port, keys, fair, model))
        args = [sys.executable, "-m", "gateway", "serve", "--config", str(policy), "--port", str(gw)]
        log = work / f"{name}-gateway.log"
        stack.enter_context(spawned(args, None, f"http://127.0.0.1:{gw}/readyz", log))
        yield f"http://127.0.0.1:{gw}/v1/chat/completions"


async def _offer(
    url: str, rates: dict[str, float], keys: dict[str, str], duration: float
) -> dict[str, list[Result]]:
    # A tenant's arrivals are seeded by its name: B and C send the same requests at the same times in
    # every run, so `alone` and `fair` compare like with like.
    runs = [
        run_load(url, summary_body, rate, duration, seed=TENANTS.index(t) + 1, key=keys[t])
        for t, rate in rates.items()
    ]
    return dict(zip(rates, await asyncio.gather(*runs), strict=True))


def tenant_figures(results: list[Result], duration: float, slo_s: float, wall_s: float) -> dict[str, Any]:
    """One tenant's run: goodput (answered within the TTFT SLO, per second of offered load), P99
    TTFT, requests sent and answered, answers per second until the last one (`wall_s`: throughput,
    for work conservation)."""
    ok = [r for r in results if r.ok]
    ttfts = [r.ttft for r in ok if r.ttft is not None]
    good = sum(1 for t in ttfts if t <= slo_s)
    return {
        "sent": len(results),
        "ok": len(ok),
        "goodput_rps": round(good / duration, 3),
        "slo_attainment": round(good / len(results), 3) if results else None,
        "ttft_p99_s": round(percentile(ttfts, 99), 3),
        "answered_per_s": round(len(ok) / wall_s, 3),
    }


def run(
    work: Path,
    name: str,
    rates: dict[str, float],
    fair: bool,
    duration: float,
    slo_s: float,
    engine: tuple[int, str] | None = None,
) -> dict[str, Any]:
    keys = {t: "sk-" + secrets.token_hex(16) for t in TENANTS}
    print(f"  {name}: {rates} ...", file=sys.stderr, flush=True)
    with _stack(work, name, keys, fair, engine) as url:
        t0 = time.perf_counter()
        results = asyncio.run(_offer(url, rates, keys, duration))
        wall = time.perf_counter() - t0
    return {t: tenant_figures(rs, duration, slo_s, wall) for t, rs in results.items()}


def table(runs: dict[str, dict[str, Any]]) -> str:
    rows = ["run        tenant  sent    ok  goodput/s  p99 TTFT s  answered/s"]
    for name, per in runs.items():
        for t, f in per.items():
            counts = f"{f['sent']:>5} {f['ok']:>5}"
            figures = f"{f['goodput_rps']:>10.2f} {f['ttft_p99_s']:>11.2f} {f['answered_per_s']:>11.2f}"
            rows.append(f"{name:<10} {t:<6} {counts} {figures}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.bench.pools.fair", description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of offered load per run")
    ap.add_argument(
        "--share-rate",
        type=float,
        default=1.2,
        help="requests/s B and C offer each (their share); A offers 10x",
    )
    ap.add_argument("--slo-ttft-ms", type=float, default=2000.0, help="a request is good within this TTFT")
    ap.add_argument("--out", type=Path, help="write the JSON report here")
    args = ap.parse_args(argv)
    share, slo = args.share_rate, args.slo_ttft_ms / 1000
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-fair-") as tmp:
        work = Path(tmp)
        runs["alone"] = run(work, "alone", {"b": share, "c": share}, True, args.duration, slo)
        everyone = {"a": 10 * share, "b": share, "c": share}
        runs["fifo"] = run(work, "fifo", everyone, False, args.duration, slo)
        runs["fair"] = run(work, "fair", everyone, True, args.duration, slo)
        # Work conservation: a lone tenant gets the whole pool either way.
        lone = {"a": 10 * share}
        runs["lone-fifo"] = run(work, "lone-fifo", lone, False, args.duration, slo)
        runs["lone-fair"] = run(work, "lone-fair", lone, True, args.duration, slo)
    report = {"duration_s": args.duration, "share_rate": share, "slo_ttft_s": slo, "runs": runs}
    for t in ("b", "c"):
        alone = runs["alone"][t]["goodput_rps"]
        report[f"{t}_fair_goodput_vs_alone"] = (
            round(runs["fair"][t]["goodput_rps"] / alone, 3) if alone else None
        )
    fifo_rate = runs["lone-fifo"]["a"]["answered_per_s"]
    report["lone_fair_vs_fifo_throughput"] = (
        round(runs["lone-fair"]["a"]["answered_per_s"] / fifo_rate, 3) if fifo_rate else None
    )
    publish(runs, report, args.out)
    return 0


def publish(runs: dict[str, dict[str, Any]], report: dict[str, Any], out: Path | None) -> None:
    """The table and the report's figures on stdout; the whole report (runs included) to `out`."""
    print(table(runs))
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}))
    if out:
        out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
