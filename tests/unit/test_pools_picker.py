"""The replica picker: a pure function over replica state (no clock, no I/O)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from pools.affinity import prefix_key
from pools.breaker import Breaker
from pools.config import Balancing, PrefixAffinity, Saturation
from pools.picker import AFFINITY, AFFINITY_SPILL, LEAST_LOAD, ROUND_ROBIN, pick
from pools.replica import Load, Replica

NOW = 100.0
SAT = Saturation()


def replicas(n: int) -> list[Replica]:
    return [Replica(f"http://10.0.0.{i}:8000", Breaker(3, 10.0)) for i in range(n)]


def load(waiting: float = 0, running: float = 0, kv: float = 0.0, at: float = NOW) -> Load:
    return Load(waiting=waiting, running=running, kv_usage=kv, prefix_queries=0, prefix_hits=0, at=at)


def choose(
    rs: list[Replica], bal: Balancing, key: int | None = None, turn: int = 0, seed: int = 0
) -> Replica:
    p = pick(rs, bal, SAT, NOW, key=key, turn=turn, rand=random.Random(seed))
    assert p is not None
    return p.replica


def test_round_robin_cycles_through_replicas() -> None:
    rs = replicas(3)
    bal = Balancing(strategy="round_robin")
    assert [choose(rs, bal, turn=t) for t in range(6)] == rs + rs


def test_least_load_scanning_all_prefers_the_emptiest_queue_and_kv() -> None:
    rs = replicas(3)
    rs[0].load, rs[1].load, rs[2].load = load(waiting=5), load(waiting=0, kv=0.2), load(waiting=0, kv=0.9)
    bal = Balancing(strategy="least_load", choices=0)
    assert all(choose(rs, bal, seed=s) is rs[1] for s in range(20))


def test_stale_scrapes_are_ignored_and_live_inflight_counts() -> None:
    rs = replicas(2)
    rs[0].load = load(waiting=50, at=NOW - 60)  # old news
    rs[1].inflight = 3
    bal = Balancing(strategy="least_load", choices=0)
    assert choose(rs, bal) is rs[0]


def test_power_of_two_choices_never_picks_the_worst_of_the_sample() -> None:
    rs = replicas(4)
    for i, r in enumerate(rs):
        r.inflight = i * 10
    bal = Balancing(strategy="least_load", choices=2)
    counts = Counter(choose(rs, bal, seed=s).base for s in range(400))
    assert counts[rs[3].base] == 0  # the most loaded replica wins no sample
    assert counts[rs[0].base] > counts[rs[1].base] > counts[rs[2].base] > 0  # but others still get work


def test_open_breaker_and_saturation_make_a_replica_ineligible() -> None:
    rs = replicas(3)
    rs[0].breaker.state = rs[0].breaker.state.OPEN
    rs[0].breaker.opened_at = NOW
    rs[1].load = load(kv=0.99)
    bal = Balancing(strategy="least_load", choices=0)
    assert choose(rs, bal) is rs[2]
    rs[2].inflight = SAT.inflight
    assert pick(rs, bal, SAT, NOW, key=None, turn=0, rand=random.Random(0)) is None


def test_excluded_replicas_are_not_picked_again() -> None:
    rs = replicas(2)
    bal = Balancing(strategy="round_robin")
    p = pick(rs, bal, SAT, NOW, key=None, turn=0, rand=random.Random(0), exclude=[rs[0]])
    assert p is not None and p.replica is rs[1]


def _body(system: str, user: str) -> dict[str, object]:
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}


def test_prefix_affinity_sends_a_shared_prefix_to_one_replica_when_idle() -> None:
    rs = replicas(4)
    bal = Balancing(strategy="prefix_affinity", prefix=PrefixAffinity(prefix_chars=64))
    system = "You are a careful assistant for the billing team. " * 4
    picks = {
        pick(rs, bal, SAT, NOW, key=prefix_key(_body(system, f"q{i}"), 64), turn=i, rand=random.Random(i))
        for i in range(20)
    }
    assert len({p.replica.base for p in picks if p}) == 1
    assert {p.reason for p in picks if p} == {AFFINITY}


def test_prefix_affinity_spreads_distinct_prefixes() -> None:
    rs = replicas(4)
    bal = Balancing(strategy="prefix_affinity")
    keys = [prefix_key(_body(f"system prompt number {i}", "hi"), 2048) for i in range(64)]
    counts = Counter(choose(rs, bal, key=k).base for k in keys)
    assert len(counts) == 4 and max(counts.values()) <= 2 * 64 / 4


def test_bounded_load_spills_a_hot_prefix_to_its_next_choice() -> None:
    rs = replicas(4)
    bal = Balancing(strategy="prefix_affinity", prefix=PrefixAffinity(load_factor=1.25))
    key = prefix_key(_body("hot", "x"), 2048)
    first = choose(rs, bal, key=key)
    first.inflight = 10  # mean (10+1)/4 -> cap ceil(3.4) = 4: the preferred replica is over it
    p = pick(rs, bal, SAT, NOW, key=key, turn=0, rand=random.Random(0))
    assert p is not None and p.replica is not first and p.reason == AFFINITY_SPILL
    # The spill target is stable too (rendezvous order), so the prefix warms at most a second cache.
    assert all(choose(rs, bal, key=key, seed=s) is p.replica for s in range(5))


def test_affinity_order_is_stable_when_another_replica_leaves() -> None:
    rs = replicas(5)
    bal = Balancing(strategy="prefix_affinity")
    keys = [prefix_key(_body(f"prompt {i}", "q"), 2048) for i in range(200)]
    before = {k: choose(rs, bal, key=k) for k in keys}
    gone = rs[2]
    after = {k: choose([r for r in rs if r is not gone], bal, key=k) for k in keys}
    moved = [k for k in keys if before[k] is not after[k]]
    assert all(before[k] is gone for k in moved)  # only the departed replica's prefixes move


@pytest.mark.parametrize("strategy", ["least_load", "prefix_affinity"])
def test_no_key_or_plain_least_load_reason(strategy: str) -> None:
    rs = replicas(3)
    p = pick(rs, Balancing(strategy=strategy), SAT, NOW, key=None, turn=0, rand=random.Random(0))  # type: ignore[arg-type]
    assert p is not None and p.reason == LEAST_LOAD


def test_single_replica_reason_follows_the_strategy() -> None:
    p = pick(replicas(1), Balancing(strategy="round_robin"), SAT, NOW, key=None, turn=0, rand=random.Random())
    assert p is not None and p.reason == ROUND_ROBIN


def test_prefix_key_depends_only_on_the_leading_characters() -> None:
    long = "s" * 5000
    assert prefix_key(_body(long, "a"), 2048) == prefix_key(_body(long, "b"), 2048)
    assert prefix_key(_body("short", "a"), 2048) != prefix_key(_body("short", "b"), 2048)
    assert prefix_key({"prompt": "abc"}, 16) == prefix_key({"prompt": "abcd"}, 3)
    assert prefix_key({"input": "x"}, 16) is None


def test_a_named_prompt_cache_key_places_the_request() -> None:
    """Codex's `prompt_cache_key` (and the Messages dialect's, from cache_control) decides the replica:
    turns of one conversation share it whatever their first characters; two conversations with the
    same system prompt do not."""
    turn1 = {**_body("the agent's long system prompt", "fix the bug"), "prompt_cache_key": "conv-1"}
    turn2 = {**_body("the agent's long system prompt", "now run the tests"), "prompt_cache_key": "conv-1"}
    other = {**_body("the agent's long system prompt", "fix the bug"), "prompt_cache_key": "conv-2"}
    assert prefix_key(turn1, 16) == prefix_key(turn2, 16)
    assert prefix_key(turn1, 16) != prefix_key(other, 16)
    assert prefix_key({**turn1, "prompt_cache_key": ""}, 16) == prefix_key(
        _body("the agent's long system prompt", "x"), 16
    )
    assert prefix_key({"prompt_cache_key": "k" * 5000}, 16) == prefix_key(
        {"prompt_cache_key": "k" * 1024}, 16
    )
