"""Circuit breaker, retry budget and the vLLM metrics reader (explicit clocks, no sleeping)."""

from __future__ import annotations

import math

from pools.breaker import Breaker, State
from pools.budget import RetryBudget
from pools.picker import bounded_loads
from pools.replica import Replica
from pools.vllm_metrics import MAX_QUEUE, parse_load


def test_breaker_opens_after_consecutive_failures_and_a_success_resets_the_count() -> None:
    b = Breaker(failures_to_open=3, open_s=10)
    b.failure(0)
    b.failure(0)
    b.success()
    b.failure(1)
    b.failure(1)
    assert b.allows(1)
    b.failure(1)
    assert b.current(1) is State.OPEN and not b.allows(5)


def test_breaker_half_open_lets_exactly_one_probe_through() -> None:
    b = Breaker(failures_to_open=1, open_s=10)
    b.failure(0)
    assert not b.allows(9.9)
    assert b.allows(10)
    b.on_pick(10)
    assert b.current(10) is State.HALF_OPEN and not b.allows(10)  # the probe is out
    b.failure(11)  # the probe failed: open again for a full period
    assert not b.allows(20) and b.allows(21)
    b.on_pick(21)
    b.success()
    assert b.current(21) is State.CLOSED and b.allows(21) and b.opens == 2


def test_breaker_probe_without_verdict_frees_the_probe_slot() -> None:
    b = Breaker(failures_to_open=1, open_s=1)
    b.failure(0)
    b.on_pick(1)
    b.neutral()
    assert b.allows(1)


def test_retry_budget_caps_retries_at_the_ratio_of_recent_requests() -> None:
    budget = RetryBudget(ratio=0.2, min_per_s=0.0, window_s=10)
    for _ in range(100):
        budget.record_request(0)
    granted = sum(budget.try_retry(0) for _ in range(100))
    assert granted == 20 and budget.refused == 80


def test_retry_budget_floor_and_decay() -> None:
    budget = RetryBudget(ratio=0.1, min_per_s=0.5, window_s=10)
    assert sum(budget.try_retry(0) for _ in range(10)) == 5  # the floor: 0.5/s over a 10 s window
    assert not budget.try_retry(1)
    assert budget.try_retry(60)  # spent retries decay away


VLLM_PAGE = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
vllm:num_requests_waiting{engine="0",model_name="m"} 7.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.7
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.1
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 800.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 4.0
"""


def test_parse_load_sums_engines_and_prefers_the_current_kv_name() -> None:
    load = parse_load(VLLM_PAGE, at=5.0)
    assert load is not None
    assert (load.running, load.waiting, load.prefix_queries, load.prefix_hits) == (5, 7, 1000, 800)
    assert abs(load.kv_usage - 0.6) < 1e-9 and load.at == 5.0


def test_parse_load_reads_the_deprecated_kv_name_alone() -> None:
    page = 'vllm:num_requests_waiting 0\nvllm:gpu_cache_usage_perc{model_name="m"} 0.25\n'
    load = parse_load(page, at=0)
    assert load is not None and load.kv_usage == 0.25


def test_parse_load_of_a_non_vllm_page_is_none() -> None:
    assert parse_load("# nothing\nprocess_cpu_seconds_total 3\n", at=0) is None


def test_parse_load_skips_non_finite_samples_and_clamps_hostile_counts() -> None:
    """A replica's page is hostile: NaN/Inf made the load bound's math.ceil raise (a 500 on pick)."""
    page = "vllm:num_requests_waiting NaN\nvllm:num_requests_running +Inf\nvllm:num_requests_waiting 3\n"
    load = parse_load(page + "vllm:kv_cache_usage_perc -Inf\n", at=0)
    assert load is not None and (load.waiting, load.running, load.kv_usage) == (3, 0, 0)
    huge = 'vllm:num_requests_waiting{e="0"} 1e308\nvllm:num_requests_waiting{e="1"} 1e308\n'
    load = parse_load(huge + "vllm:num_requests_running -5\nvllm:kv_cache_usage_perc 7\n", at=0)
    assert load is not None and (load.waiting, load.running, load.kv_usage) == (MAX_QUEUE, 0, 1)
    assert parse_load("vllm:num_requests_waiting NaN\n", at=0) is None  # no usable sample: unknown load


def test_bounded_loads_stays_finite_on_the_most_a_replica_can_report() -> None:
    replicas = [Replica(f"http://r{i}", Breaker(failures_to_open=3, open_s=10)) for i in range(3)]
    for r in replicas:
        r.load = parse_load(f"vllm:num_requests_waiting {MAX_QUEUE}\nvllm:num_requests_waiting 1e308\n", at=0)
    loads, cap = bounded_loads(replicas, now=0, stale_after=10, factor=1.25)
    assert loads == [MAX_QUEUE] * 3 and cap == math.ceil(1.25 * (3 * MAX_QUEUE + 1) / 3)
