"""Orchestration and CLI of `make bench-peers` (`python -m eval.bench.peers`)."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eval.bench.overhead.client import run_async
from eval.bench.overhead.run import environment
from eval.bench.peers.measure import Plan, measure_rounds
from eval.bench.peers.report import render_markdown
from eval.bench.peers.sides import GATEWAYS, LITELLM_BIN, PEERS_DIR, missing_peers, start_all
from eval.bench.peers.stats import evaluate, ratios, summarize
from eval.bench.procs import ROOT, dump_logs, pinned_cpus


def _versions() -> dict[str, str]:
    def out(args: Sequence[str]) -> str:
        try:
            proc = subprocess.run(list(args), capture_output=True, text=True, check=False, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return proc.stdout.strip()

    pkg = PEERS_DIR / "portkey" / "node_modules"
    py = LITELLM_BIN.parent / "python"
    return {
        "litellm": out([str(py), "-c", "import importlib.metadata as m; print(m.version('litellm'))"]),
        "portkey": _npm_version(pkg / "@portkey-ai" / "gateway"),
        "hono_node_server": _npm_version(pkg / "@hono" / "node-server"),
        "node": out(["node", "--version"]),
        "redis": out(["redis-server", "--version"]),
    }


def _npm_version(folder: Path) -> str:
    try:
        return str(json.loads((folder / "package.json").read_text())["version"])
    except (OSError, ValueError, KeyError):
        return ""


def run_benchmark(gateways: Sequence[str], plan: Plan, argv: Sequence[str]) -> dict[str, Any]:
    started_at = time.monotonic()

    def progress(msg: str) -> None:
        print(f"[{time.monotonic() - started_at:6.1f}s] {msg}", file=sys.stderr, flush=True)

    warnings: list[str] = []
    if plan.load_cpu is not None:
        # This process (the client) and wrk, its child, run on the load core.
        os.sched_setaffinity(0, {plan.load_cpu})
    else:
        warnings.append("fewer than 2 usable cpus: nothing pinned, figures mix gateways and load")
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        progress(f"starting the upstream and {', '.join(gateways)}")
        try:
            sides = start_all(gateways, work, stack, plan.gateway_cpu, plan.load_cpu)
            rounds = run_async(lambda: measure_rounds(sides, plan, work, progress))
        except Exception:
            dump_logs(work)
            raise
    names = [s.name for s in sides]
    summary = summarize(rounds, names)
    ratio_table = ratios(summary)
    for rnd_i, rnd in enumerate(rounds):
        for side, cells in rnd.items():
            for cell, fig in cells.items():
                if fig.get("errors"):
                    first = fig.get("first_error", "")
                    warnings.append(
                        f"round {rnd_i + 1} {side} {cell}: {fig['errors']} errors; first: {first}"
                    )
    if plan.rounds < 3:
        warnings.append(f"only {plan.rounds} round(s): a smoke run, not a measurement")
    return {
        "schema": 1,
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "wall_seconds": round(time.monotonic() - started_at, 1),
        "command": list(argv),
        "config": {
            "gateways": list(gateways),
            "upstream": "static (eval/bench/overhead/static_upstream.py: canned answer, 8 SSE token events)",
            "rounds": plan.rounds,
            "latency_concurrency": list(plan.latency_concurrency),
            "latency_seconds": plan.latency_seconds,
            "throughput_concurrency": plan.throughput_concurrency,
            "throughput_seconds": plan.throughput_seconds,
            "throughput_tool": "wrk -t1",
            "warmup_seconds": plan.warmup_seconds,
            "gateway_cpu": plan.gateway_cpu,
            "load_cpu": plan.load_cpu,
        },
        "environment": {**environment(), "peers": _versions(), "machine": platform.node()},
        "summary": summary,
        "ratios": ratio_table,
        "targets": evaluate(summary, ratio_table),
        "rounds": rounds,
        "warnings": warnings,
    }


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m eval.bench.peers",
        description="Gateway-added latency and throughput of ours next to LiteLLM, Portkey and a bare relay.",
    )
    p.add_argument(
        "--gateways", default=",".join(GATEWAYS), help=f"subset, in order (default {','.join(GATEWAYS)})"
    )
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--latency-seconds", type=float, default=2.0, help="seconds per latency batch (default 2)")
    p.add_argument("--throughput-seconds", type=float, default=4.0, help="seconds per wrk run (default 4)")
    p.add_argument("--warmup-seconds", type=float, default=1.0, help="warm-up per side and mode (default 1)")
    p.add_argument("--gateway-cpu", type=int, default=0, help="core every gateway is pinned to (default 0)")
    p.add_argument("--load-cpu", type=int, default=1, help="core of the load generator, upstream and Redis")
    p.add_argument(
        "--out-dir", type=Path, default=ROOT / "bench-results", help="where peers-<time>.{json,md} go"
    )
    return p.parse_args(list(argv))


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(args_list)
    gateways = [g.strip() for g in args.gateways.split(",") if g.strip()]
    unknown = [g for g in gateways if g not in GATEWAYS]
    if unknown:
        print(f"unknown gateway(s) {', '.join(unknown)}; known: {', '.join(GATEWAYS)}", file=sys.stderr)
        return 2
    missing = missing_peers(gateways)
    if missing:
        print(
            f"{', '.join(missing)} not installed: run scripts/install-peers (make peers-tools)",
            file=sys.stderr,
        )
        return 2
    gw_cpu, load_cpu = pinned_cpus(args.gateway_cpu, args.load_cpu)
    plan = Plan(
        rounds=max(1, args.rounds),
        latency_concurrency=(1, 8),
        latency_seconds=args.latency_seconds,
        throughput_concurrency=32,
        throughput_seconds=args.throughput_seconds,
        warmup_seconds=args.warmup_seconds,
        gateway_cpu=gw_cpu,
        load_cpu=load_cpu,
    )
    report = run_benchmark(gateways, plan, ["python", "-m", "eval.bench.peers", *args_list])
    markdown = render_markdown(report)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = args.out_dir / f"peers-{stamp}.json", args.out_dir / f"peers-{stamp}.md"
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    md_path.write_text(markdown)
    print(markdown)
    print(f"wrote {json_path} and {md_path} ({report['wall_seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
