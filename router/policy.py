"""The routing policy: a pure function from what is known about a request to an ordered plan of tiers.

    plan_route(policy, difficulty, thresholds=..., latency_budget_ms=..., headroom=..., risk_flags=...,
               streaming=..., allowed_tiers=...) -> Plan

Semantics, in the order they apply:

1. Start tier from difficulty. N tiers have N-1 ascending cut points (the YAML's `difficulty.thresholds`,
   else the router artifact's calibration passed as `thresholds`); a request starts at the number of cut
   points it reaches: difficulty >= t[i] means "above tier i". Without a difficulty (no router model,
   or a request the router cannot score) the start is `fallback_tier` (default the cheapest tier; with
   a cascade the cheap tier is the sensible start: the scorer, not the prompt, then decides).
   A policy with `success` starts instead from per-tier predicted success (`success`, `tolerance`):
   the cheapest tier within the tolerance of the best (router/tiers.py); without probabilities, at
   `fallback_tier` (note `no_success`). `difficulty` is then only what the header reports.
2. Risk flags raise the start to the highest `risk_floor` of the flags present (e.g. a tenant that
   must not be answered by a small model).
3. Allowed tiers (the caller's key may use only some pools): the tiers from the start up are cut to
   the allowed ones; when none of them is allowed, the strongest allowed tier below the start is the
   only one (the request is capped at what the key may use, never refused for its wording). Done
   before the steps are formed, so a cascade is built over the tiers that may really be called.
4. Headroom: tiers at or above the start whose pool SLO headroom (1 = idle, 0 = at its SLO) is at or
   below `min_headroom` are left out. The strongest tier is never left out: when everything is
   saturated, admission control, not routing, has to say no.
5. Steps: route only (no cascade, or a streaming request under `stream_mode: route_only`) gives one
   step per remaining tier, the later ones being failover. A cascade forms steps by its mode: one call
   per tier (`single`), two samples of each non-final tier (`samples`), or two adjacent tiers called
   together (`tiers`; a lone first cheap tier that nothing can agree with is skipped). The strongest
   remaining tier is always the last step, alone. `max_escalations` keeps the first steps and the last.
6. Latency budget: steps run one after the other, so when the tiers' `typical_latency_ms` add up to
   more than the budget, the cheapest steps are dropped until the rest fits (or only the last is left).

Price enters through the tier order (validated cheap -> strong in the config) and through accounting;
the plan never depends on it at run time, which keeps decisions identical offline and in the gateway.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Mapping, Sequence

from router.config import RoutingPolicy
from router.plan import Call, Plan, Step
from router.tiers import success_start


def resolve_thresholds(
    policy: RoutingPolicy,
    calibrated: Sequence[float] | None,
    quantile: Callable[[float], float] | None = None,
) -> tuple[float, ...] | None:
    """The cut points plan_route uses: the YAML's, else from its target share, else the artifact's.

    `quantile(q)` is the artifact's difficulty quantile function (needed only for a target share);
    `calibrated` are the artifact's N-1 cut points. Call once at start-up, not per request.
    """
    n = len(policy.tiers)
    cfg = policy.difficulty
    if cfg is not None and cfg.thresholds is not None:
        return cfg.thresholds
    if cfg is not None and cfg.target_strong_share is not None:
        if quantile is None:
            raise ValueError("difficulty.target_strong_share needs a router artifact with a calibration")
        # Two-way split: all but the strong tier start at the cheapest one.
        cut = 1.0 if cfg.target_strong_share == 0 else quantile(1.0 - cfg.target_strong_share)
        return tuple([cut] * (n - 1))
    if calibrated is not None:
        if len(calibrated) != n - 1:
            raise ValueError(
                f"the router artifact has {len(calibrated)} cut points, the policy has {n} tiers"
            )
        return tuple(calibrated)
    return None


def start_tier(policy: RoutingPolicy, difficulty: float | None, thresholds: Sequence[float] | None) -> int:
    if difficulty is None or thresholds is None:
        return policy.fallback_tier if policy.fallback_tier is not None else 0
    return bisect.bisect_right(list(thresholds), difficulty)


def _allowed(ladder: list[int], allowed: Collection[int], start: int, notes: list[str]) -> list[int]:
    """The ladder cut to the allowed tiers; all of them above what is allowed: the best allowed one."""
    kept = [t for t in ladder if t in allowed]
    if not kept:
        below = [t for t in allowed if 0 <= t < start]
        if not below:
            raise ValueError(f"no allowed tier among {sorted(allowed)}")
        kept = [max(below)]
    if kept != ladder:
        notes.append("allowed_tiers")
    return kept


def _cascade_steps(ladder: list[int], mode: str) -> list[Step]:
    *cheap, last = ladder
    steps: list[Step] = []
    if mode == "samples":
        steps = [Step((Call(t, 0), Call(t, 1))) for t in cheap]
    elif mode == "tiers":
        i = 0
        while i < len(cheap):
            pair = cheap[i : i + 2]
            # A lone cheap tier in the first step has nothing to agree with: it could only escalate.
            if len(pair) == 2 or steps:
                steps.append(Step(tuple(Call(t) for t in pair)))
            i += 2
    else:
        steps = [Step((Call(t),)) for t in cheap]
    return [*steps, Step((Call(last),))]


def plan_route(
    policy: RoutingPolicy,
    difficulty: float | None,
    *,
    thresholds: Sequence[float] | None = None,
    latency_budget_ms: float | None = None,
    headroom: Mapping[str, float] | None = None,
    risk_flags: Collection[str] = (),
    streaming: bool = False,
    allowed_tiers: Collection[int] | None = None,
    success: Sequence[float] | None = None,
    tolerance: float | None = None,
) -> Plan:
    """The ordered plan for one request (see the module docstring for the rules).

    `allowed_tiers` (None: all) must hold at least one tier of the policy (ValueError otherwise).
    `success` (one probability per tier) and `tolerance` (default: the policy's) are read only when the
    policy has a `success` section."""
    n = len(policy.tiers)
    notes: list[str] = []
    if policy.success is not None:
        tol = policy.success.tolerance if tolerance is None else tolerance
        picked = success_start(success, tol) if success is not None and len(success) == n else None
        if picked is None:
            start = policy.fallback_tier if policy.fallback_tier is not None else 0
            notes.append("no_success")
        else:
            start = picked
    else:
        start = start_tier(policy, difficulty, thresholds)
        if difficulty is None:
            notes.append("no_difficulty")
    floors = [policy.risk_floor[f] for f in risk_flags if f in policy.risk_floor]
    if floors and max(floors) > start:
        start = max(floors)
        notes.append("risk_floor")

    ladder = list(range(start, n))
    if allowed_tiers is not None:
        ladder = _allowed(ladder, allowed_tiers, start, notes)
    if headroom:
        room = [t for t in ladder[:-1] if headroom.get(policy.tiers[t].pool, 1.0) > policy.min_headroom]
        if len(room) < len(ladder) - 1:
            notes.append("headroom")
        ladder = [*room, ladder[-1]]

    cascade = policy.cascade
    route_only = cascade is None or (streaming and cascade.stream_mode == "route_only")
    if route_only or cascade is None:
        steps = [Step((Call(t),)) for t in ladder]
    else:
        steps = _cascade_steps(ladder, cascade.mode)
        if len(steps) > cascade.max_escalations + 1:
            steps = steps[: cascade.max_escalations] + steps[-1:]

    budget = latency_budget_ms if latency_budget_ms is not None else policy.latency_budget_ms
    if budget is not None and not route_only:

        def latency(step: Step) -> float:
            return max(policy.tiers[c.tier].typical_latency_ms or 0.0 for c in step.calls)

        while len(steps) > 1 and sum(latency(s) for s in steps) > budget:
            steps = steps[1:]
            if "latency_budget" not in notes:
                notes.append("latency_budget")
    return Plan(steps=tuple(steps), cascade=not route_only, start_tier=start, notes=tuple(notes))
