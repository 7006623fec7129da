"""Speculative-decoding acceptance from vLLM's counters: parsing, window increases, figures, export.

The page below is the shape vLLM 0.32 (CPU, ngram, k=3) exports; its numbers are the run in
shared/reference/vllm-cpu.md (51 drafts, 138 draft tokens, 96 accepted, positions 39/30/27)."""

from __future__ import annotations

import httpx
import hypothesis.strategies as st
import pytest
from hypothesis import given
from prometheus_client import CollectorRegistry, generate_latest

from gateway.observability.spec_decode import SpecDecodeCollector
from pools.breaker import Breaker
from pools.config import Admission, Balancing, Retries, Saturation
from pools.config import Breaker as BreakerConfig
from pools.pool import ReplicaPool
from pools.replica import Replica
from pools.scraper import Scraper, httpx_fetch
from pools.spec_decode import SpecCounters, SpecHistory, figures, pool_figures, window_increase
from pools.vllm_metrics import parse_load
from tests.support.prom import metric

LABELS = 'engine="0",model_name="tiny"'


def page(drafts: float, tokens: float, accepted: float, per_pos: tuple[float, ...]) -> str:
    lines = [
        f"vllm:num_requests_running{{{LABELS}}} 1.0",
        f"vllm:num_requests_waiting{{{LABELS}}} 0.0",
        "# TYPE vllm:spec_decode_num_drafts counter",
        f"vllm:spec_decode_num_drafts_total{{{LABELS}}} {drafts}",
        f"vllm:spec_decode_num_drafts_created{{{LABELS}}} 1.7e9",
        f"vllm:spec_decode_num_draft_tokens_total{{{LABELS}}} {tokens}",
        f"vllm:spec_decode_num_accepted_tokens_total{{{LABELS}}} {accepted}",
    ]
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LABELS},position="{i}"}} {n}'
        for i, n in enumerate(per_pos)
    ]
    lines.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_created{{{LABELS},position="0"}} 1.7e9')
    return "\n".join(lines) + "\n"


MEASURED = page(51, 138, 96, (39, 30, 27))


def test_parse_reads_the_four_families_and_skips_created() -> None:
    load = parse_load(MEASURED, at=5.0)
    assert load is not None
    assert load.spec == SpecCounters(51, 138, 96, (39, 30, 27))


def test_a_page_without_speculation_has_no_spec_counters() -> None:
    load = parse_load(f"vllm:num_requests_running{{{LABELS}}} 2\n", at=0.0)
    assert load is not None and load.spec is None


def test_engines_are_summed_and_positions_may_come_in_any_order() -> None:
    text = MEASURED + MEASURED.replace('engine="0"', 'engine="1"').replace('position="0"', 'position="9"')
    load = parse_load(text, at=0.0)
    assert load is not None and load.spec is not None
    assert (load.spec.drafts, load.spec.accepted) == (102, 192)
    assert load.spec.per_position[:3] == (39, 60, 54) and load.spec.per_position[9] == 39
    assert len(load.spec.per_position) == 10


def test_the_measured_run_gives_the_measured_figures() -> None:
    f = figures(SpecCounters(51, 138, 96, (39, 30, 27)))
    assert f is not None
    assert f.acceptance_ratio == pytest.approx(96 / 138)
    assert f.mean_acceptance_length == pytest.approx(1 + 96 / 51)  # 2.88
    assert round(f.mean_acceptance_length, 2) == 2.88
    assert f.position_acceptance == pytest.approx((39 / 51, 30 / 51, 27 / 51))


def test_no_drafts_no_figures() -> None:
    assert figures(SpecCounters()) is None
    assert figures(SpecCounters(0, 0, 0, (0, 0))) is None


C = SpecCounters


@pytest.mark.parametrize(
    ("samples", "now", "window", "expected"),
    [
        # one sample: no increase yet
        ([(0, C(5, 15, 10))], 10, 60, None),
        # the whole history inside the window: last minus first
        ([(0, C(5, 15, 10)), (5, C(8, 24, 16))], 10, 60, C(3, 9, 6)),
        # the baseline is the newest sample at or before the window start
        ([(0, C(0, 0, 0)), (50, C(10, 30, 20)), (95, C(12, 36, 22))], 100, 50, C(2, 6, 2)),
        ([(0, C(0, 0, 0)), (40, C(10, 30, 20)), (95, C(12, 36, 22))], 100, 50, C(2, 6, 2)),
        # a restart in the middle (counters went down): the new values are the increase since
        ([(0, C(100, 300, 200)), (5, C(110, 330, 220)), (10, C(4, 12, 8))], 10, 60, C(14, 42, 28)),
        # samples after `now` are not used
        ([(0, C(0, 0, 0)), (5, C(1, 3, 2)), (20, C(9, 27, 18))], 10, 60, C(1, 3, 2)),
        # per position: new positions count from zero
        ([(0, C(1, 3, 2, (1, 1))), (5, C(3, 9, 6, (3, 2, 1)))], 10, 60, C(2, 6, 4, (2, 1, 1))),
    ],
)
def test_window_increase(
    samples: list[tuple[float, SpecCounters]], now: float, window: float, expected: SpecCounters | None
) -> None:
    assert window_increase(samples, now, window) == expected


def test_history_keeps_one_baseline_before_the_window() -> None:
    h = SpecHistory()
    for t in range(0, 100, 10):
        h.add(float(t), C(t, 3 * t, 2 * t), keep_s=25)
    assert [at for at, _ in h.samples] == [60.0, 70.0, 80.0, 90.0]
    assert window_increase(h.samples, 90, 25) == C(30, 90, 60)  # from 60 (the baseline), not 70


def test_pool_figures_sum_before_dividing() -> None:
    busy, idle = SpecHistory(), SpecHistory()
    busy.add(0, C(0, 0, 0), 60)
    busy.add(10, C(90, 270, 240), 60)  # 240/270 accepted
    idle.add(0, C(0, 0, 0), 60)
    idle.add(10, C(10, 30, 0), 60)  # 0/30
    f = pool_figures([busy, idle, SpecHistory()], now=10, window_s=60)
    assert f is not None
    assert f.acceptance_ratio == pytest.approx(240 / 300)  # not the mean of 0.89 and 0
    assert f.mean_acceptance_length == pytest.approx(1 + 240 / 100)


def _pool(window: float) -> ReplicaPool:
    return ReplicaPool(
        "spec", Balancing(), Saturation(), BreakerConfig(), Retries(), Admission(), spec_window_s=window
    )


async def test_scraped_counters_become_the_exported_figures() -> None:
    pages = iter([page(0, 0, 0, (0, 0, 0)), MEASURED])
    now = [100.0]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=next(pages))

    pool = _pool(window=30)
    pool.replicas = [Replica("http://a:1", Breaker(1, 10))]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SpecDecodeCollector({"spec": pool}, clock=lambda: now[0]))
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        scraper = Scraper(
            lambda: pool.replicas, httpx_fetch(client), 0.5, clock=lambda: now[0], spec_window_s=30
        )
        await scraper.scrape_all()
        assert "llmgw_pool_spec_acceptance_ratio{" not in generate_latest(registry).decode()  # 0/0
        now[0] = 110.0
        await scraper.scrape_all()
    text = generate_latest(registry).decode()
    assert metric(text, "llmgw_pool_spec_acceptance_ratio", 'pool="spec"') == pytest.approx(96 / 138)
    assert metric(text, "llmgw_pool_spec_mean_acceptance_length", 'pool="spec"') == pytest.approx(1 + 96 / 51)
    assert metric(text, "llmgw_pool_spec_position_acceptance", 'position="2"') == pytest.approx(27 / 51)
    assert metric(text, "llmgw_pool_spec_window_draft_tokens", 'pool="spec"') == 138
    assert pool.running_batch(110.0) == 1.0
    # Past the window with no new drafts the figures go away rather than freeze.
    now[0] = 200.0
    assert "llmgw_pool_spec_acceptance_ratio{" not in generate_latest(registry).decode()


def _pairwise_increase(
    samples: list[tuple[float, SpecCounters]], now: float, window_s: float
) -> SpecCounters | None:
    """The definition, spelt out: baseline, then every consecutive pair's reset-aware increase summed."""
    usable: list[SpecCounters] = []
    for at, counters in samples:
        if at > now:
            break
        usable = [counters] if at <= now - window_s else [*usable, counters]
    if len(usable) < 2:
        return None
    total = SpecCounters()
    for older, newer in zip(usable, usable[1:], strict=False):
        total = total.plus(newer.since(older))
    return total


_counts = st.integers(0, 1000).map(float)


@given(
    steps=st.lists(
        st.tuples(st.integers(1, 5), _counts, _counts, _counts, st.lists(_counts, max_size=4)), max_size=40
    ),
    keep_s=st.integers(1, 60),
    window_s=st.integers(1, 60),
    back=st.integers(0, 30),
)
def test_history_increase_is_the_pairwise_sum(
    steps: list[tuple[int, float, float, float, list[float]]], keep_s: int, window_s: int, back: int
) -> None:
    # Random counters go down as often as up: resets everywhere, and the position count changes.
    h, kept, at = SpecHistory(), [], 0.0
    for dt, drafts, tokens, accepted, per in steps:
        at += dt
        c = SpecCounters(drafts, tokens, accepted, tuple(per))
        h.add(at, c, keep_s)
        kept.append((at, c))
    now = at - back
    if window_s <= keep_s:  # what the history keeps covers the window: it answers as if it kept all
        assert h.increase(now + back, window_s) == _pairwise_increase(kept, now + back, window_s)
    assert window_increase(kept, now, window_s) == _pairwise_increase(kept, now, window_s)
