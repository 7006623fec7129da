"""Drive one load level: open loop (arrivals on a schedule) or closed loop (fixed concurrency).

Open loop: every arrival time is computed up front (`plan.arrival_times`) and every body rendered up
front too, so the send loop only sleeps and spawns tasks; a request is sent at its arrival whether or
not earlier ones have finished, which is what real traffic does and what exposes queueing. Closed loop:
`concurrency` workers each send their next request as soon as the previous one ends; the offered load
is whatever the server sustains. Requests that start before `warmup_s` run but are marked unmeasured.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from eval.loadgen.client import Sample, execute, make_session
from eval.loadgen.plan import Planner, arrival_times
from eval.loadgen.progress import Progress
from eval.loadgen.workload import Workload


@dataclass(frozen=True, slots=True)
class Level:
    """One load level: an offered rate (open loop) or a concurrency (closed loop)."""

    mode: str
    rate: float | None = None
    concurrency: int | None = None

    @property
    def x(self) -> float:
        value = self.rate if self.mode == "open" else self.concurrency
        assert value is not None
        return float(value)

    def label(self) -> str:
        return f"rate {self.rate:g}/s" if self.mode == "open" else f"concurrency {self.concurrency}"


@dataclass(frozen=True, slots=True)
class RunResult:
    level: Level
    samples: list[Sample]
    window_end: float  # the measurement window is [warmup_s, window_end] (see `measurement_end`)
    wall_s: float


def measurement_end(samples: list[Sample], duration_s: float | None, wall_s: float) -> float:
    """End of the measurement window: the issuing period when the run is time-bounded; otherwise
    (a request count) the last measured request's end, since every request is then part of the result."""
    if duration_s is not None:
        return duration_s
    ends = [s.end for s in samples if s.measured]
    return max(ends) if ends else wall_s


def _endpoint(workload: Workload, target: int) -> str:
    path = "/v1/chat/completions" if workload.target.api == "chat" else "/v1/completions"
    return workload.target.base_urls[target].rstrip("/") + path


async def run_level(
    workload: Workload,
    level: Level,
    prompts: list[str] | None,
    progress: Callable[[str, int | None, float | None], Progress] | None = None,
) -> RunResult:
    load = workload.load
    limit = load.max_inflight if level.mode == "open" else (level.concurrency or load.concurrency)
    async with make_session(limit, workload.target.timeout_s, workload.target.connect_timeout_s) as session:
        if level.mode == "open":
            assert level.rate is not None
            return await _open(workload, level, level.rate, prompts, session, progress)
        assert level.concurrency is not None
        return await _closed(workload, level, level.concurrency, prompts, session, progress)


async def _open(
    workload: Workload,
    level: Level,
    rate: float,
    prompts: list[str] | None,
    session: aiohttp.ClientSession,
    progress: Callable[[str, int | None, float | None], Progress] | None,
) -> RunResult:
    load = workload.load
    times = arrival_times(load.arrival, rate, workload.seed, load.duration_s, load.requests)
    planner = Planner(workload, prompts)
    specs = [planner.next() for _ in times]
    urls = [_endpoint(workload, s.target) for s in specs]
    bar = progress(level.label(), len(specs), None) if progress else None
    samples: list[Sample] = []

    async def one(i: int, t0: float) -> None:
        sample = await execute(session, urls[i], specs[i], t0, times[i])
        sample.measured = times[i] >= load.warmup_s
        samples.append(sample)
        if bar:
            bar.on_done(sample.ok)

    tasks: list[asyncio.Task[None]] = []
    t0 = time.perf_counter()
    for i, at in enumerate(times):
        delay = t0 + at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, t0)))
        if bar:
            bar.on_sent()
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - t0
    if bar:
        bar.close()
    samples.sort(key=lambda s: s.index)
    # A count-bounded run can end its arrivals before duration_s: then the window is the count's.
    duration = load.duration_s if len(times) != load.requests else None
    return RunResult(level, samples, measurement_end(samples, duration, wall), wall)


async def _closed(
    workload: Workload,
    level: Level,
    concurrency: int,
    prompts: list[str] | None,
    session: aiohttp.ClientSession,
    progress: Callable[[str, int | None, float | None], Progress] | None,
) -> RunResult:
    load = workload.load
    planner = Planner(workload, prompts)
    bar = progress(level.label(), load.requests, load.duration_s) if progress else None
    samples: list[Sample] = []
    t0 = time.perf_counter()
    issued = 0

    async def worker() -> None:
        nonlocal issued
        while True:
            now = time.perf_counter() - t0
            if load.duration_s is not None and now >= load.duration_s:
                return
            if load.requests is not None and issued >= load.requests:
                return
            issued += 1
            spec = planner.next()
            if bar:
                bar.on_sent()
            sample = await execute(session, _endpoint(workload, spec.target), spec, t0, now)
            sample.measured = now >= load.warmup_s
            samples.append(sample)
            if bar:
                bar.on_done(sample.ok)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    if bar:
        bar.close()
    samples.sort(key=lambda s: s.index)
    duration = load.duration_s if issued != load.requests else None
    return RunResult(level, samples, measurement_end(samples, duration, wall), wall)
