"""Replica picking: a pure function of the replicas' state, the strategy and the request's key.

- `round_robin`: the next eligible replica after `turn`.
- `least_load`: power of two choices (`choices` random eligible replicas, the lowest score wins);
  sampling instead of scanning all keeps many gateways from herding onto the same replica between
  two scrapes. score = busy + queue_weight * waiting + kv_weight * kv_usage, where busy is the larger
  of this gateway's in-flight count (live) and the scraped running count (sees other gateways).
- `prefix_affinity`: rendezvous hashing of the prompt-prefix key over the replicas gives each prefix
  a stable order of preferred replicas (only 1/n of prefixes move when a replica comes or goes);
  the first one whose load is under `load_factor` x the mean load wins ("consistent hashing with
  bounded loads"), so one hot prefix spills to its second choice instead of overloading a replica.
  No key (a prompt shorter than nothing) falls back to least load.

Eligible = breaker allows traffic, not saturated (scraped KV use / queue, own in-flight), not
already tried by this request. No eligible replica -> None: the caller holds or refuses.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from pools.config import Balancing, Saturation
from pools.replica import Replica

ROUND_ROBIN = "round_robin"
LEAST_LOAD = "least_load"
AFFINITY = "affinity"
AFFINITY_SPILL = "affinity_spill"
REASONS = (ROUND_ROBIN, LEAST_LOAD, AFFINITY, AFFINITY_SPILL)

_MASK = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class Pick:
    replica: Replica
    reason: str


def _mix(x: int) -> int:
    """splitmix64 finalizer: a cheap, well-spread 64-bit hash of key ^ replica salt."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK
    return x ^ (x >> 31)


def saturated(r: Replica, sat: Saturation, now: float, stale_after: float) -> bool:
    if r.inflight >= sat.inflight:
        return True
    load = r.fresh_load(now, stale_after)
    return load is not None and (load.kv_usage >= sat.kv_usage or load.waiting >= sat.waiting)


def eligible(
    replicas: Sequence[Replica], sat: Saturation, now: float, stale_after: float, exclude: Collection[Replica]
) -> list[Replica]:
    return [
        r
        for r in replicas
        if r.breaker.allows(now) and r not in exclude and not saturated(r, sat, now, stale_after)
    ]


def score(r: Replica, bal: Balancing, now: float) -> float:
    load = r.fresh_load(now, bal.stale_after_s)
    if load is None:
        return float(r.inflight)
    busy = max(float(r.inflight), load.running)
    return busy + bal.queue_weight * load.waiting + bal.kv_weight * load.kv_usage


def queue_load(r: Replica, now: float, stale_after: float) -> float:
    """Requests on the replica: ours in flight plus its scraped queue (the bounded-load measure)."""
    load = r.fresh_load(now, stale_after)
    return r.inflight + (load.waiting if load is not None else 0.0)


def _least_load(cands: list[Replica], bal: Balancing, now: float, rand: random.Random) -> Replica:
    if 0 < bal.choices < len(cands):
        cands = rand.sample(cands, bal.choices)
    else:
        # Scan from a random offset so ties do not always go to the first replica.
        k = rand.randrange(len(cands))
        cands = cands[k:] + cands[:k]
    return min(cands, key=lambda r: score(r, bal, now))


def pick(
    replicas: Sequence[Replica],
    bal: Balancing,
    sat: Saturation,
    now: float,
    *,
    key: int | None,
    turn: int,
    rand: random.Random,
    exclude: Collection[Replica] = (),
) -> Pick | None:
    cands = eligible(replicas, sat, now, bal.stale_after_s, exclude)
    if not cands:
        return None
    if len(cands) == 1:
        reason = AFFINITY if bal.strategy == "prefix_affinity" and key is not None else LEAST_LOAD
        return Pick(cands[0], ROUND_ROBIN if bal.strategy == "round_robin" else reason)
    if bal.strategy == "round_robin":
        return Pick(cands[turn % len(cands)], ROUND_ROBIN)
    if bal.strategy == "prefix_affinity" and key is not None:
        stale = bal.stale_after_s
        loads = {id(r): queue_load(r, now, stale) for r in cands}
        # +1: the request being placed; ceil keeps a cap of at least 1 when the pool is idle.
        cap = math.ceil(bal.prefix.load_factor * (sum(loads.values()) + 1) / len(cands))
        ranked = sorted(cands, key=lambda r: _mix(key ^ r.salt), reverse=True)
        for i, r in enumerate(ranked):
            if loads[id(r)] + 1 <= cap:
                return Pick(r, AFFINITY if i == 0 else AFFINITY_SPILL)
        return Pick(_least_load(cands, bal, now, rand), AFFINITY_SPILL)
    return Pick(_least_load(cands, bal, now, rand), LEAST_LOAD)
