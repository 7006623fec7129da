"""Speculate only where it pays: the speculative-or-plain decision of one request (pure).

An alias served by two pools of one model, one whose engine speculates and one that does not
(`models[].route.speculative`, docs/design/027-speculative-pools.md). Speculation trades compute for
memory bandwidth: each decode step verifies k drafts at once, nearly free while decoding is
memory-bound (small running batch), and a loss once the batch makes it compute-bound, because every
rejected draft still costs a verified position (seed 001, EfficientRollout: "speculate only where it
helps"). So a request goes to the speculative pool while

    its running batch per replica  <  the switch point  (x throughput_share for aliases with no
                                                          ttft/tpot objective: latency first)
    and its recent acceptance      >= the floor          (unknown -- no drafts in the window -- counts
                                                          as good: the pool must get traffic to be
                                                          measured, and a pool left alone re-probes)

and, when both pools' TPOT-vs-batch curves are known (`learn`), the speculative pool's expected TPOT
at its batch is not above the plain pool's at the plain pool's batch -- so a pair of pools under load
shares it instead of piling it on the speculative pool up to the switch point -- and to the plain
pool otherwise. An unknown batch (no fresh scrape) falls back to the gateway's own in-flight count,
which the caller puts in `batch`.

The switch point is configured, or learned (`learned_switch_point`): the smallest batch at which the
speculative pool's observed TPOT is no better than the plain pool's at a comparable batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class Why(StrEnum):
    """Reason of a decision. Closed set: each value is a metric label."""

    MEMORY_BOUND = "memory_bound"  # below the switch point, drafts accepted: speculate
    COMPUTE_BOUND = "compute_bound"  # at or above the switch point: plain
    LOW_ACCEPTANCE = "low_acceptance"  # drafts mostly rejected recently: plain
    UNAVAILABLE = "unavailable"  # the speculative pool has no usable replica: plain
    PLAIN_FASTER = "plain_faster"  # the learnt curves expect a lower TPOT on the plain pool now: plain


@dataclass(frozen=True, slots=True)
class SpecSnapshot:
    """What the gateway knows about the speculative pool right now."""

    batch: float  # running sequences per replica (scraped, or the gateway's own in-flight count)
    acceptance: float | None  # acceptance ratio over the pool's window; None = no drafts in it
    available: bool = True  # some replica can take a request (breaker closed, not saturated)
    tpot: float | None = None  # the speculative pool's expected TPOT at its batch (learnt); None unknown
    plain_tpot: float | None = None  # the plain pool's expected TPOT at its own batch


@dataclass(frozen=True, slots=True)
class SpecRule:
    switch_batch: float  # the switch point in effect (configured or learned)
    min_acceptance: float
    throughput_share: float
    latency_sensitive: bool  # the alias's SLO class has a ttft or tpot objective


@dataclass(frozen=True, slots=True)
class Choice:
    speculative: bool
    why: Why


def choose_pool(snapshot: SpecSnapshot, rule: SpecRule) -> Choice:
    """Speculative pool (True) or plain pool (False) for one request."""
    if not snapshot.available:
        return Choice(False, Why.UNAVAILABLE)
    if snapshot.acceptance is not None and snapshot.acceptance < rule.min_acceptance:
        return Choice(False, Why.LOW_ACCEPTANCE)
    switch = rule.switch_batch if rule.latency_sensitive else rule.switch_batch * rule.throughput_share
    if snapshot.batch >= switch:
        return Choice(False, Why.COMPUTE_BOUND)
    if snapshot.tpot is not None and snapshot.plain_tpot is not None and snapshot.tpot > snapshot.plain_tpot:
        return Choice(False, Why.PLAIN_FASTER)
    return Choice(True, Why.MEMORY_BOUND)


def learned_switch_point(
    speculative: Mapping[int, float], plain: Mapping[int, float], min_bins: int = 2
) -> float | None:
    """The switch point where the two TPOT-vs-batch curves cross, or None before they do.

    The curves map a batch bin (its lower bound, running sequences per replica) to the mean TPOT
    observed there. At the bins both pools have seen, the first one where speculation's TPOT is not
    lower than the plain pool's is the switch point. None until both curves share `min_bins` bins
    with at least one on each side of the crossing, so two noisy early samples set nothing."""
    shared = sorted(set(speculative) & set(plain))
    if len(shared) < min_bins:
        return None
    wins = [speculative[b] < plain[b] for b in shared]
    if not wins[0]:
        return None  # speculation never seen to win: nothing to learn (the floor or config decide)
    for b, win in zip(shared, wins, strict=True):
        if not win:
            return float(b)
    return None  # not crossed yet at the batches seen
