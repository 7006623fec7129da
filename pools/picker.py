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
- a LoRA adapter's request (`pick_adapter`, pools with adapter affinity): replicas that hold the
  adapter in a slot first, then free slots, then swaps, then loads, under a load bound (`pools.lora`).

Eligible = breaker allows traffic, not saturated (scraped KV use / queue, own in-flight), not
already tried by this request. No eligible replica -> None: the caller holds or refuses.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Sequence
from typing import NamedTuple

from pools.breaker import State
from pools.config import Balancing, Saturation
from pools.lora import LoraPicking, place
from pools.replica import Replica

ROUND_ROBIN = "round_robin"
LEAST_LOAD = "least_load"
AFFINITY = "affinity"
AFFINITY_SPILL = "affinity_spill"
REASONS = (ROUND_ROBIN, LEAST_LOAD, AFFINITY, AFFINITY_SPILL)


_MASK = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64 finalizer: a well-spread 64-bit weight of key ^ replica salt (rendezvous hashing)."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK
    return x ^ (x >> 31)


class Pick(NamedTuple):  # per request: a NamedTuple is made without a setattr call per field
    replica: Replica
    reason: str


def saturated(r: Replica, sat: Saturation, now: float, stale_after: float) -> bool:
    if r.inflight >= sat.inflight:
        return True
    load = r.load
    if load is None or now - load.at > stale_after:
        return False
    return load.kv_usage >= sat.kv_usage or load.waiting >= sat.waiting


def eligible(
    replicas: Sequence[Replica], sat: Saturation, now: float, stale_after: float, exclude: Collection[Replica]
) -> list[Replica]:
    # A plain loop with the common case first (breaker closed): this runs on every request.
    out: list[Replica] = []
    for r in replicas:
        b = r.breaker
        if b.state is not State.CLOSED and not b.allows(now):
            continue
        if saturated(r, sat, now, stale_after) or (exclude and r in exclude):
            continue
        out.append(r)
    return out


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
    n = len(cands)
    if bal.choices == 2 and n > 2:
        # The common case without random.sample's overhead: two distinct random replicas.
        i = int(rand.random() * n)
        j = int(rand.random() * (n - 1))
        j += j >= i
        a, b = cands[i], cands[j]
        return a if score(a, bal, now) <= score(b, bal, now) else b
    if 0 < bal.choices < n:
        cands = rand.sample(cands, bal.choices)
    else:
        # Scan from a random offset so ties do not always go to the first replica.
        k = int(rand.random() * n)
        cands = cands[k:] + cands[:k]
    return min(cands, key=lambda r: score(r, bal, now))


def bounded_loads(
    cands: Sequence[Replica], now: float, stale_after: float, factor: float
) -> tuple[list[float], int]:
    """Each candidate's queue load and the bound a replica's load must stay under to be preferred
    ("consistent hashing with bounded loads": prefix affinity and adapter placement alike)."""
    loads = [queue_load(r, now, stale_after) for r in cands]
    # +1: the request being placed; ceil keeps a cap of at least 1 when the pool is idle.
    return loads, math.ceil(factor * (sum(loads) + 1) / len(cands))


def _affinity(cands: list[Replica], bal: Balancing, now: float, key: int) -> Pick | None:
    """The highest-weight replica under the load cap (one pass, no sort)."""
    loads, cap = bounded_loads(cands, now, bal.stale_after_s, bal.prefix.load_factor)
    top_w = best_w = -(1 << 64)
    best: Replica | None = None
    for r, load in zip(cands, loads, strict=True):
        w = _mix(key ^ r.salt)
        if w > top_w:
            top_w = w
        if load + 1 <= cap and w > best_w:
            best_w, best = w, r
    if best is None:
        return None
    return Pick(best, AFFINITY if best_w == top_w else AFFINITY_SPILL)


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
        choice = _affinity(cands, bal, now, key)
        return choice or Pick(_least_load(cands, bal, now, rand), AFFINITY_SPILL)
    return Pick(_least_load(cands, bal, now, rand), LEAST_LOAD)


def pick_adapter(
    replicas: Sequence[Replica],
    bal: Balancing,
    sat: Saturation,
    now: float,
    *,
    adapter: str,
    adapter_key: int,
    lora: LoraPicking,
    exclude: Collection[Replica] = (),
) -> tuple[Pick, str] | None:
    """A request for a LoRA adapter: `pools.lora.place` over the eligible replicas (the load is ours
    in flight plus the scraped queue, as in prefix affinity), and the placement it got."""
    cands = eligible(replicas, sat, now, bal.stale_after_s, exclude)
    if not cands:
        return None
    loads, cap = bounded_loads(cands, now, bal.stale_after_s, lora.load_factor)
    r, where = place(
        cands,
        adapter,
        preloaded=lora.preloaded,
        loads=loads,
        cap=cap,
        weight=lambda r: _mix(adapter_key ^ r.salt),  # this adapter's rendezvous weight
    )
    return Pick(r, LEAST_LOAD), where
