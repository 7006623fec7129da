"""Running the soak: start the upstream, Redis and one gateway, load it with wrk while sampling its memory,
and the CLI that writes the JSON, the PNG and the table."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from eval.bench.overhead.run import environment
from eval.bench.overhead.wrk import run_wrk, wrk_script
from eval.bench.peers.measure import unique_prompts
from eval.bench.peers.sides import Side, start_all
from eval.bench.peers.soak.figures import (
    CONCURRENCY,
    GROWTH_TARGET_PCT,
    RSS_TARGET_MB,
    Chunk,
    requests_at,
    summarize,
    verdict,
)
from eval.bench.peers.soak.memory import Sampler, read_memory
from eval.bench.peers.soak.report import plot, render_table
from eval.bench.procs import ROOT, dump_logs, pinned_cpus

MODES = ("unary", "stream")


def soak_side(
    side: Side, work: Path, seconds: float, chunk_s: float, sample_s: float, progress: Callable[[str], None]
) -> tuple[list[dict[str, float]], list[Chunk]]:
    """Alternating unary and streaming wrk runs at CONCURRENCY until `seconds` of load, sampled."""
    scripts: dict[str, Path] = {}
    for mode in MODES:
        stream = mode == "stream"
        scripts[mode] = wrk_script(work / f"soak-{side.name}-{mode}.lua", side.body(stream), side.headers)
        if side.unique:
            unique_prompts(scripts[mode], side.body(stream, tag="%s-%d"), uuid.uuid4().hex[:12])
    chunks: list[Chunk] = []
    t0 = time.monotonic()
    with Sampler(side.pid, sample_s, t0) as sampler:
        i = 0
        while (left := seconds - (time.monotonic() - t0)) >= 1.0:
            mode = MODES[i % len(MODES)]
            start = time.monotonic() - t0
            run = run_wrk(side.port, scripts[mode], CONCURRENCY, round(min(chunk_s, left)))
            end = time.monotonic() - t0
            chunks.append(
                Chunk(
                    mode,
                    round(start, 2),
                    round(end, 2),
                    run["requests"],
                    run["errors"],
                    run["rps"],
                    run["p99_ms"],
                )
            )
            last = sampler.samples[-1] if sampler.samples else {}
            progress(
                f"{side.name} {end:6.0f}s {mode:6s} {run['rps']:8.1f} req/s errors {run['errors']}"
                f"  rss {last.get('rss_mb', float('nan')):.1f} MB"
            )
            i += 1
    # Requests are known only once a run has ended, so samples are tagged afterwards.
    samples = [{**s, "requests": requests_at(s["t_s"], chunks)} for s in sampler.samples]
    return samples, chunks


def run_side(
    name: str, args: argparse.Namespace, cpus: tuple[int | None, int | None], progress: Callable[[str], None]
) -> dict[str, Any]:
    """Start the upstream, Redis and one gateway; baseline RSS; the soak; the figures."""
    seconds = args.minutes * 60
    # A smoke run shorter than two warm-ups still reports a growth, over its second half.
    warmup_s = min(args.warmup_seconds, seconds / 2)
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        progress(f"starting the upstream, Redis and {name}")
        try:
            side = start_all([name], work, stack, *cpus)[-1]
            time.sleep(args.settle_seconds)  # let start-up allocations settle before the baseline
            baseline = read_memory(side.pid)
            progress(f"{name} baseline rss {baseline.get('rss_mb', 0):.1f} MB (fresh, before load)")
            samples, chunks = soak_side(
                side, work, seconds, args.chunk_seconds, args.sample_seconds, progress
            )
            final = read_memory(side.pid)
        except Exception:
            dump_logs(work)
            raise
    summary = summarize(samples, chunks, warmup_s, final.get("hwm_mb"))
    return {
        "baseline": baseline,
        "warmup_seconds": warmup_s,
        "summary": summary,
        "verdict": verdict(summary),
        "samples": samples,
        "chunks": [asdict(c) for c in chunks],
    }


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m eval.bench.peers.soak",
        description="Gateway RSS under max sustained load (issue 9: < 5 % growth, <= 300 MB per worker).",
    )
    p.add_argument("--minutes", type=float, default=10.0, help="minutes of load per side (default 10)")
    p.add_argument("--chunk-seconds", type=float, default=30.0, help="seconds per wrk run (default 30)")
    p.add_argument("--sample-seconds", type=float, default=5.0, help="RSS sampling period (default 5)")
    p.add_argument(
        "--warmup-seconds", type=float, default=60.0, help="growth is measured from here (default 60)"
    )
    p.add_argument("--settle-seconds", type=float, default=2.0, help="idle wait before the baseline RSS")
    p.add_argument("--routed", action="store_true", help="also soak ours with routing (router model; info)")
    p.add_argument("--gateway-cpu", type=int, default=0, help="core the gateway is pinned to (default 0)")
    p.add_argument("--load-cpu", type=int, default=1, help="core of wrk, the upstream and Redis (default 1)")
    p.add_argument("--out-dir", type=Path, default=ROOT / "bench-results", help="where soak-<time>.* go")
    return p.parse_args(list(argv))


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(args_list)
    started_at = time.monotonic()

    def progress(msg: str) -> None:
        print(f"[{time.monotonic() - started_at:6.1f}s] {msg}", file=sys.stderr, flush=True)

    warnings: list[str] = []
    cpus = pinned_cpus(args.gateway_cpu, args.load_cpu)
    if cpus[1] is not None:
        os.sched_setaffinity(0, {cpus[1]})  # this process and wrk, its child, on the load core
    else:
        warnings.append("fewer than 2 usable cpus: nothing pinned")
    if args.minutes * 60 < 2 * args.warmup_seconds:
        warnings.append(f"{args.minutes:g} min: a smoke run, not a measurement (growth over its second half)")
    names = ["ours", "ours-routed"] if args.routed else ["ours"]
    sides = {name: run_side(name, args, cpus, progress) for name in names}
    report: dict[str, Any] = {
        "schema": 1,
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "wall_seconds": round(time.monotonic() - started_at, 1),
        "command": ["python", "-m", "eval.bench.peers.soak", *args_list],
        "config": {
            "minutes": args.minutes,
            "concurrency": CONCURRENCY,
            "load": f"wrk -t1 -c{CONCURRENCY}, alternating unary/stream runs of {args.chunk_seconds:g} s",
            "sample_seconds": args.sample_seconds,
            "warmup_seconds": args.warmup_seconds,
            "gateway": "ours: auth + Redis limiter + metrics, 1 worker"
            " (eval/bench/peers/configs.py ours_policy)",
            "upstream": "static (eval/bench/overhead/static_upstream.py)",
            "gateway_cpu": cpus[0],
            "load_cpu": cpus[1],
        },
        "targets": {
            "growth_pct_below": GROWTH_TARGET_PCT,
            "rss_mb_at_most": RSS_TARGET_MB,
            "judged_side": "ours",
        },
        "environment": environment(),
        "sides": sides,
        "warnings": warnings,
    }
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    json_path, png_path = args.out_dir / f"soak-{stamp}.json", args.out_dir / f"soak-{stamp}.png"
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    plotted = plot(report, png_path)
    print(render_table(report))
    for w in warnings:
        print(f"warning: {w}")
    print(f"wrote {json_path}" + (f" and {png_path}" if plotted else " (no matplotlib: no PNG)"))
    return 0  # a report, like bench-peers: the verdict is in the table and the JSON


if __name__ == "__main__":
    raise SystemExit(main())
