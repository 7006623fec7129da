"""`make bench-spec` / `python -m eval.bench.spec`: TPOT and goodput vs offered load for one alias
served by a speculative and a plain pool of the same model, routed four ways (docs/design/027):

- always: every request to the speculative pool (the plain pool idles);
- never: every request to the plain pool (the speculative pool idles);
- switch: `router.speculative.choose_pool`, the rule the gateway runs with `learn: true`: speculative
  while the batch is below the switch point, the acceptance above the floor and the expected TPOT
  no worse than the plain pool's at its batch; else plain. What it knows is learnt the gateway's way:
  the always and never runs are scraped every 0.5 s into `pools.tpot_curve.TpotCurve`s, and the
  switch point is `learned_switch_point` of the two curves;
- least-load: both pools, least running batch first, speculation ignored (a baseline that uses both
  pools too; printed for honesty, the verdict is the issue's: against always and never).

One pool = one replica of the simulator's `small` profile (memory-bound base 8 ms per step, 0.15 ms
per verified token, 0.1 ms per prompt token); the speculative one drafts k = 3 ngram-like tokens with
per-token acceptance 0.78 (vLLM CPU measured a mean acceptance length of 2.88; eval/sim/speculation.py).
The replicas are the simulator's `Engine` on a virtual clock (eval/bench/spec/fleet.py). Goodput =
requests per second meeting the SLO (TTFT and TPOT). The same arrivals (seed) for every policy at a
load point. A report, not a test: the figures come from this run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence

from eval.bench.spec.fleet import Arrival, Outcome, Replica, Router, arrivals, run
from eval.sim.engine import Engine
from eval.sim.profile import SimProfile, load_profile
from pools.tpot_curve import TpotCurve, expected_tpot, pool_curve
from router.speculative import SpecRule, SpecSnapshot, choose_pool, learned_switch_point

MIN_DRAFT_TOKENS = 200  # models[].route.speculative.min_draft_tokens' default
EPS = 1e-9


def profiles(acceptance: float, k: int) -> tuple[SimProfile, SimProfile]:
    spec = {"num_speculative_tokens": k, "acceptance": acceptance}
    return load_profile("small", {"speculative": spec}), load_profile("small")


def always(fleet: Sequence[Replica], now: float) -> int:
    return 0


def never(fleet: Sequence[Replica], now: float) -> int:
    return 1


def least_load(fleet: Sequence[Replica], now: float) -> int:
    return min(range(len(fleet)), key=lambda i: (fleet[i].batch, i))


def switching(
    switch: float, floor: float, spec_curve: Mapping[int, float], plain_curve: Mapping[int, float]
) -> Router:
    rule = SpecRule(switch_batch=switch, min_acceptance=floor, throughput_share=1.0, latency_sensitive=True)

    def route(fleet: Sequence[Replica], now: float) -> int:
        spec, plain = fleet
        drafted = spec.engine.spec_stats.draft_tokens >= MIN_DRAFT_TOKENS
        snap = SpecSnapshot(
            batch=spec.batch,
            acceptance=spec.acceptance() if drafted else None,
            tpot=expected_tpot(spec_curve, spec.batch),
            plain_tpot=expected_tpot(plain_curve, plain.batch),
        )
        return 0 if choose_pool(snap, rule).speculative else 1

    return route


def stats(o: Outcome, duration: float, slo: tuple[float, float]) -> tuple[float, float, float]:
    """(mean TPOT ms, p90 TPOT ms, goodput req/s)."""
    tp = sorted(o.tpot)
    mean = 1000 * sum(tp) / len(tp) if tp else 0.0
    p90 = 1000 * tp[min(len(tp) - 1, int(0.9 * len(tp)))] if tp else 0.0
    met = sum(1 for a, b in zip(o.ttft, o.tpot, strict=False) if a <= slo[0] and b <= slo[1])
    return mean, p90, met / duration


def _run(
    route: Router, profs: tuple[SimProfile, SimProfile], work: list[Arrival]
) -> tuple[Outcome, list[Replica]]:
    fleet = [Replica("spec", Engine(profs[0])), Replica("plain", Engine(profs[1]))]
    return run(fleet, route, work), fleet


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m eval.bench.spec", description="speculative routing benchmark")
    p.add_argument("--loads", default="2,5,10,15,20,25,30,40,50", help="offered loads, requests/s")
    p.add_argument("--duration", type=float, default=30.0, help="seconds of arrivals per load point")
    p.add_argument("--acceptance", type=float, default=0.78, help="per-token draft acceptance")
    p.add_argument("--k", type=int, default=3, help="num_speculative_tokens")
    p.add_argument("--slo-ttft-ms", type=float, default=1000.0)
    p.add_argument("--slo-tpot-ms", type=float, default=30.0)
    p.add_argument("--min-acceptance", type=float, default=0.5, help="the rule's acceptance floor")
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args(argv)


def _print_curves(spec: Mapping[int, float], plain: Mapping[int, float], switch: float | None) -> None:
    print("TPOT vs running batch, learnt from the always/never runs' scrapes (ms):")
    print("    bin  speculative  plain")
    for b in sorted(set(spec) | set(plain)):
        print(f"  {b:>5}  {_ms(spec.get(b)):>11}  {_ms(plain.get(b)):>5}")
    where = "none (the curves do not cross)" if switch is None else f"batch {switch:g}"
    print(f"learnt switch point: {where}\n")


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1000 * seconds:.2f}"


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    profs = profiles(a.acceptance, a.k)
    loads = [float(x) for x in a.loads.split(",")]
    slo = (a.slo_ttft_ms / 1e3, a.slo_tpot_ms / 1e3)
    works = {load: arrivals(load, a.duration, a.seed) for load in loads}
    cells: dict[tuple[str, float], tuple[float, float, float]] = {}
    learnt: dict[str, list[TpotCurve]] = {"spec": [], "plain": []}
    for load in loads:  # 1. each pool alone; the scrapes teach both curves
        baselines: tuple[tuple[str, Router], ...] = (("always", always), ("never", never))
        for name, route in baselines:
            o, fleet = _run(route, profs, works[load])
            cells[(name, load)] = stats(o, a.duration, slo)
            for r in fleet:
                learnt[r.name].append(r.curve)
    spec_curve, plain_curve = pool_curve(learnt["spec"]), pool_curve(learnt["plain"])
    switch = learned_switch_point(spec_curve, plain_curve)
    _print_curves(spec_curve, plain_curve, switch)
    rule = switching(
        switch if switch is not None else float("inf"), a.min_acceptance, spec_curve, plain_curve
    )
    names = ("always", "never", "switch", "least-load")
    for load in loads:  # 2. the rule with what was learnt, and the speculation-unaware baseline
        for name, route in (("switch", rule), ("least-load", least_load)):
            cells[(name, load)] = stats(_run(route, profs, works[load])[0], a.duration, slo)
    print(f"SLO: TTFT <= {a.slo_ttft_ms:g} ms and TPOT <= {a.slo_tpot_ms:g} ms; ", end="")
    print(f"{a.duration:g} s of arrivals per load")
    print("cells: mean TPOT ms / p90 TPOT ms / goodput req/s")
    header = f"{'load/s':>7} | " + " | ".join(f"{n:^26}" for n in names)
    print(header + "\n" + "-" * len(header))
    for load in loads:
        row = (cells[(n, load)] for n in names)
        print(f"{load:>7g} | " + " | ".join(f"{m:7.2f} / {p:7.2f} / {g:6.2f}" for m, p, g in row))
    print()
    _verdict("goodput", {n: [cells[(n, x)][2] for x in loads] for n in names}, higher=True)
    _verdict("mean TPOT", {n: [cells[(n, x)][0] for x in loads] for n in names}, higher=False)
    return 0


def _verdict(what: str, v: dict[str, list[float]], higher: bool) -> None:
    sign = 1.0 if higher else -1.0
    s = [sign * x for x in v["switch"]]

    def of(name: str) -> list[float]:
        return [sign * x for x in v[name]]

    every = all(x >= max(a, b) - EPS for x, a, b in zip(s, of("always"), of("never"), strict=True))
    strict = {n: any(x > y + EPS for x, y in zip(s, of(n), strict=True)) for n in ("always", "never")}
    worse_ll = sum(1 for x, y in zip(s, of("least-load"), strict=True) if x < y - EPS)
    yes = {True: "yes", False: "no"}
    print(f"{what}: switch >= the better of always and never at every load: {yes[every]}; strictly better")
    print(f"  than always somewhere: {yes[strict['always']]}; than never somewhere: {yes[strict['never']]};")
    print(f"  worse than least-load (both pools, speculation ignored) at {worse_ll} of {len(s)} loads")


if __name__ == "__main__":
    sys.exit(main())
