"""Serving benchmark of the difficulty router: decision latency and event-loop lag on one core.

    python -m eval.routing.bench_serving [--rates 50 100 150] [--callers 16] [--seconds 10]
                                         [--max-batch 1 16] [--rounds 5]
    make bench-router

The process pins itself to one CPU (`os.sched_setaffinity`) with one onnxruntime and one BLAS thread,
so the event loop, the model's inference thread and the encoder share that core as they would in a
one-core gateway pod. Load: `--callers` concurrent async callers, each waiting an exponential think
time before its next request, so the offered rate is `rate` requests/s in total (Poisson-like arrivals:
closed-loop callers at full speed would measure queueing, not the router). Prompts come from routing
files, at most 512 tokens each; the LRU cache is off so every call runs the encoder.

A/B in one run: each `--max-batch` value is a serving configuration (one model each, sharing the
loaded artifact and encoder). Every rate's `--seconds` is cut into `--rounds` slices per configuration,
run alternately (order reversed every other round), so other processes on a shared machine load every
configuration alike. Compare configurations within a run; absolute figures move with the machine.
Callers send only inside the window and the window is the denominator (earlier versions waited out
each caller's last think time past the deadline, and sent after it: throughput and CPU share were
diluted by up to the longest of 16 think times, ~1 s at 50 req/s).

Reported per rate and configuration: decision latency percentiles (await `score` + the threshold
comparison, as the gateway does it), achieved throughput, event-loop lag (a ticker task sleeps 1 ms in
a loop and records how late it wakes up; its maximum is the longest time anything, routing included,
held the loop), and where a decision's time goes: queue (submitted -> its batch starts on the
inference thread), service (batch start -> end, wall), the inference thread's CPU time per decision
(unlike wall time it does not grow when other processes share the core), the hop back (batch end
-> the caller runs again) and the rest of the process's CPU per decision (the loop: callers, ticker,
futures), which on one core the inference thread does not get. Targets (issue 4): P50 <= 5 ms,
P99 <= 15 ms, loop lag <= 5 ms. A report, never a test assertion.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_DATA = [
    "/work/shared/data/routing/mmlu_dev.jsonl",
    "/work/shared/data/routing/routerbench_arc_challenge_train.jsonl",
    "/work/shared/data/routing/routerbench_mbpp_train.jsonl",
]


def _pin(cpu: int) -> None:
    # Must precede numpy/onnxruntime imports: BLAS reads its thread count once, at import.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    os.sched_setaffinity(0, {cpu})


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    idx = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[idx]


def load_prompts(paths: list[str], model: Any, max_prompt_tokens: int, limit: int) -> list[str]:
    import orjson

    prompts: list[str] = []
    for path in paths:
        if not Path(path).is_file():
            continue
        with open(path, "rb") as fh:
            for line in fh:
                prompt = orjson.loads(line).get("prompt")
                if not isinstance(prompt, str):
                    continue
                n = len(model.encoder._tokenizer.encode(prompt).ids)
                if n <= max_prompt_tokens:
                    prompts.append(prompt)
    random.Random(7).shuffle(prompts)
    return prompts[:limit]


async def _ticker(lags: list[float], stop: asyncio.Event, period: float = 0.001) -> None:
    while not stop.is_set():
        start = time.perf_counter()
        await asyncio.sleep(period)
        lags.append(time.perf_counter() - start - period)


# id(text) -> (batch start, batch end, inference-thread CPU seconds per decision of that batch)
Spans = dict[int, tuple[float, float, float]]


def _instrument(model: Any) -> Spans:
    """Time every batch on the inference thread. Two clock reads per batch: negligible next to it."""
    spans: Spans = {}
    original = model.score_many

    def timed(texts: list[str]) -> list[float]:
        start, cpu = time.perf_counter(), time.thread_time()
        out: list[float] = original(texts)
        end, per = time.perf_counter(), (time.thread_time() - cpu) / max(len(texts), 1)
        for text in texts:
            spans[id(text)] = (start, end, per)
        return out

    model.score_many = timed
    return spans


@dataclass
class Samples:
    """Everything measured for one (rate, configuration), summed over its slices."""

    latency: list[float] = field(default_factory=list)
    queue: list[float] = field(default_factory=list)
    service: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    back: list[float] = field(default_factory=list)
    lag: list[float] = field(default_factory=list)
    elapsed: float = 0.0
    process_cpu: float = 0.0

    def summary(self) -> dict[str, Any]:
        def ms(values: list[float], q: float) -> float:
            return round(_pct(values, q) * 1000, 2)

        elapsed = max(self.elapsed, 1e-9)
        return {
            "decisions": len(self.latency),
            "throughput": round(len(self.latency) / elapsed, 1),
            # CPU time this process got / wall time: well below 1 at high load means other processes
            # shared the pinned core, and the latencies include that.
            "cpu_share": round(self.process_cpu / elapsed, 2),
            "p50_ms": ms(self.latency, 50),
            "p90_ms": ms(self.latency, 90),
            "p99_ms": ms(self.latency, 99),
            "max_ms": round(max(self.latency) * 1000, 2) if self.latency else None,
            "loop_lag_p99_ms": ms(self.lag, 99),
            "loop_lag_max_ms": round(max(self.lag) * 1000, 2) if self.lag else None,
            "queue_p50_ms": ms(self.queue, 50),
            "queue_p99_ms": ms(self.queue, 99),
            "service_p50_ms": ms(self.service, 50),
            "service_p99_ms": ms(self.service, 99),
            "cpu_per_decision_p50_ms": ms(self.cpu, 50),
            "cpu_per_decision_p99_ms": ms(self.cpu, 99),
            # The rest of the process's CPU: the event loop (callers, ticker, futures, the hop back)
            # per decision; on one core it is time the inference thread does not get.
            "loop_cpu_per_decision_ms": round(
                (self.process_cpu - sum(self.cpu)) / max(len(self.latency), 1) * 1000, 2
            ),
            "hop_back_p99_ms": ms(self.back, 99),
        }


async def run_slice(
    model: Any,
    spans: Spans,
    prompts: list[str],
    rate: float,
    callers: int,
    seconds: float,
    out: Samples,
    tick: float = 0.001,
    seed: int = 0,
) -> None:
    threshold = model.thresholds.get(0.3, 0.7)
    stop = asyncio.Event()
    # One clock reading starts the window and sets its end, so the measured window is never shorter.
    started, cpu_started = time.perf_counter(), time.process_time()
    deadline = started + seconds
    per_caller = rate / callers

    async def caller(seed: int) -> None:
        rng = random.Random(seed)
        while True:
            think = rng.expovariate(per_caller)
            if time.perf_counter() + think >= deadline:
                break  # that request would fall after the window
            await asyncio.sleep(think)
            if time.perf_counter() >= deadline:
                break  # the sleep overran the window (a busy loop wakes late)
            prompt = prompts[rng.randrange(len(prompts))]
            # A fresh str object with the same text: two callers may draw the same prompt, and the
            # spans are keyed by object identity. Built before the clock starts.
            text = prompt[:1] + prompt[1:]
            t0 = time.perf_counter()
            difficulty = await model.score(text)
            _strong = difficulty >= threshold  # the decision the gateway makes
            t1 = time.perf_counter()
            out.latency.append(t1 - t0)
            start, end, cpu = spans.pop(id(text))
            out.queue.append(start - t0)
            out.service.append(end - start)
            out.cpu.append(cpu)
            out.back.append(t1 - end)

    ticker = asyncio.create_task(_ticker(out.lag, stop, tick))
    await asyncio.gather(*(caller(seed * 1000 + i) for i in range(callers)))
    # The whole window, not less: the loop may fire a timer up to its clock resolution early.
    while (left := deadline - time.perf_counter()) > 0:
        await asyncio.sleep(left)
    out.elapsed += time.perf_counter() - started
    out.process_cpu += time.process_time() - cpu_started
    stop.set()
    await ticker


async def idle_lag(seconds: float) -> dict[str, Any]:
    """The ticker alone: how late the loop wakes on this machine with no routing at all."""
    lags: list[float] = []
    stop = asyncio.Event()
    ticker = asyncio.create_task(_ticker(lags, stop))
    await asyncio.sleep(seconds)
    stop.set()
    await ticker
    ms = [x * 1000 for x in lags]
    return {"p99_ms": round(_pct(ms, 99), 2), "max_ms": round(max(ms), 2) if ms else None}


def sequential(model: Any, prompts: list[str], n: int = 200) -> dict[str, Any]:
    ms = []
    for text in prompts[:n]:
        t0 = time.perf_counter()
        model.score_sync(text)
        ms.append((time.perf_counter() - t0) * 1000)
    return {"p50_ms": round(_pct(ms, 50), 2), "p99_ms": round(_pct(ms, 99), 2), "n": len(ms)}


def _line(rate: float, max_batch: int, callers: int, r: dict[str, Any]) -> str:
    return (
        f"rate {rate:>4.0f}/s x{callers} batch<={max_batch:<3}: {r['decisions']} decisions, "
        f"{r['throughput']}/s, CPU share {r['cpu_share']}  P50 {r['p50_ms']} ms  P90 {r['p90_ms']} ms  "
        f"P99 {r['p99_ms']} ms  max {r['max_ms']} ms  loop lag p99 {r['loop_lag_p99_ms']} ms "
        f"max {r['loop_lag_max_ms']} ms  queue P50/P99 {r['queue_p50_ms']}/{r['queue_p99_ms']} ms  "
        f"service P50/P99 {r['service_p50_ms']}/{r['service_p99_ms']} ms  "
        f"CPU/decision P50/P99 {r['cpu_per_decision_p50_ms']}/{r['cpu_per_decision_p99_ms']} ms  "
        f"hop back P99 {r['hop_back_p99_ms']} ms  loop CPU/decision {r['loop_cpu_per_decision_ms']} ms"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m eval.routing.bench_serving", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--model", help="artifact directory (default: the shipped artifact)")
    parser.add_argument("--data", nargs="+", default=DEFAULT_DATA, help="routing files to take prompts from")
    parser.add_argument("--rates", nargs="+", type=float, default=[50.0, 100.0, 150.0], help="offered req/s")
    parser.add_argument("--callers", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0, help="per rate and configuration")
    parser.add_argument(
        "--max-batch", nargs="+", type=int, help="configurations to compare (default: the model's)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="alternating slices per rate")
    parser.add_argument("--cpu", type=int, default=0, help="the one CPU to pin to")
    parser.add_argument("--max-prompt-tokens", type=int, default=512)
    parser.add_argument(
        "--tick-ms", type=float, default=1.0, help="loop-lag ticker period (it costs CPU too)"
    )
    parser.add_argument("--out", type=Path, default=Path("bench-results/router-serving.json"))
    args = parser.parse_args(argv)
    _pin(args.cpu)

    from router.difficulty import DEFAULT_MAX_BATCH, DifficultyModel

    base = DifficultyModel.load(args.model, cache_size=0)
    models = {
        mb: DifficultyModel(base.artifact, base.encoder, cache_size=0, max_batch=mb)
        for mb in args.max_batch or [DEFAULT_MAX_BATCH]
    }
    spans = {mb: _instrument(m) for mb, m in models.items()}
    results: list[dict[str, Any]] = []
    try:
        prompts = load_prompts(args.data, base, args.max_prompt_tokens, limit=5000)
        if not prompts:
            print("error: no prompts found in --data", file=sys.stderr)
            return 2
        print(f"{base.identity}; {len(prompts)} prompts <= {args.max_prompt_tokens} tokens; CPU {args.cpu}")
        warm = sequential(base, prompts, 50)
        solo = sequential(base, prompts, 300)
        print(
            f"sequential (no load): P50 {solo['p50_ms']} ms  P99 {solo['p99_ms']} ms  "
            f"(warm-up {warm['p50_ms']})"
        )
        idle = asyncio.run(idle_lag(min(args.seconds, 5.0)))
        print(f"loop lag with no routing (machine noise): p99 {idle['p99_ms']} ms  max {idle['max_ms']} ms")
        slice_seconds = args.seconds / max(args.rounds, 1)
        for rate in args.rates:
            samples = {mb: Samples() for mb in models}
            for round_no in range(max(args.rounds, 1)):
                order = list(models) if round_no % 2 == 0 else list(models)[::-1]
                for mb in order:
                    asyncio.run(
                        run_slice(
                            models[mb],
                            spans[mb],
                            prompts,
                            rate,
                            args.callers,
                            slice_seconds,
                            samples[mb],
                            args.tick_ms / 1000,
                            # Same seed for every configuration in a round: the same arrivals and
                            # prompts, so configurations differ only by what they do with them.
                            seed=int(rate) * 100 + round_no,
                        )
                    )
            for mb in models:
                r = {"offered_rate": rate, "callers": args.callers, "max_batch": mb, **samples[mb].summary()}
                results.append(r)
                print(_line(rate, mb, args.callers, r))
    finally:
        for m in models.values():
            m.close()
        base.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"model": base.identity, "sequential": solo, "idle_lag": idle, "load": results}, indent=2)
        + "\n"
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
