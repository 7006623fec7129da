"""Adapter-aware picking and a replica's adapter state (pools/lora.py): pure, no clock, no I/O."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from pools.config import Admission, Balancing, Breaker, Retries, Saturation
from pools.lora import ACTIVE, ANY, FREE_SLOT, LOAD, SWAP, Adapters, LoraPicking, listed_adapters
from pools.pool import ReplicaPool
from pools.replica import Load
from pools.vllm_metrics import parse_load

NOW = 100.0


def pool(n: int = 2, *, preloaded: bool = False, max_loras: int = 2, affinity: bool = True) -> ReplicaPool:
    lora = LoraPicking(max_loras, preloaded, affinity, load_factor=1.5, adapters=8)
    p = ReplicaPool(
        "base",
        Balancing(strategy="least_load", choices=0),
        Saturation(),
        Breaker(),
        Retries(),
        Admission(),
        clock=lambda: NOW,
        lora=lora,
    )
    p.set_members([f"http://10.0.0.{i}:8000" for i in range(n)])
    return p


def scraped(running: str = "", waiting: str = "", max_lora: int = 2) -> Load:
    text = (
        'vllm:num_requests_running{model_name="tiny"} 1\n'
        'vllm:num_requests_waiting{model_name="tiny"} 0\n'
        f'vllm:lora_requests_info{{max_lora="{max_lora}",running_lora_adapters="x",'
        f'waiting_lora_adapters=""}} 1.0e9\n'
        f'vllm:lora_requests_info{{max_lora="{max_lora}",running_lora_adapters="{running}",'
        f'waiting_lora_adapters="{waiting}"}} 2.0e9\n'
    )
    load = parse_load(text, NOW)
    assert load is not None
    return load


def test_the_newest_lora_info_sample_is_the_replicas_state() -> None:
    info = scraped("a,b", "c", 4).lora
    assert info is not None
    assert info.running == {"a", "b"} and info.waiting == {"c"} and info.max_lora == 4
    assert parse_load('vllm:num_requests_running{m="x"} 0\n', NOW).lora is None  # type: ignore[union-attr]


def test_placement_ranks_active_then_free_slot_then_swap_then_load() -> None:
    s = Adapters(max_loras=2)
    assert s.placement("a", preloaded=False) == LOAD
    assert s.placement("a", preloaded=True) == FREE_SLOT  # preloaded: registered everywhere
    s.loaded("a", 1.0)
    assert s.placement("a", preloaded=False) == FREE_SLOT
    s.sent("a")
    assert s.placement("a", preloaded=False) == ACTIVE
    s.loaded("b", 1.0)
    s.sent("c")  # a and c fill both slots (LRU, most recent first)
    assert s.placement("b", preloaded=False) == SWAP
    s.sent("b")  # b evicts a
    assert s.placement("a", preloaded=False) == SWAP


def test_scraped_running_adapters_count_as_in_a_slot() -> None:
    s = Adapters(max_loras=1)
    s.loaded("a", 1.0)
    s.scraped = scraped("a", max_lora=3).lora
    assert s.slots == 3  # the engine's own max_lora wins over the configured one
    assert s.placement("a", preloaded=False) == ACTIVE


def test_relisting_keeps_loads_newer_than_the_question() -> None:
    s = Adapters(max_loras=2)
    s.loaded("old", 1.0)
    s.loaded("new", 5.0)
    s.sent("old")
    s.relisted({"listed"}, asked_at=3.0)  # the replica restarted: "old" is gone
    assert s.registered == {"listed", "new"}
    assert "old" not in s.recent


def test_listed_adapters_are_the_models_with_a_parent() -> None:
    text = '{"data": [{"id": "tiny", "parent": null}, {"id": "a", "parent": "tiny", "root": "/x"}]}'
    assert listed_adapters(text) == {"a"}
    assert listed_adapters("not json") is None
    assert listed_adapters('{"data": 3}') is None


def test_requests_of_an_adapter_stick_to_the_replica_that_has_it() -> None:
    p = pool()
    first = p.try_pick(None, adapter="a")
    assert first is not None and p.stats.placements[LOAD] == 1
    assert first.adapters is not None
    first.adapters.loaded("a", 1.0)
    p.release(first, "ok")
    for _ in range(10):
        r = p.try_pick(None, adapter="a")
        assert r is first
        p.release(r, "ok")
    assert p.stats.placements[ACTIVE] == 10


def test_adapters_of_equal_standing_spread_over_the_replicas() -> None:
    """Rendezvous weights give each adapter its own first choice: not every adapter on replica 0."""
    p = pool(4, preloaded=True)
    homes = Counter()
    for i in range(40):
        r = p.try_pick(None, adapter=f"ad-{i}")
        assert r is not None
        homes[r.base] += 1
        p.release(r, "ok")
        assert r.adapters is not None
        r.adapters.recent.clear()
    assert len(homes) == 4 and max(homes.values()) < 20


def test_a_hot_adapter_spills_past_the_load_bound() -> None:
    p = pool(2, preloaded=True)
    held = [p.try_pick(None, adapter="hot") for _ in range(8)]
    assert all(r is not None for r in held)
    per = Counter(r.base for r in held if r is not None)
    assert len(per) == 2 and max(per.values()) <= 5  # bound 1.5 x mean: never all 8 on one replica
    assert p.stats.placements[ACTIVE] >= 4 and p.stats.placements[FREE_SLOT] + p.stats.placements[ANY] >= 1


def test_without_affinity_the_pools_balancing_picks() -> None:
    p = pool(2, preloaded=True, affinity=False)
    r = p.try_pick(None, adapter="a")
    assert r is not None and sum(p.stats.placements.values()) == 0
    assert r.adapters is not None and "a" in r.adapters.recent  # still recorded


def test_a_held_request_keeps_its_adapter() -> None:
    async def run() -> None:
        p = pool(1, preloaded=True)
        p.saturation = Saturation(inflight=1)
        busy = await p.acquire(None, adapter="a")
        waiter = asyncio.ensure_future(p.acquire(None, adapter="b"))
        await asyncio.sleep(0)
        p.release(busy, "ok")
        r = await asyncio.wait_for(waiter, 1)
        assert r.adapters is not None and list(r.adapters.recent) == ["a", "b"]

    asyncio.run(run())


@pytest.mark.parametrize("placement", [ACTIVE, FREE_SLOT, SWAP, LOAD, ANY])
def test_every_placement_is_counted_from_zero(placement: str) -> None:
    assert pool().stats.placements[placement] == 0
