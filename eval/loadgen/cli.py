"""`llmgw bench {run,capacity}`: load-test any OpenAI-compatible endpoint; size replicas.

    llmgw bench run [WORKLOAD.yaml] [--url URL...] [--rate R | --concurrency C] [--rates 2,4,8]
                    [--duration S] [--requests N] [--warmup S] [--out DIR] [--no-plots] [--quiet]
    llmgw bench capacity [WORKLOAD.yaml] --profile small --replicas 1,2,4 --rates-per-replica 2,4,8,16

Flags override the workload file (which is optional: without one a default chat workload runs against
http://127.0.0.1:8080 with model `sim`). Output: `bench.json` and PNGs in `--out` (default
`bench-results/bench`), a text summary on stdout, progress on stderr. Exit codes: 0 ran and at most
`--max-error-rate` (default 0.01) of the measured requests failed, 1 more failed (the report is still
written; the reason is on stderr), 2 bad workload or flags.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from exc


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a share in [0, 1], got {text!r}") from exc
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a share in [0, 1], got {text!r}")
    return value


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("workload", nargs="?", help="workload YAML (eval/workloads/*.yaml)")
    p.add_argument("--api", choices=["chat", "completions"])
    p.add_argument("--model", action="append", metavar="ALIAS", help="send this model name (repeatable)")
    p.add_argument("--api-key", help="one tenant with this key (else the workload's tenants)")
    p.add_argument("--duration", type=float, metavar="S", help="issue requests for this long per level")
    p.add_argument("--requests", type=int, metavar="N", help="at most this many requests per level")
    p.add_argument("--warmup", type=float, metavar="S", help="requests started before this are not measured")
    p.add_argument("--arrival", choices=["poisson", "constant"])
    p.add_argument("--stream-share", type=float, metavar="F", help="fraction of streamed requests")
    p.add_argument("--seed", type=int)
    p.add_argument("--knee-fraction", type=float, metavar="F", help="SLO attainment needed at the knee")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = "LLM load generator for OpenAI-compatible endpoints (TTFT, TPOT, goodput, knee)."
    sub = parser.add_subparsers(dest="bench_command", required=True)

    r = sub.add_parser("run", help="run a workload (one level or a sweep) against endpoints")
    _common(r)
    r.add_argument("--url", nargs="+", metavar="URL", help="base URL(s), round-robin (no /v1)")
    r.add_argument("--rate", type=float, help="open loop: offered requests/s")
    r.add_argument("--concurrency", type=int, help="closed loop: requests in flight")
    r.add_argument("--rates", type=_floats, metavar="R1,R2,..", help="open-loop sweep")
    r.add_argument("--concurrencies", type=_ints, metavar="C1,C2,..", help="closed-loop sweep")
    r.add_argument("--out", type=Path, default=Path("bench-results/bench"), help="report directory")
    r.add_argument(
        "--max-error-rate",
        type=_rate,
        default=0.01,
        metavar="F",
        help="exit 1 when more than this share of the measured requests failed (default: 0.01; 1 never)",
    )
    r.set_defaults(func=_run)

    c = sub.add_parser("capacity", help="knee vs simulator replicas, and queue/KV alert thresholds")
    _common(c)
    c.add_argument("--profile", default="small", help="llmgw sim profile (name or YAML)")
    c.add_argument("--replicas", type=_ints, default=[1, 2], metavar="N1,N2,..")
    c.add_argument(
        "--rates-per-replica", type=_floats, metavar="R1,R2,..", help="offered loads per replica (req/s)"
    )
    c.add_argument("--sim-arg", action="append", default=[], metavar="ARG", help="extra `llmgw sim` flag")
    c.add_argument("--out", type=Path, default=Path("bench-results/capacity"), help="report directory")
    c.set_defaults(func=_capacity)


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Flags as a partial workload mapping (only what was given)."""
    out: dict[str, Any] = {}
    target = {k: v for k, v in (("api", args.api),) if v is not None}
    if getattr(args, "url", None):
        target["base_urls"] = args.url
    load: dict[str, Any] = {}
    for flag, key in (("duration", "duration_s"), ("requests", "requests"), ("warmup", "warmup_s")):
        if getattr(args, flag) is not None:
            load[key] = getattr(args, flag)
    if args.arrival is not None:
        load["arrival"] = args.arrival
    if getattr(args, "rate", None) is not None:
        load |= {"mode": "open", "rate": args.rate}
    if getattr(args, "concurrency", None) is not None:
        load |= {"mode": "closed", "concurrency": args.concurrency}
    sweep: dict[str, Any] = {}
    if getattr(args, "rates", None):
        sweep = {"rates": args.rates, "concurrencies": []}
    elif getattr(args, "concurrencies", None):
        sweep = {"concurrencies": args.concurrencies, "rates": []}
    elif getattr(args, "rate", None) is not None or getattr(args, "concurrency", None) is not None:
        sweep = {"rates": [], "concurrencies": []}  # an explicit single level replaces the workload's sweep
    if args.knee_fraction is not None:
        sweep["knee_fraction"] = args.knee_fraction
    for section, fields in (("target", target), ("load", load), ("sweep", sweep)):
        if fields:
            out[section] = fields
    if args.stream_share is not None:
        out["requests"] = {"stream_share": args.stream_share}
    if args.model:
        out["aliases"] = [{"name": m} for m in args.model]
    if args.api_key:
        out["tenants"] = [{"name": "cli", "key": args.api_key}]
    if args.seed is not None:
        out["seed"] = args.seed
    return out


def load(args: argparse.Namespace) -> tuple[Any, str | None]:
    from eval.loadgen.workload import load_workload, with_overrides

    workload, raw = load_workload(args.workload)
    source = args.workload or "defaults"
    flags = overrides(args)
    return (with_overrides(source, raw, flags) if flags else workload), args.workload


def _error(exc: BaseException) -> int:
    print(f"llmgw bench: {exc}", file=sys.stderr)
    return 2


def _run(args: argparse.Namespace) -> int:
    from eval.loadgen.report import format_knee, format_level
    from eval.loadgen.sweep import build_report, prompts_for, run_sweep, write_outputs
    from eval.loadgen.workload import WorkloadError

    try:
        workload, source = load(args)
        prompts = prompts_for(workload)  # a bad dataset fails before any request
    except (WorkloadError, ValueError, OSError) as exc:
        return _error(exc)
    results, summaries = asyncio.run(run_sweep(workload, prompts, args.quiet))
    report = build_report(workload, source, summaries)
    written = write_outputs(args.out, report, results, plots=not args.no_plots)
    for s in summaries:
        print(format_level(s))
    if report["knee"] is not None:
        print(format_knee(report["knee"]))
    print("wrote " + ", ".join(str(p) for p in written))
    failure = error_rate_failure(summaries, args.max_error_rate)
    if failure is not None:
        print(f"llmgw bench: {failure}", file=sys.stderr)
        return 1
    return 0


def error_rate_failure(summaries: list[dict[str, Any]], max_rate: float) -> str | None:
    """Why the run failed its error budget (over all measured requests of every level), or None.

    A run where nothing answered is the case this exists for: it used to exit 0 with 100 % errors.
    """
    measured = sum(s["requests"]["measured"] for s in summaries)
    failed = sum(sum(s["errors"].values()) for s in summaries)
    if measured == 0:
        return "no request was measured (all in the warm-up?): nothing to judge the endpoint by"
    rate = failed / measured
    if rate <= max_rate:
        return None
    kinds: dict[str, int] = {}
    for s in summaries:
        for kind, n in s["errors"].items():
            kinds[kind] = kinds.get(kind, 0) + n
    top = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
    return (
        f"{failed} of {measured} measured requests failed ({rate:.1%}; {top}), more than "
        f"--max-error-rate {max_rate:g}"
    )


def _capacity(args: argparse.Namespace) -> int:
    from eval.loadgen.capacity import run_capacity
    from eval.loadgen.workload import WorkloadError

    try:
        workload, source = load(args)
    except (WorkloadError, ValueError, OSError) as exc:
        return _error(exc)
    result: int = run_capacity(workload, source, args)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llmgw bench")
    register(parser)
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
