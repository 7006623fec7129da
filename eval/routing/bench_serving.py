"""Serving benchmark of the difficulty router: decision latency and event-loop lag on one core.

    python -m eval.routing.bench_serving [--rates 50 100 150] [--callers 16] [--seconds 10]
                                         [--max-batch 1 16] [--rounds 5] [--success [DIR] | --no-success]
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
With a success predictor (router/artifacts/success, or `--success DIR`; `--no-success` skips it), every
`--max-batch` value is run twice, as the difficulty policy (`head`: encoder + difficulty head, the
decision as it is today) and as the N-tier success policy (`success`: encoder + the predictor's one
numpy call on the same thread, then router.tiers over three tiers), interleaved the same way: the
before/after of issue 45's hot path in one run. Either decision includes its `plan_route` call.
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
    """Time every batch on the inference thread. Two clock reads per batch: negligible next to it.

    Wraps `assess_many`, the batch function the inference thread runs (DifficultyModel and
    SuccessScorer both queue `self.assess_many`, read when a request is queued)."""
    spans: Spans = {}
    original = model.assess_many

    def timed(texts: list[str]) -> list[Any]:
        start, cpu = time.perf_counter(), time.thread_time()
        out: list[Any] = original(texts)
        end, per = time.perf_counter(), (time.thread_time() - cpu) / max(len(texts), 1)
        for text in texts:
            spans[id(text)] = (start, end, per)
        return out

    model.assess_many = timed
    return spans


# The three tiers of the success configuration, cheap -> strong, when the predictor knows them (issue
# 45's MMLU-Pro example); otherwise its first, middle and last columns. The decision's cost does not
# depend on which columns are read.
SUCCESS_TIERS = ("Meta-Llama-3.1-8B-Instruct", "Meta-Llama-3.1-70B-Instruct", "gpt-4o-2024-05-13")


class Decider:
    """One serving configuration's decision for one request, as the gateway makes it: the model call
    off the loop (`assess_many` on the inference thread, timed by `_instrument`), then the plan."""

    def __init__(self, kind: str, scorer: Any, decide: Any) -> None:
        self.kind = kind
        self.scorer = scorer  # what `assess` is awaited on and `_instrument` wraps
        self._decide = decide

    async def __call__(self, text: str) -> int:
        return int(self._decide(await self.scorer.assess(text)))


def head_decider(model: Any) -> Decider:
    from router.config import RoutingPolicy
    from router.policy import plan_route

    policy = RoutingPolicy.model_validate({"tiers": [{"pool": "cheap"}, {"pool": "strong"}]})
    cut = (model.thresholds.get(0.3, 0.7),)
    return Decider("head", model, lambda a: plan_route(policy, a[0], thresholds=cut).start_tier)


def success_decider(scorer: Any) -> Decider:
    from router.config import RoutingPolicy
    from router.policy import plan_route
    from router.tiers import tier_columns, tier_probabilities

    known = scorer.predictor.models
    names = (
        list(SUCCESS_TIERS)
        if all(m in known for m in SUCCESS_TIERS)
        else [known[0], known[len(known) // 2], known[-1]]
    )
    policy = RoutingPolicy.model_validate(
        {"tiers": [{"pool": f"t{i}", "like": m} for i, m in enumerate(names)], "success": {"tolerance": 0.05}}
    )
    columns = tier_columns(scorer.predictor, names)
    return Decider(
        "success",
        scorer,
        lambda a: plan_route(policy, None, success=tier_probabilities(a[0], columns)).start_tier,
    )


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
    decide: Any,
    spans: Spans,
    prompts: list[str],
    rate: float,
    callers: int,
    seconds: float,
    out: Samples,
    tick: float = 0.001,
    seed: int = 0,
) -> None:
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
            await decide(text)  # the model off the loop, then the plan: the gateway's decision
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


def sequential(assess_many: Any, prompts: list[str], n: int = 200) -> dict[str, Any]:
    """One text at a time on this thread, no load: the model's own cost per decision."""
    ms = []
    for text in prompts[:n]:
        t0 = time.perf_counter()
        assess_many([text])
        ms.append((time.perf_counter() - t0) * 1000)
    return {"p50_ms": round(_pct(ms, 50), 2), "p99_ms": round(_pct(ms, 99), 2), "n": len(ms)}


def _line(rate: float, config: str, callers: int, r: dict[str, Any]) -> str:
    return (
        f"rate {rate:>4.0f}/s x{callers} {config:<16}: {r['decisions']} decisions, "
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
    parser.add_argument(
        "--success",
        nargs="?",
        const="",
        default="",
        help="success predictor directory for the `success` configurations (default: the shipped one, "
        "when present)",
    )
    parser.add_argument("--no-success", action="store_true", help="difficulty head configurations only")
    parser.add_argument("--out", type=Path, default=Path("bench-results/router-serving.json"))
    args = parser.parse_args(argv)
    _pin(args.cpu)

    from router.difficulty import DEFAULT_MAX_BATCH, DifficultyModel, SuccessScorer
    from router.success import default_success_dir

    base = DifficultyModel.load(args.model, cache_size=0)
    threads = {
        mb: DifficultyModel(base.artifact, base.encoder, cache_size=0, max_batch=mb)
        for mb in args.max_batch or [DEFAULT_MAX_BATCH]
    }
    success_dir = Path(args.success) if args.success else default_success_dir()
    with_success = not args.no_success and (bool(args.success) or success_dir.is_dir())
    deciders: dict[str, Decider] = {}
    for mb, thread in threads.items():
        deciders[f"head batch<={mb}"] = head_decider(thread)
        if with_success:
            # No cache: every call runs the encoder and the predictor, like the head's.
            scorer = SuccessScorer.load(thread, success_dir, cache_size=0)
            deciders[f"success batch<={mb}"] = success_decider(scorer)
    models = deciders  # the configurations, interleaved per rate
    results: list[dict[str, Any]] = []
    try:
        prompts = load_prompts(args.data, base, args.max_prompt_tokens, limit=5000)
        if not prompts:
            print("error: no prompts found in --data", file=sys.stderr)
            return 2
        print(f"{base.identity}; {len(prompts)} prompts <= {args.max_prompt_tokens} tokens; CPU {args.cpu}")
        solos: dict[str, dict[str, Any]] = {}
        for kind, d in {d.kind: d for d in models.values()}.items():
            warm = sequential(d.scorer.assess_many, prompts, 50)
            solo = solos[kind] = sequential(d.scorer.assess_many, prompts, 300)
            print(
                f"sequential {kind} (no load): P50 {solo['p50_ms']} ms  P99 {solo['p99_ms']} ms  "
                f"(warm-up {warm['p50_ms']})"
            )
        spans = {name: _instrument(d.scorer) for name, d in deciders.items()}  # after the solo runs
        idle = asyncio.run(idle_lag(min(args.seconds, 5.0)))
        print(f"loop lag with no routing (machine noise): p99 {idle['p99_ms']} ms  max {idle['max_ms']} ms")
        slice_seconds = args.seconds / max(args.rounds, 1)
        for rate in args.rates:
            samples = {name: Samples() for name in models}
            for round_no in range(max(args.rounds, 1)):
                order = list(models) if round_no % 2 == 0 else list(models)[::-1]
                for name in order:
                    asyncio.run(
                        run_slice(
                            models[name],
                            spans[name],
                            prompts,
                            rate,
                            args.callers,
                            slice_seconds,
                            samples[name],
                            args.tick_ms / 1000,
                            # Same seed for every configuration in a round: the same arrivals and
                            # prompts, so configurations differ only by what they do with them.
                            seed=int(rate) * 100 + round_no,
                        )
                    )
            for name, d in models.items():
                r = {
                    "offered_rate": rate,
                    "callers": args.callers,
                    "config": name,
                    "policy": d.kind,
                    **samples[name].summary(),
                }
                results.append(r)
                print(_line(rate, name, args.callers, r))
    finally:
        for m in threads.values():
            m.close()
        base.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"model": base.identity, "sequential": solos, "idle_lag": idle, "load": results}, indent=2)
        + "\n"
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
