"""Run every load level of a workload in turn, summarize, find the knee, write JSON and PNGs.

Levels come from the sweep (rates for open loop, concurrencies for closed loop) or, without one, the
single level in `load`. Levels run one after another from the lowest; each starts only when every
request of the previous one has finished, so one level's backlog never leaks into the next.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from eval.loadgen.plan import load_prompts
from eval.loadgen.progress import Progress
from eval.loadgen.report import FORMAT, knee_entry, workload_echo, write_json
from eval.loadgen.runner import Level, RunResult, run_level
from eval.loadgen.stats import find_knee, summarize
from eval.loadgen.workload import Workload

# Called with a level before it runs; returns the coroutine that stops the observation and yields what
# it saw (the capacity mode scrapes replica metrics this way).
Observer = Callable[[Level], Awaitable[Callable[[], Awaitable[dict[str, Any]]]]]


def resolve_levels(workload: Workload) -> list[Level]:
    load, sweep = workload.load, workload.sweep
    if sweep is not None and sweep.rates:
        return [Level("open", rate=r) for r in sorted(sweep.rates)]
    if sweep is not None and sweep.concurrencies:
        return [Level("closed", concurrency=c) for c in sorted(sweep.concurrencies)]
    if load.mode == "open":
        return [Level("open", rate=load.rate)]
    return [Level("closed", concurrency=load.concurrency)]


def knee_fraction(workload: Workload) -> float:
    return workload.sweep.knee_fraction if workload.sweep is not None else 0.9


def prompts_for(workload: Workload) -> list[str] | None:
    ds = workload.requests.dataset
    return load_prompts(ds.path, ds.limit) if ds is not None else None


async def run_sweep(
    workload: Workload, prompts: list[str] | None, quiet: bool, observer: Observer | None = None
) -> tuple[list[RunResult], list[dict[str, Any]]]:
    progress = None if quiet else (lambda label, total, dur: Progress(label, total, dur))
    results: list[RunResult] = []
    summaries: list[dict[str, Any]] = []
    for level in resolve_levels(workload):
        stop = await observer(level) if observer is not None else None
        result = await run_level(workload, level, prompts, progress)
        summary = summarize(result, workload.slo_classes, workload.load.warmup_s)
        if stop is not None:
            summary["observed"] = await stop()
        results.append(result)
        summaries.append(summary)
    return results, summaries


def build_report(workload: Workload, source: str | None, summaries: list[dict[str, Any]]) -> dict[str, Any]:
    fraction = knee_fraction(workload)
    knee = find_knee([(s["level"]["x"], s["goodput"]["slo_attainment"]) for s in summaries], fraction)
    return {
        "format": FORMAT,
        "finished_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "workload": workload_echo(workload, source),
        "levels": summaries,
        "knee": knee_entry(summaries, knee, fraction) if len(summaries) > 1 else None,
        "knee_index": knee,
    }


def write_outputs(
    out: Path, report: dict[str, Any], results: list[RunResult], plots: bool, prefix: str = "bench"
) -> list[Path]:
    written = [write_json(out / f"{prefix}.json", report)]
    if plots:
        from eval.loadgen.plot import plot_latency_cdfs, plot_sweep

        runs = [(r.level.label(), r.samples) for r in results]
        written.append(plot_latency_cdfs(runs, out / f"{prefix}-latency-cdf.png"))
        if len(results) > 1:
            fraction = report["knee"]["fraction"]
            written.append(
                plot_sweep(report["levels"], report["knee_index"], fraction, out / f"{prefix}-sweep.png")
            )
    return written
