"""SLO-aware admission on a ramp of offered load past the knee (issue 42): `queue` vs `shed` vs `reroute`.

    python -m eval.bench.pools.slo [--rates R,R,...] [--duration S] [--slo-ttft-ms MS] [--out DIR]

A routed alias over two simulator pools, `small` (tier 0: where every request starts) and `large`
(tier 1: a smaller, slower pool, idle unless a request is rerouted to it). Streamed requests of one
tenant arrive open-loop (Poisson) at each offered rate; each (action, rate) runs on a fresh gateway and
fresh simulators. The alias's SLO class has a TTFT target and `on_unattainable` set to the run's action:

- `queue`: held requests wait (today's behaviour);
- `shed`: a request the pool would hold past the target is answered 503 `slo_unattainable` at once;
- `reroute`: it goes to `large` when that pool is predicted to meet the target, else it is shed.

Per step: goodput (requests per second answered with a TTFT within the target), the share of requests
that met it, P99 TTFT of those answered, the requests shed and rerouted, and the P99 time to a shed
request's 503. Printed as one table, written as JSON and a PNG of goodput against offered load. A
report, not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from eval.bench.pools._load import Result, percentile, run_load
from eval.bench.pools._scenarios import MODEL, summary_body
from eval.bench.procs import free_port, simulator, spawned

ACTIONS = ("queue", "shed", "reroute")
# ~20 ms engine steps, 32 output tokens: small runs 4 sequences at a time (~5 requests/s), large 2
# with slower steps (~1.5 requests/s).
SIM_FLAGS = {
    "small": ["--step-base-ms", "20", "--decode-per-seq-ms", "1", "--max-num-seqs", "4"],
    "large": ["--step-base-ms", "30", "--decode-per-seq-ms", "1", "--max-num-seqs", "2"],
}
INFLIGHT = {"small": 4, "large": 2}


def _policy(ports: dict[str, int], action: str, slo_ms: float) -> str:
    lines = ["pools:"]
    for name, port in ports.items():
        lines += [
            f"  - name: {name}",
            f"    model: {MODEL}",
            f'    endpoints: {{static: ["http://127.0.0.1:{port}"]}}',
            "    timeouts: {connect_s: 2, first_token_s: 300, total_s: 600}",
            f"    saturation: {{inflight: {INFLIGHT[name]}}}",
            "    admission: {max_queued: 100000, max_wait_s: 600}",
        ]
    lines += [
        "models:",
        f"  - name: {MODEL}",
        "    route: {policy: {tiers: [{pool: small}, {pool: large}], fallback_tier: 0}}",
        "    max_tokens: {default: 32, cap: 64}",
        "    slo_class: chat",
        "slo_classes:",
        f"  chat: {{ttft_ms: {slo_ms:g}, on_unattainable: {action}}}",
        "limits: {backend: memory}",
        "tenancy: {auth: disabled}",
    ]
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def _stack(work: Path, name: str, action: str, slo_ms: float) -> Iterator[str]:
    ports = {pool: free_port() for pool in SIM_FLAGS}
    gw = free_port()
    policy = work / f"{name}.yaml"
    policy.write_text(_policy(ports, action, slo_ms))
    with contextlib.ExitStack() as stack:
        for pool, port in ports.items():
            flags = ["--served-model-name", MODEL, *SIM_FLAGS[pool]]
            stack.enter_context(simulator(port, flags, work / f"{name}-{pool}.log"))
        args = [sys.executable, "-m", "gateway", "serve", "--config", str(policy), "--port", str(gw)]
        stack.enter_context(spawned(args, None, f"http://127.0.0.1:{gw}/readyz", work / f"{name}-gw.log"))
        yield f"http://127.0.0.1:{gw}"


def _metric(text: str, name: str, fragment: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and fragment in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


async def _scrape(base: str) -> str:
    import aiohttp

    async with aiohttp.ClientSession() as s, s.get(f"{base}/metrics") as r:
        return await r.text()


def step_figures(results: list[Result], duration: float, slo_s: float, metrics: str) -> dict[str, Any]:
    """One (action, rate) run's figures."""
    ok = [r for r in results if r.ok]
    ttfts = [r.ttft for r in ok if r.ttft is not None]
    good = sum(1 for t in ttfts if t <= slo_s)
    shed = [r for r in results if r.status == 503]
    shed_s = [r.answered_s for r in shed if r.answered_s is not None]
    return {
        "sent": len(results),
        "ok": len(ok),
        "goodput_rps": round(good / duration, 3),
        "slo_attainment": round(good / len(results), 3) if results else None,
        "ttft_p99_s": round(percentile(ttfts, 99), 3) if ttfts else None,
        "shed": len(shed),
        "shed_p99_ms": round(1000 * percentile(shed_s, 99), 1) if shed_s else None,
        "rerouted": int(_metric(metrics, "llmgw_pool_slo_refusals_total", 'action="rerouted"')),
        "other_failures": sum(1 for r in results if not r.ok and r.status != 503),
    }


def run_step(work: Path, action: str, rate: float, duration: float, slo_ms: float) -> dict[str, Any]:
    name = f"{action}-{rate:g}"
    print(f"  {name} ...", file=sys.stderr, flush=True)
    with _stack(work, name, action, slo_ms) as base:

        async def go() -> tuple[list[Result], str]:
            # Same seed in every run: each action sees the same arrivals at a given rate.
            results = await run_load(f"{base}/v1/chat/completions", summary_body, rate, duration, seed=7)
            return results, await _scrape(base)

        results, metrics = asyncio.run(go())
    return step_figures(results, duration, slo_ms / 1000, metrics)


def table(rates: list[float], steps: dict[str, dict[float, dict[str, Any]]]) -> str:
    rows = ["offered/s  action   sent    ok  goodput/s  met   p99 TTFT s   shed  shed p99 ms  rerouted"]
    for rate in rates:
        for action in ACTIONS:
            f = steps[action][rate]
            p99 = "-" if f["ttft_p99_s"] is None else f"{f['ttft_p99_s']:.2f}"
            shed_ms = "-" if f["shed_p99_ms"] is None else f"{f['shed_p99_ms']:.1f}"
            rows.append(
                f"{rate:>9g}  {action:<7} {f['sent']:>5} {f['ok']:>5} {f['goodput_rps']:>10.2f} "
                f"{f['slo_attainment'] or 0:>4.2f} {p99:>12} {f['shed']:>6} {shed_ms:>12} {f['rerouted']:>9}"
            )
    return "\n".join(rows)


def plot(rates: list[float], steps: dict[str, dict[float, dict[str, Any]]], path: Path) -> Path:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5), dpi=110)
    ax = fig.subplots()
    for action in ACTIONS:
        ax.plot(rates, [steps[action][r]["goodput_rps"] for r in rates], marker="o", label=action)
    ax.plot(rates, rates, linestyle=":", color="grey", label="offered")
    ax.set_xlabel("offered load (requests/s)")
    ax.set_ylabel("goodput (requests/s within the TTFT target)")
    ax.set_title("SLO-aware admission past the knee")
    ax.grid(True, alpha=0.3)
    ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", bbox_inches="tight")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.bench.pools.slo", description=__doc__.split("\n")[0])
    ap.add_argument("--rates", default="2,4,6,8,12,16", help="offered requests/s, comma-separated")
    ap.add_argument("--duration", type=float, default=15.0, help="seconds of offered load per step")
    ap.add_argument("--slo-ttft-ms", type=float, default=1000.0, help="the SLO class's TTFT target")
    ap.add_argument("--out", type=Path, default=Path("bench-results/slo"), help="JSON and PNG here")
    args = ap.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    steps: dict[str, dict[float, dict[str, Any]]] = {a: {} for a in ACTIONS}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-slo-") as tmp:
        for rate in rates:
            for action in ACTIONS:
                steps[action][rate] = run_step(Path(tmp), action, rate, args.duration, args.slo_ttft_ms)
    print(table(rates, steps))
    report = {
        "duration_s": args.duration,
        "slo_ttft_ms": args.slo_ttft_ms,
        "rates": rates,
        "steps": {a: {str(r): f for r, f in per.items()} for a, per in steps.items()},
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "slo.json").write_text(json.dumps(report, indent=2) + "\n")
    png = plot(rates, steps, args.out / "slo.png")
    print(f"wrote {args.out / 'slo.json'} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
