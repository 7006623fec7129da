"""The two measurements: interleaved latency rounds, and throughput runs (wrk or the Python client).

The sides are the upstream directly, the spine gateway and, when enabled, the limiter gateway (auth + Redis
limiter) and the spine it is compared with (a second spine gateway over the limiter's own upstream, see
docs/design/003). All gateways are pinned on the same core; batches run one side at a time, so only one
gateway is ever loaded, and the order rotates between rounds so that drift lands on every side alike.
Each latency cell also records how busy both cores were while its batches ran: a cell whose load core
was saturated measures that core (upstream, Redis and client share it), not the gateway.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval.bench.overhead.client import (
    Sample,
    close_all,
    open_conns,
    raw_request,
    request_body,
    run_batch,
    run_for,
)
from eval.bench.overhead.probes import CpuProbe, cpu_times
from eval.bench.overhead.report import UPSTREAM_BOUND_RATIO, summarize_ns
from eval.bench.overhead.wrk import run_wrk, wrk_script


@dataclass(frozen=True, slots=True)
class Options:
    upstream: str
    concurrency: tuple[int, ...]
    rounds: int
    requests: int
    warmup: int
    duration: float
    tp_rounds: int
    tp_concurrency: int
    gateway_cpu: int | None
    load_cpu: int | None
    use_wrk: bool
    out: Path
    limiter: bool = False
    limiter_concurrency: tuple[int, ...] = (1, 8)
    speculative: bool = False  # the limiter gateway runs with limits.speculative on
    # "static": the limiter and its own spine relay to the static upstream (docs/design/003: with the
    # simulator there, Redis, the simulator and the client saturate the load core); "shared": both use
    # the main upstream and the limiter is compared with the main gateway.
    limiter_upstream: str = "static"
    # Another checkout's gateway, measured as side "before" beside ours in the same rounds (a change's
    # before/after in one run, on one machine state).
    before: Path | None = None
    guardrails: bool = False  # the measured gateway runs every input guardrail (the before side none)
    # The measured gateway charges dollar budgets and/or writes the ledger: "all", "dollars", "ledger";
    # None: neither (the before side never).
    budgets: str | None = None
    # The before side's budgets: None (no limits), "tokens" (the same org with a day and a month token
    # budget: what dollars add over the budgets a deployment already has).
    before_budgets: str | None = None


@dataclass(frozen=True, slots=True)
class Side:
    """One thing the load is sent to. `pid` is the gateway whose CPU a run is charged to."""

    # "direct", "gateway" (the spine), "before", "spine" (the limiter's spine), "limiter", "before-limiter"
    name: str
    port: int
    pid: int
    headers: tuple[tuple[str, str], ...] = ()
    upstream_pid: int = 0  # the upstream this side relays to, when not the main one

    def raw(self, body: bytes) -> bytes:
        return raw_request(self.port, body, self.headers)


@dataclass(frozen=True, slots=True)
class Endpoints:
    direct: Side
    gateway: Side
    upstream_pid: int
    limiter: Side | None = None
    spine: Side | None = None  # the limiter's spine when it has its own upstream; else `gateway` is it
    before: Side | None = None  # `--before`: another checkout's spine gateway on the same upstream
    # `--before` with the limiter: the other checkout's limiter gateway, beside ours on the same Redis
    before_limiter: Side | None = None

    def sides(self, with_limiter: bool = True) -> tuple[Side, ...]:
        main = (self.direct, self.gateway, *((self.before,) if self.before else ()))
        if not with_limiter or self.limiter is None:
            return main
        theirs = (self.before_limiter,) if self.before_limiter else ()
        return (*main, *((self.spine,) if self.spine else ()), self.limiter, *theirs)


def rotated(sides: Sequence[Side], r: int) -> list[Side]:
    """Round r's order: with two sides A B, B A, A B... (each goes first as often as the other)."""
    k = r % len(sides)
    return [*sides[k:], *sides[:k]]


class CoreUse:
    """Busy and total jiffies of the gateway and load cores, summed over one side's batches."""

    def __init__(self) -> None:
        self.busy: dict[int, int] = {}
        self.total: dict[int, int] = {}

    def add(self, before: dict[int, tuple[int, int, int]], after: dict[int, tuple[int, int, int]]) -> None:
        for cpu, (busy, total, _steal) in after.items():
            if cpu in before:
                self.busy[cpu] = self.busy.get(cpu, 0) + busy - before[cpu][0]
                self.total[cpu] = self.total.get(cpu, 0) + total - before[cpu][1]

    def share(self, cpu: int | None) -> float | None:
        if cpu is None or not self.total.get(cpu):
            return None
        return round(self.busy[cpu] / self.total[cpu], 3)


def _stats(cell: Sample, stream: bool, cores: CoreUse, opts: Options) -> dict[str, Any]:
    stats: dict[str, Any] = dict(summarize_ns(cell.latencies_ns))
    stats["gateway_core_busy"] = cores.share(opts.gateway_cpu)
    stats["load_core_busy"] = cores.share(opts.load_cpu)
    stats["errors"] = cell.errors
    if cell.first_error:
        stats["first_error"] = cell.first_error
    if stream and cell.latencies_ns:
        stats["chunks_mean"] = round(cell.events / len(cell.latencies_ns), 2)
    return stats


async def measure_latency(opts: Options, ep: Endpoints, progress: Callable[[str], None]) -> dict[str, Any]:
    bodies = {mode: request_body(mode == "stream") for mode in ("unary", "stream")}
    raws = {s.name: {mode: s.raw(b) for mode, b in bodies.items()} for s in ep.sides()}
    # Warm-up: connections, the gateway's upstream pool, caches, the sim's prompt cache, the limiter's
    # Redis connection and script.
    for side in ep.sides():
        conns = await open_conns(side.port, 8)
        for mode in ("unary", "stream"):
            warm = Sample([])
            await run_batch(conns, raws[side.name][mode], opts.warmup, mode == "stream", warm)
            if warm.errors:
                raise RuntimeError(f"{side.name} {mode} warm-up failed: {warm.first_error}")
        close_all(conns)

    results: dict[str, Any] = {}
    for c in opts.concurrency:
        sides = ep.sides(with_limiter=c in opts.limiter_concurrency)
        by_side = {s.name: await open_conns(s.port, c) for s in sides}
        for mode in ("unary", "stream"):
            progress(f"latency {mode} @{c} ({', '.join(s.name for s in sides)})")
            cells = {s.name: Sample([]) for s in sides}
            cores = {s.name: CoreUse() for s in sides}
            per_round = max(c, math.ceil(opts.requests / opts.rounds))
            for r in range(opts.rounds):
                # Rotate which side goes first so slow drift (thermal, neighbours) cancels out.
                for s in rotated(sides, r):
                    n = s.name
                    before = cpu_times()
                    await run_batch(by_side[n], raws[n][mode], per_round, mode == "stream", cells[n])
                    cores[n].add(before, cpu_times())
            row: dict[str, Any] = {"mode": mode, "concurrency": c}
            for name, cell in cells.items():
                row[name] = _stats(cell, mode == "stream", cores[name], opts)
            d, g = row["direct"], row["gateway"]
            if d.get("n") and g.get("n"):
                row["added_p50_ms"] = round(g["p50_ms"] - d["p50_ms"], 4)
                row["added_p90_ms"] = round(g["p90_ms"] - d["p90_ms"], 4)
                row["added_p99_ms"] = round(g["p99_ms"] - d["p99_ms"], 4)
                b = row.get("before")
                if b is not None and b.get("n"):
                    for q in ("p50", "p90", "p99"):
                        row[f"before_added_{q}_ms"] = round(b[f"{q}_ms"] - d[f"{q}_ms"], 4)
            results[f"{mode}@{c}"] = row
        for cs in by_side.values():
            close_all(cs)
    return results


async def _python_run(side: Side, body: bytes, opts: Options, stream: bool) -> dict[str, Any]:
    conns = await open_conns(side.port, opts.tp_concurrency)
    t0 = time.perf_counter()
    s = await run_for(conns, side.raw(body), opts.duration, stream)
    secs = time.perf_counter() - t0
    close_all(conns)
    run: dict[str, Any] = {"requests": len(s.latencies_ns), "seconds": round(secs, 3), "errors": s.errors}
    run["rps"] = round(len(s.latencies_ns) / secs, 1)
    st = summarize_ns(s.latencies_ns)
    run.update({k: st.get(k) for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")})
    return run


def _best(runs: Sequence[dict[str, Any]], side: str) -> dict[str, Any] | None:
    return max((x for x in runs if x["side"] == side), key=lambda x: float(x["rps"]), default=None)


async def measure_throughput(
    opts: Options, ep: Endpoints, workdir: Path, progress: Callable[[str], None]
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    tool = "wrk -t1" if opts.use_wrk else "python client"
    sides = ep.sides()
    for mode in ("unary", "stream"):
        body = request_body(mode == "stream")
        scripts = {s.name: wrk_script(workdir / f"{mode}-{s.name}.lua", body, s.headers) for s in sides}
        runs: list[dict[str, Any]] = []
        for r in range(opts.tp_rounds):
            for side in rotated(sides, r):
                progress(f"throughput {mode} {side.name} run {r + 1}/{opts.tp_rounds}")
                # A direct run is charged to the spine gateway (idle then), as before the limiter side.
                gw_pid = ep.gateway.pid if side.name == "direct" else side.pid
                up_pid = side.upstream_pid or ep.upstream_pid
                before = CpuProbe.take(gw_pid, up_pid)
                if opts.use_wrk:
                    run = run_wrk(side.port, scripts[side.name], opts.tp_concurrency, opts.duration)
                else:
                    run = await _python_run(side, body, opts, mode == "stream")
                after = CpuProbe.take(gw_pid, up_pid)
                lc, gc = opts.load_cpu, opts.gateway_cpu
                run["cpu"] = after.since(before, run["requests"], gc if gc is not None else 0, lc or 0)
                run["side"] = side.name
                runs.append(run)
        # Best run per side: on a shared machine, noise only ever lowers throughput, so the best run
        # is the closest estimate of capacity; every run is kept in the JSON.
        best = {s.name: _best(runs, s.name) for s in sides}
        d_rps = best["direct"]["rps"] if best["direct"] else None
        g_rps = best["gateway"]["rps"] if best["gateway"] else None
        ratio = round(g_rps / d_rps, 3) if d_rps and g_rps else None
        results[mode] = {
            "mode": mode,
            "concurrency": opts.tp_concurrency,
            "tool": tool,
            "runs": runs,
            "direct_rps": d_rps,
            "gateway_rps": g_rps,
            "gateway_over_direct": ratio,
            "gateway_best": best["gateway"],
            "upstream_bound": bool(ratio is not None and ratio >= UPSTREAM_BOUND_RATIO),
            "client_bound_possible": not opts.use_wrk,
        }
        prior = best.get("before")
        if prior is not None and g_rps:
            results[mode]["before_rps"] = prior["rps"]
            results[mode]["before_best"] = prior
            results[mode]["gateway_over_before"] = round(g_rps / prior["rps"], 3) if prior["rps"] else None
        lim = best.get("limiter")
        if lim is not None:
            # The limiter's ratio is over the spine it is compared with (its own, or the gateway).
            spine = best.get("spine") or best["gateway"]
            s_rps = spine["rps"] if spine else None
            results[mode]["spine_rps"] = s_rps
            results[mode]["limiter_rps"] = lim["rps"]
            results[mode]["limiter_best"] = lim
            results[mode]["limiter_over_spine"] = round(lim["rps"] / s_rps, 3) if s_rps else None
    return results
