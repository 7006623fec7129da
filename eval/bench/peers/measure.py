"""The rounds: every side, one after the other, measured the same way, the same order every round.

Per side and round: latency batches (non-streaming and streaming, at concurrency 1 and 8, closed loop,
our raw client with TTFT) and throughput runs (wrk, concurrency 32, non-streaming and streaming).
Only one side is loaded at a time; the gateway core is otherwise idle (every gateway waits on it, idle).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval.bench.overhead.probes import CpuProbe
from eval.bench.overhead.wrk import run_wrk, wrk_script
from eval.bench.peers._sampler import timed_batch
from eval.bench.peers.sides import Side

MODES = ("unary", "stream")

# Appended to the wrk script of a `unique` side: each request gets a new prompt (run tag + counter).
# wrk.format adds the Content-Length of the body it is given.
_UNIQUE_LUA = """
local template = [==[{template}]==]
local counter = 0
request = function()
  counter = counter + 1
  return wrk.format(nil, nil, nil, string.format(template, "{run}", counter))
end
"""


def unique_prompts(script: Path, template: bytes, run: str) -> None:
    """Make a wrk script send a new prompt with every request; `template` holds `%s-%d` in the prompt
    and no other `%` (the JSON of our request body has none)."""
    with script.open("a") as f:
        f.write(_UNIQUE_LUA.format(template=template.decode(), run=run))


@dataclass(frozen=True, slots=True)
class Plan:
    rounds: int
    latency_concurrency: tuple[int, ...]
    latency_seconds: float
    throughput_concurrency: int
    throughput_seconds: float
    warmup_seconds: float
    gateway_cpu: int | None
    load_cpu: int | None


async def warm_up(sides: Sequence[Side], plan: Plan, progress: Callable[[str], None]) -> None:
    """Connections, upstream pools, caches, lazy imports (LiteLLM's first call takes ~0.5 s)."""
    for side in sides:
        progress(f"warm-up {side.name}")
        for mode in MODES:
            cell = await timed_batch(
                side.port, side.requests(mode == "stream"), 8, plan.warmup_seconds, mode == "stream"
            )
            if cell.errors or not cell.total_ns:
                raise RuntimeError(f"{side.name} {mode} warm-up failed: {cell.first_error or 'no answer'}")


async def measure_side(side: Side, plan: Plan, work: Path) -> dict[str, dict[str, Any]]:
    """One round of one side: its latency cells and its throughput cells."""
    out: dict[str, dict[str, Any]] = {}
    for mode in MODES:
        stream = mode == "stream"
        for c in plan.latency_concurrency:
            cell = await timed_batch(side.port, side.requests(stream), c, plan.latency_seconds, stream)
            out[f"{mode}@{c}"] = cell.summary(stream)
    for mode in MODES:
        script = wrk_script(work / f"{side.name}-{mode}.lua", side.body(mode == "stream"), side.headers)
        if side.unique:
            unique_prompts(script, side.body(mode == "stream", tag="%s-%d"), uuid.uuid4().hex[:12])
        before = CpuProbe.take(side.pid, side.pid)
        run = run_wrk(side.port, script, plan.throughput_concurrency, plan.throughput_seconds)
        after = CpuProbe.take(side.pid, side.pid)
        cpu = after.since(before, run["requests"], plan.gateway_cpu or 0, plan.load_cpu or 0)
        # The upstream's core is the load core, so "direct" runs charge the upstream itself.
        run["cpu_us_per_req"] = cpu["gateway_cpu_us_per_req"]
        run["gateway_core_busy"] = cpu["gateway_core_busy"]
        run["load_core_busy"] = cpu["load_core_busy"]
        out[f"{mode}@{plan.throughput_concurrency}"] = run
    return out


async def measure_rounds(
    sides: Sequence[Side], plan: Plan, work: Path, progress: Callable[[str], None]
) -> list[dict[str, dict[str, dict[str, Any]]]]:
    """`plan.rounds` rounds, each side in the same order (direct first: each round's reference)."""
    await warm_up(sides, plan, progress)
    rounds: list[dict[str, dict[str, dict[str, Any]]]] = []
    for r in range(plan.rounds):
        rnd: dict[str, dict[str, dict[str, Any]]] = {}
        for side in sides:
            progress(f"round {r + 1}/{plan.rounds}: {side.name}")
            rnd[side.name] = await measure_side(side, plan, work)
        rounds.append(rnd)
    return rounds
