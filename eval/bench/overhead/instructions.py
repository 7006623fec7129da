"""`python -m eval.bench.overhead.instructions` (`make bench-instructions`): CPU instructions and system
calls per request of the gateway, counted, not timed.

`make bench-overhead` times requests; on a shared two-core machine its CPU-per-request figure moves
by 10-20 % between runs of the same code, so a 5 % regression (or its fix) cannot be told from noise.
This counts instead, for this checkout and optionally `--before CHECKOUT`, on the same upstream:

- **instructions per request** (user space): the gateway runs under valgrind's callgrind with
  instrumentation off; after a warm-up the instrumentation is switched on (`callgrind_control -i on`),
  `--requests` requests are sent one at a time on one keep-alive connection, and it is switched off and
  dumped. Deterministic to a fraction of a percent run to run; it misses the kernel's share and cache
  effects, which the next figure and bench-overhead cover.
- **system calls per request** (`strace -c`, optional: `--syscalls`), by call: the writes, reads and
  epoll waits the request costs, and calls nobody meant to make (Python 3.11's `asyncio.get_running_loop`
  is a `getpid()` each).

Spine configuration (docs/design/003): one pool over the static upstream, no auth, no limits; unary and
streamed (8 tokens). Needs `valgrind` (and `strace` for `--syscalls`): `apt-get install valgrind strace`.
A report, not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from eval.bench.overhead.client import CHAT_PATH, request_body
from eval.bench.overhead.policy import write_policy
from eval.bench.procs import ROOT, free_port, spawned, stop
from tests.support.postgres import PostgresServer

MODES = ("unary", "stream")
# Python under callgrind runs ~50x slower: start-up (imports, the router's ONNX session) takes a minute.
START_TIMEOUT_S = 300.0


def drive(port: int, body: bytes, n: int) -> None:
    """`n` requests, one at a time, on one keep-alive connection (each answer read whole)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        for _ in range(n):
            conn.request("POST", CHAT_PATH, body, {"content-type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {data[:200]!r}")
    finally:
        conn.close()


def _gateway(policy: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "gateway", "serve", "--config", str(policy), "--port", str(port)]


@contextlib.contextmanager
def _served(
    checkout: Path, wrapper: Sequence[str], policy: Path, log: Path, extra_env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = free_port()
    env = {"PYTHONPATH": str(checkout), "LLMGW_LOG_LEVEL": "warning", "PYTHONHASHSEED": "0"}
    env.update(extra_env or {})
    url = f"http://127.0.0.1:{port}/healthz"
    args = [*wrapper, *_gateway(policy, port)]
    with spawned(args, None, url, log, env, timeout=START_TIMEOUT_S, cwd=checkout) as proc:
        yield proc, port


def instructions(
    checkout: Path,
    policy: Path,
    mode: str,
    requests: int,
    warmup: int,
    work: Path,
    env: dict[str, str] | None = None,
) -> float:
    """User-space instructions per request of `checkout`'s gateway (callgrind)."""
    out = work / f"callgrind-{checkout.name}-{mode}.out"
    wrapper = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
    body = request_body(mode == "stream")
    log = work / f"callgrind-{checkout.name}-{mode}.log"
    with _served(checkout, wrapper, policy, log, env) as (proc, port):
        drive(port, body, warmup)
        _control(proc.pid, "-i", "on")
        drive(port, body, requests)
        _control(proc.pid, "-i", "off")
        _control(proc.pid, "-d")
    totals = [_totals(p) for p in work.glob(f"{out.name}*")]
    for p in work.glob(f"{out.name}*"):
        p.unlink()
    return max(totals, default=0) / requests


def _control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True, timeout=120)
    time.sleep(0.2)


def _totals(dump: Path) -> int:
    m = re.search(r"^totals:\s+(\d+)", dump.read_text(errors="replace"), re.MULTILINE)
    return int(m.group(1)) if m else 0


def syscalls(
    checkout: Path,
    policy: Path,
    mode: str,
    requests: int,
    warmup: int,
    work: Path,
    env: dict[str, str] | None = None,
) -> dict[str, float]:
    """System calls per request, by name (strace -c, attached after the warm-up)."""
    body = request_body(mode == "stream")
    report = work / f"strace-{checkout.name}-{mode}.txt"
    with _served(checkout, (), policy, work / f"strace-{checkout.name}-{mode}.log", env) as (proc, port):
        drive(port, body, warmup)
        tracer = subprocess.Popen(
            ["strace", "-c", "-f", "-p", str(proc.pid), "-o", str(report)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)  # attached to every thread
        drive(port, body, requests)
        stop(tracer, grace=10)
    counts: dict[str, float] = {}
    for line in report.read_text().splitlines():
        cols = line.split()
        if len(cols) >= 5 and cols[3].isdigit() and cols[-1] != "total":
            counts[cols[-1]] = int(cols[3]) / requests
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def measure(opts: argparse.Namespace) -> dict[str, Any]:
    sides = {"after": ROOT}
    if opts.before is not None:
        sides["before"] = opts.before.resolve()
    work = Path(tempfile.mkdtemp(prefix="bench-instructions-"))
    up_port = free_port()
    policy = work / "policy.yaml"
    write_policy(policy, up_port)
    # `--budgets`: the after side charges dollar budgets and writes the spend ledger (bench-overhead's
    # --budgets policy); the before side keeps the spine policy, so `--before .` counts what they add.
    after_policy, after_env = policy, {}
    if opts.before_budgets is not None:
        write_policy(policy, up_port, budgets=opts.before_budgets)
    if opts.budgets is not None:
        after_policy = work / "policy-budgets.yaml"
        write_policy(after_policy, up_port, budgets=opts.budgets)
    upstream = [sys.executable, "-m", "eval.bench.overhead", "--serve-static", str(up_port)]
    result: dict[str, Any] = {"requests": opts.requests, "sides": {k: str(v) for k, v in sides.items()}}
    with contextlib.ExitStack() as stack:
        if opts.budgets in ("all", "ledger"):
            pg = stack.enter_context(PostgresServer(work))
            after_env["LLMGW_DATABASE_URL"] = pg.create_database("bench")
        stack.enter_context(
            spawned(upstream, None, f"http://127.0.0.1:{up_port}/health", work / "upstream.log")
        )
        for mode in MODES:
            for side, checkout in sides.items():
                print(f"{mode}: {side} ({checkout}) under callgrind", file=sys.stderr, flush=True)
                pol, env = (after_policy, after_env) if side == "after" else (policy, {})
                ipr = instructions(checkout, pol, mode, opts.requests, opts.warmup, work, env)
                result.setdefault("instructions", {}).setdefault(mode, {})[side] = round(ipr)
                if opts.syscalls:
                    calls = syscalls(checkout, pol, mode, opts.requests, opts.warmup, work, env)
                    result.setdefault("syscalls", {}).setdefault(mode, {})[side] = calls
    shutil.rmtree(work, ignore_errors=True)
    return result


def render(result: dict[str, Any]) -> str:
    lines = [f"Instructions per request (callgrind, user space; {result['requests']} requests after warm-up)"]
    for mode, by_side in result["instructions"].items():
        row = f"  {mode:6}  after {by_side['after']:>9,}"
        if "before" in by_side:
            ratio = by_side["after"] / by_side["before"] if by_side["before"] else float("nan")
            row += f"  before {by_side['before']:>9,}  ratio {ratio:.3f}x"
        lines.append(row)
    for mode, by_side in result.get("syscalls", {}).items():
        lines.append(f"System calls per request, {mode} (strace -c)")
        for side, calls in by_side.items():
            shown = ", ".join(f"{name} {n:.2f}" for name, n in calls.items() if n >= 0.05)
            lines.append(f"  {side:6}  total {sum(calls.values()):.2f}: {shown}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m eval.bench.overhead.instructions", description=__doc__.split("\n")[0]
    )
    p.add_argument("--before", type=Path, metavar="CHECKOUT", help="another checkout measured the same way")
    p.add_argument(
        "--requests", type=int, default=400, help="measured requests per mode and side (default 400)"
    )
    p.add_argument("--warmup", type=int, default=100, help="requests before counting starts (default 100)")
    p.add_argument(
        "--budgets",
        nargs="?",
        const="all",
        choices=["all", "dollars", "ledger"],
        help="the after side charges dollar budgets and writes the spend ledger (a PostgreSQL started "
        "here), as bench-overhead's --budgets; with `--before .`: what they add per request",
    )
    p.add_argument(
        "--before-budgets",
        choices=["tokens"],
        help="the before side's tenant has a day and a month token budget (as bench-overhead's option)",
    )
    p.add_argument("--syscalls", action="store_true", help="also count system calls per request (strace)")
    p.add_argument("--out", type=Path, help="also write the figures as JSON here")
    opts = p.parse_args(argv)
    missing = [
        t
        for t in ("valgrind", "callgrind_control") + (("strace",) if opts.syscalls else ())
        if not shutil.which(t)
    ]
    if missing:
        print(f"needs {', '.join(missing)} (apt-get install valgrind strace)", file=sys.stderr)
        return 2
    result = measure(opts)
    print(render(result))
    if opts.out is not None:
        opts.out.parent.mkdir(parents=True, exist_ok=True)
        opts.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
