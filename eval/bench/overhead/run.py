"""Orchestration and CLI: start the upstream and the gateway, measure, report (docs/design/003)."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from eval.bench.overhead.client import MODEL, STREAM_TOKENS, request_body, run_async
from eval.bench.overhead.limiter import (
    backend_phases,
    compare_latency,
    scrape_histogram,
    write_limiter_policy,
)
from eval.bench.overhead.measure import Endpoints, Options, Side, measure_latency, measure_throughput
from eval.bench.overhead.policy import write_policy
from eval.bench.overhead.probes import proc_status
from eval.bench.overhead.report import evaluate_targets, render
from eval.bench.overhead.static_upstream import serve_static
from eval.bench.procs import (
    ROOT,
    dump_logs,
    free_port,
    pinned_cpus,
    redis_args,
    redis_server,
    spawned,
)
from gateway.tenancy.keys import generate_key, hash_key
from tests.support.postgres import PostgresServer


def _git(*args: str, cwd: Path = ROOT) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip()


def environment(before: Path | None = None) -> dict[str, Any]:
    cpu_model = platform.processor() or ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    try:
        from gateway import __version__ as gw_version
    except ImportError:
        gw_version = "?"
    wrk = shutil.which("wrk")
    wrk_version = ""
    if wrk:
        proc = subprocess.run([wrk, "-v"], capture_output=True, text=True, check=False)
        wrk_version = (proc.stdout or proc.stderr).splitlines()[0] if (proc.stdout or proc.stderr) else ""
    return {
        "cpu_model": cpu_model,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "git_commit": _git("rev-parse", "--short", "HEAD") or "?",
        # Only uncommitted changes to the measured code matter for reading the figures.
        "gateway_dirty": bool(_git("status", "--porcelain", "--", "gateway")),
        "gateway_version": gw_version,
        "wrk": wrk_version,
        "before_commit": (_git("rev-parse", "--short", "HEAD", cwd=before) or "?") if before else None,
    }


def _start(
    opts: Options, work: Path, stack: contextlib.ExitStack, progress: Callable[[str], None]
) -> Endpoints:
    """Start the upstream, the spine gateway and, with `opts.limiter`, Redis and the limiter gateway.

    Both gateways are pinned on the gateway core (only one is loaded at a time); the upstream and Redis
    share the load core with the load generator.
    """
    up_port, gw_port = free_port(), free_port()
    if opts.upstream == "sim":
        up_args = [sys.executable, "-m", "gateway", "sim", "--host", "127.0.0.1", "--port", str(up_port)]
        up_args += ["--served-model-name", MODEL, "--profile", "instant"]
    else:
        up_args = [sys.executable, "-m", "eval.bench.overhead", "--serve-static", str(up_port)]
    policy = work / "policy.yaml"
    write_policy(policy, up_port, guardrails=opts.guardrails, budgets=opts.budgets)
    gw_env = {"LLMGW_LOG_LEVEL": "warning"}
    if opts.budgets in ("all", "ledger"):
        # The ledger's PostgreSQL, on the load core with the upstream and the client.
        pg = stack.enter_context(PostgresServer(work))
        if opts.load_cpu is not None and pg.proc is not None:
            os.sched_setaffinity(pg.proc.pid, {opts.load_cpu})  # its backends, forked later, inherit it
        gw_env["LLMGW_DATABASE_URL"] = pg.create_database("bench")
        progress(f"PostgreSQL for the ledger on :{pg.port}")
    progress(f"starting {opts.upstream} upstream on :{up_port} and the spine gateway on :{gw_port}")
    up_ready = f"http://127.0.0.1:{up_port}/health"
    up = stack.enter_context(spawned(up_args, opts.load_cpu, up_ready, work / "upstream.log"))
    quiet = {"LLMGW_LOG_LEVEL": "warning"}
    gw = stack.enter_context(
        spawned(_serve(policy, gw_port), opts.gateway_cpu, _healthz(gw_port), work / "gateway.log", gw_env)
    )
    direct = Side("direct", up_port, up.pid)
    main = Side("gateway", gw_port, gw.pid)
    before: Side | None = None
    if opts.before is not None:
        b_port = free_port()
        progress(f"starting the before gateway ({opts.before}) on :{b_port}")
        b_env = {**quiet, "PYTHONPATH": str(opts.before)}
        b_log = work / "before.log"
        # With --guardrails the before side runs without them: guardrails on vs off in the same rounds.
        b_policy = work / "policy-before.yaml"
        write_policy(b_policy, up_port, budgets=opts.before_budgets)
        b = stack.enter_context(
            spawned(
                _serve(b_policy, b_port), opts.gateway_cpu, _healthz(b_port), b_log, b_env, cwd=opts.before
            )
        )
        before = Side("before", b_port, b.pid)
    if not opts.limiter:
        return Endpoints(direct, main, up.pid, before=before)

    redis_port, lim_port = free_port(), free_port()
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    progress(f"starting redis-server on :{redis_port} and the limiter gateway on :{lim_port}")
    redis_log = work / "redis.log"
    stack.enter_context(spawned(redis_args(redis_server(), redis_port), opts.load_cpu, redis_url, redis_log))
    spine: Side | None = None
    lim_up_port, lim_up_pid = up_port, 0
    if opts.limiter_upstream == "static" and opts.upstream != "static":
        # The limiter comparison gets its own upstream and spine: with the simulator (~80 us of CPU per
        # request) beside Redis and the client, the load core saturates during the limiter's rounds and
        # the delta measures that core, not the gateway (docs/design/003, "The limiter comparison").
        lim_up_port, spine_port = free_port(), free_port()
        progress(f"starting the static upstream on :{lim_up_port} and the limiter's spine on :{spine_port}")
        lim_up = stack.enter_context(
            spawned(
                [sys.executable, "-m", "eval.bench.overhead", "--serve-static", str(lim_up_port)],
                opts.load_cpu,
                f"http://127.0.0.1:{lim_up_port}/health",
                work / "upstream-static.log",
            )
        )
        lim_up_pid = lim_up.pid
        spine_policy = work / "policy-spine.yaml"
        write_policy(spine_policy, lim_up_port)
        spine_proc = stack.enter_context(
            spawned(
                _serve(spine_policy, spine_port),
                opts.gateway_cpu,
                _healthz(spine_port),
                work / "spine.log",
                quiet,
            )
        )
        spine = Side("spine", spine_port, spine_proc.pid, upstream_pid=lim_up_pid)
    key = generate_key()
    lim_policy = work / "policy-limiter.yaml"
    write_limiter_policy(lim_policy, lim_up_port, hash_key(key), speculative=opts.speculative)
    lim = stack.enter_context(
        spawned(
            _serve(lim_policy, lim_port),
            opts.gateway_cpu,
            _healthz(lim_port),
            work / "limiter.log",
            {**quiet, "LLMGW_REDIS_URL": redis_url},
        )
    )
    auth = (("Authorization", f"Bearer {key}"),)
    limiter = Side("limiter", lim_port, lim.pid, auth, upstream_pid=lim_up_pid)
    before_limiter: Side | None = None
    if opts.before is not None:  # the other checkout's limiter, same policy, key and Redis
        bl_port = free_port()
        progress(f"starting the before limiter gateway ({opts.before}) on :{bl_port}")
        bl_env = {**quiet, "LLMGW_REDIS_URL": redis_url, "PYTHONPATH": str(opts.before)}
        bl = stack.enter_context(
            spawned(
                _serve(lim_policy, bl_port),
                opts.gateway_cpu,
                _healthz(bl_port),
                work / "before-limiter.log",
                bl_env,
                cwd=opts.before,
            )
        )
        before_limiter = Side("before-limiter", bl_port, bl.pid, auth, upstream_pid=lim_up_pid)
    return Endpoints(direct, main, up.pid, limiter, spine, before, before_limiter)


def _serve(policy: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "gateway", "serve", "--config", str(policy), "--port", str(port)]


def _healthz(port: int) -> str:
    return f"http://127.0.0.1:{port}/healthz"


def _has_redis_server() -> bool:
    return Path(redis_server()).exists()


def _redis_version() -> str:
    server = redis_server()
    if not Path(server).exists():
        return ""
    proc = subprocess.run([server, "--version"], capture_output=True, text=True, check=False)
    return proc.stdout.strip()


def run_benchmark(opts: Options, argv: Sequence[str]) -> dict[str, Any]:
    started = time.monotonic()

    def progress(msg: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    warnings: list[str] = []
    if opts.load_cpu is not None:
        # This process (the Python client) and wrk, its child, run on the load core.
        os.sched_setaffinity(0, {opts.load_cpu})
    if opts.gateway_cpu is None:
        warnings.append("fewer than 2 usable cpus: nothing pinned, figures mix gateway and load")

    limiter: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        ep = _start(opts, work, stack, progress)
        try:
            latency = run_async(lambda: measure_latency(opts, ep, progress))
            scraped = {s.name: scrape_histogram(s.port) for s in ep.sides() if s.name != "direct"}
            throughput = run_async(lambda: measure_throughput(opts, ep, work, progress))
        except Exception:
            dump_logs(work)
            raise
        memory = proc_status(ep.gateway.pid)
        if ep.limiter is not None:
            spine = ep.spine or ep.gateway
            limiter = {
                "upstream": "static" if ep.spine is not None else opts.upstream,
                "latency": compare_latency(latency),
                "throughput": {
                    mode: {k: row.get(k) for k in ("spine_rps", "limiter_rps", "limiter_over_spine")}
                    for mode, row in throughput.items()
                },
                "backend_seconds": backend_phases(scraped["limiter"], scrape_histogram(ep.limiter.port)),
                "spine_backend_seconds": backend_phases(scraped[spine.name], scrape_histogram(spine.port)),
                "memory": proc_status(ep.limiter.pid),
                "redis": _redis_version(),
            }

    if not opts.limiter:
        warnings.append("limiter comparison skipped (--no-limiter, or no redis-server on PATH)")
    if not opts.use_wrk:
        warnings.append("wrk not used: throughput measured with the Python client, which may cap it")
    for key, row in latency.items():
        if row["mode"] == "stream":
            for side in ("direct", "gateway", "spine", "limiter"):
                chunks = row.get(side, {}).get("chunks_mean")
                if chunks is not None and chunks != STREAM_TOKENS + 1:
                    warnings.append(
                        f"{key} {side}: {chunks} events per stream, "
                        f"expected {STREAM_TOKENS + 1} (role + tokens)"
                    )
    if any(row["concurrency"] >= 32 for row in latency.values()):
        warnings.append(
            "latency at concurrency 32 comes from the Python client sharing the load core with the upstream; "
            "read it as queueing under load, the wrk figures as the throughput"
        )
    report: dict[str, Any] = {
        "schema": 1,
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "wall_seconds": round(time.monotonic() - started, 1),
        "command": list(argv),
        "config": {
            "upstream": opts.upstream,
            "concurrency": list(opts.concurrency),
            "rounds": opts.rounds,
            "requests": opts.requests,
            "warmup": opts.warmup,
            "duration": opts.duration,
            "tp_rounds": opts.tp_rounds,
            "tp_concurrency": opts.tp_concurrency,
            "gateway_cpu": opts.gateway_cpu,
            "load_cpu": opts.load_cpu,
            "pinned": opts.gateway_cpu is not None,
            "stream_tokens": STREAM_TOKENS,
            "request_body": request_body(False).decode(),
            "limiter": opts.limiter,
            "limiter_concurrency": list(opts.limiter_concurrency) if opts.limiter else [],
            "speculative": opts.speculative,
            "limiter_upstream": opts.limiter_upstream,
            "before": str(opts.before) if opts.before else None,
            "guardrails": opts.guardrails,
            "budgets": opts.budgets,
            "before_budgets": opts.before_budgets,
        },
        "environment": environment(opts.before),
        "latency": latency,
        "throughput": throughput,
        "memory": memory,
        "limiter": limiter,
        "warnings": warnings,
    }
    report["targets"] = evaluate_targets(report)
    return report


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m eval.bench.overhead",
        description="Measure the latency, throughput and memory the gateway adds to its upstream.",
    )
    p.add_argument(
        "--upstream",
        choices=("sim", "static"),
        default="sim",
        help="sim: `llmgw sim --profile instant`; static: a canned asyncio server (faster)",
    )
    p.add_argument(
        "--requests",
        type=int,
        default=5000,
        help="requests per side, mode and concurrency for latency (default 5000)",
    )
    p.add_argument("--rounds", type=int, default=10, help="interleaved direct/gateway rounds (default 10)")
    p.add_argument("--concurrency", default="1,8,32", help="latency concurrency levels (default 1,8,32)")
    p.add_argument("--warmup", type=int, default=400, help="warm-up requests per side and mode")
    p.add_argument("--duration", type=float, default=8.0, help="seconds per throughput run (default 8)")
    p.add_argument("--tp-rounds", type=int, default=2, help="throughput runs per side and mode (default 2)")
    p.add_argument("--tp-concurrency", type=int, default=32, help="throughput connections (default 32)")
    p.add_argument("--gateway-cpu", type=int, default=0, help="core for the gateway (default 0)")
    p.add_argument("--load-cpu", type=int, default=1, help="core for the upstream and load generator")
    p.add_argument("--no-wrk", action="store_true", help="use the Python client for throughput")
    p.add_argument(
        "--no-limiter",
        action="store_true",
        help="skip the limiter comparison (a second gateway with auth + the Redis limiter, and redis-server)",
    )
    p.add_argument(
        "--limiter-concurrency", default="1,8", help="latency levels that include the limiter (default 1,8)"
    )
    p.add_argument(
        "--speculative",
        action="store_true",
        help="the limiter gateway overlaps admission with the pool call (limits.speculative)",
    )
    p.add_argument(
        "--limiter-upstream",
        choices=("static", "shared"),
        default="static",
        help="static (default): the limiter and its own spine gateway relay to the static upstream, so the "
        "load core (upstream, Redis, client) does not saturate; shared: both use --upstream and the "
        "limiter is compared with the main gateway",
    )
    p.add_argument(
        "--before",
        type=Path,
        metavar="CHECKOUT",
        help="also measure the gateway of another checkout (e.g. a `git worktree` of the parent commit) "
        "in the same rounds, on the same upstream and core: a change's before/after in one run",
    )
    p.add_argument(
        "--guardrails",
        action="store_true",
        help="the measured gateway runs every input guardrail (docs/design/025); with `--before .` the "
        "before side is the same checkout without them: the guardrails' added latency in one run",
    )
    p.add_argument(
        "--budgets",
        nargs="?",
        const="all",
        choices=["all", "dollars", "ledger"],
        help="the measured gateway charges dollar budgets and writes every request to the spend ledger "
        "(a PostgreSQL the benchmark starts); `dollars` or `ledger` for one of them; with `--before .` "
        "the before side is the same checkout without them: their added latency in one run",
    )
    p.add_argument(
        "--before-budgets",
        choices=["tokens"],
        help="with --budgets and --before: the before side's tenant has a day and a month token budget "
        "(as many quota rules as the dollar side): what dollar budgets add over token budgets",
    )
    p.add_argument("--out", type=Path, default=Path("bench-results/overhead.json"), help="JSON report path")
    p.add_argument("--serve-static", type=int, metavar="PORT", help=argparse.SUPPRESS)
    return p.parse_args(list(argv))


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(args_list)
    if args.serve_static is not None:
        run_async(lambda: serve_static(args.serve_static))
        return 0
    gw_cpu, load_cpu = pinned_cpus(args.gateway_cpu, args.load_cpu)
    opts = Options(
        upstream=args.upstream,
        concurrency=tuple(int(x) for x in args.concurrency.split(",") if x),
        rounds=max(1, args.rounds),
        requests=max(1, args.requests),
        warmup=args.warmup,
        duration=args.duration,
        tp_rounds=max(1, args.tp_rounds),
        tp_concurrency=args.tp_concurrency,
        gateway_cpu=gw_cpu,
        load_cpu=load_cpu,
        use_wrk=not args.no_wrk and shutil.which("wrk") is not None,
        out=args.out,
        limiter=not args.no_limiter and _has_redis_server(),
        limiter_concurrency=tuple(int(x) for x in args.limiter_concurrency.split(",") if x),
        speculative=args.speculative,
        limiter_upstream=args.limiter_upstream,
        before=args.before.resolve() if args.before else None,
        guardrails=args.guardrails,
        budgets=args.budgets,
        before_budgets=args.before_budgets,
    )
    report = run_benchmark(opts, ["python", "-m", "eval.bench.overhead", *args_list])
    print(render(report))
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {opts.out} ({report['wall_seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
