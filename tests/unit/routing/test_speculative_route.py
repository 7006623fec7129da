"""The speculative routing rule: the pure decision (table), the learned switch point, the TPOT curve
it is learned from, the config checks, and the alias wired into the route table over real pools."""

from __future__ import annotations

import time

import pytest
from prometheus_client import generate_latest

from gateway.config import ConfigError, parse_policy
from gateway.observability.metrics import Metrics
from gateway.routing.table import Routes
from gateway.upstream.pool_client import PoolClient
from pools.replica import Load
from pools.spec_decode import SpecCounters, SpecHistory
from pools.tpot_curve import TpotCurve, batch_bin, monotone, pool_curve
from router.speculative import SpecRule, SpecSnapshot, Why, choose_pool, learned_switch_point
from tests.support.prom import metric

RULE = SpecRule(switch_batch=32, min_acceptance=0.5, throughput_share=0.5, latency_sensitive=True)
BATCH = SpecRule(switch_batch=32, min_acceptance=0.5, throughput_share=0.5, latency_sensitive=False)


@pytest.mark.parametrize(
    ("snap", "rule", "speculative", "why"),
    [
        (SpecSnapshot(batch=0, acceptance=None), RULE, True, Why.MEMORY_BOUND),  # idle, unmeasured
        (SpecSnapshot(batch=31.9, acceptance=0.7), RULE, True, Why.MEMORY_BOUND),
        (SpecSnapshot(batch=32, acceptance=0.7), RULE, False, Why.COMPUTE_BOUND),  # at the switch point
        (SpecSnapshot(batch=100, acceptance=None), RULE, False, Why.COMPUTE_BOUND),
        (SpecSnapshot(batch=1, acceptance=0.49), RULE, False, Why.LOW_ACCEPTANCE),
        (SpecSnapshot(batch=1, acceptance=0.5), RULE, True, Why.MEMORY_BOUND),  # the floor itself is ok
        (SpecSnapshot(batch=1, acceptance=0.9, available=False), RULE, False, Why.UNAVAILABLE),
        # Throughput-oriented classes leave the upper half of the headroom to latency-sensitive ones.
        (SpecSnapshot(batch=15.9, acceptance=0.7), BATCH, True, Why.MEMORY_BOUND),
        (SpecSnapshot(batch=16, acceptance=0.7), BATCH, False, Why.COMPUTE_BOUND),
        # Learnt curves: the plain pool's expected TPOT at its batch is lower than speculation's now.
        (SpecSnapshot(batch=20, acceptance=0.7, tpot=0.011, plain_tpot=0.009), RULE, False, Why.PLAIN_FASTER),
        (SpecSnapshot(batch=20, acceptance=0.7, tpot=0.009, plain_tpot=0.009), RULE, True, Why.MEMORY_BOUND),
        (SpecSnapshot(batch=20, acceptance=0.7, tpot=0.011, plain_tpot=None), RULE, True, Why.MEMORY_BOUND),
    ],
)
def test_choose_pool(snap: SpecSnapshot, rule: SpecRule, speculative: bool, why: Why) -> None:
    choice = choose_pool(snap, rule)
    assert (choice.speculative, choice.why) == (speculative, why)


@pytest.mark.parametrize(
    ("spec", "plain", "expected"),
    [
        ({1: 0.004, 8: 0.006, 32: 0.012, 64: 0.020}, {1: 0.008, 8: 0.009, 32: 0.011, 64: 0.015}, 32.0),
        ({1: 0.004, 8: 0.006}, {1: 0.008, 8: 0.009}, None),  # not crossed at the batches seen
        ({1: 0.004}, {1: 0.008, 8: 0.009}, None),  # one shared bin is not a curve
        ({1: 0.009, 8: 0.010}, {1: 0.008, 8: 0.009}, None),  # never seen to win: nothing learnt
        ({2: 0.004, 8: 0.020, 16: 0.01}, {1: 0.008, 2: 0.006, 8: 0.012, 16: 0.02}, 8.0),  # first loss
    ],
)
def test_learned_switch_point(
    spec: dict[int, float], plain: dict[int, float], expected: float | None
) -> None:
    assert learned_switch_point(spec, plain) == expected


def test_batch_bins_are_half_powers_of_two() -> None:
    assert [batch_bin(x) for x in (0, 1, 2, 3, 4, 6, 8, 12, 16, 23, 32, 64, 128)] == [
        1, 1, 2, 2, 4, 5, 8, 11, 16, 22, 32, 64, 128,
    ]  # fmt: skip


def test_tpot_curve_from_scrapes() -> None:
    c = TpotCurve()
    c.observe_scrape(running=8, tpot_sum=0.0, tpot_count=0)  # the first scrape: a baseline only
    assert c.bins == {}
    c.observe_scrape(running=8, tpot_sum=0.1, tpot_count=10)  # 10 requests at 10 ms
    c.observe_scrape(running=8, tpot_sum=0.1, tpot_count=10)  # nothing finished: no observation
    c.observe_scrape(running=8, tpot_sum=0.3, tpot_count=20)  # 10 at 20 ms: EWMA 10 + 0.2 x 10
    assert c.bins[8] == (pytest.approx(0.012), 2)
    c.observe_scrape(running=40, tpot_sum=0.05, tpot_count=2)  # restarted: a new baseline only
    assert set(c.bins) == {8}
    other = TpotCurve(bins={8: (0.02, 2), 64: (0.03, 1)})
    assert pool_curve([c, other], min_count=3) == {8: pytest.approx((0.012 * 2 + 0.02 * 2) / 4)}


def test_a_pools_curve_never_decodes_faster_at_a_larger_batch() -> None:
    """A noisy bin slower than a larger one is pooled with it (count-weighted isotonic fit): the
    simulator's bench learnt spec 9.27 ms at bin 5 and 6.66 at bin 8, which sent requests to the plain
    pool (9.27 at bin 1) at a load where speculation was twice as fast."""
    bins = {1: (3.4, 10), 4: (5.1, 10), 5: (9.3, 2), 8: (6.7, 6), 11: (12.3, 4)}
    fit = monotone(bins)
    assert fit[5] == fit[8] == pytest.approx((9.3 * 2 + 6.7 * 6) / 8)
    assert (fit[1], fit[4], fit[11]) == (3.4, 5.1, 12.3)
    assert list(fit.values()) == sorted(fit.values())
    chained = monotone({1: (5.0, 1), 2: (4.0, 1), 4: (3.0, 1)})  # merges cascade backwards
    assert list(chained.values()) == pytest.approx([4.0, 4.0, 4.0])
    assert monotone({}) == {}


POLICY = """\
pools:
  - name: fast
    model: m
    endpoints: {static: ["http://127.0.0.1:9"]}
    speculative: {method: ngram, num_speculative_tokens: 3}
  - {name: plain, model: m, endpoints: {static: ["http://127.0.0.1:9"]}}
models:
  - name: chat
    route: {speculative: {pool: fast, plain: plain, switch_batch: 16, min_acceptance: 0.4}}
    slo_class: interactive
  - name: bulk
    route: {speculative: {pool: fast, plain: plain, switch_batch: 16}}
slo_classes:
  interactive: {ttft_ms: 500, tpot_ms: 50}
"""


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("pool: fast, plain: plain, switch_batch: 16, min", "pool: nope, plain: plain, switch_batch: 16, min",
         "models[0].route.speculative.pool: unknown pool 'nope'"),
        ("pool: fast, plain: plain, switch_batch: 16}", "pool: plain, plain: fast, switch_batch: 16}",
         "pool 'plain' has no speculative config"),
        ("{name: plain, model: m,", "{name: plain, model: other,", "serves 'other', pool 'fast' serves 'm'"),
        ("switch_batch: 16, min", "min", "models[0].route.speculative.switch_batch: Field required"),
        ("pool: fast, plain: plain, switch_batch: 16}", "pool: fast, plain: fast, switch_batch: 16}",
         "pool and plain must be two different pools"),
        ("route: {speculative: {pool: fast, plain: plain, switch_batch: 16}}",
         "route: {pool: plain, speculative: {pool: fast, plain: plain, switch_batch: 16}}",
         "exactly one of pool, policy or speculative"),
    ],
)  # fmt: skip
def test_config_errors_name_the_key(old: str, new: str, expected: str) -> None:
    assert old in POLICY
    with pytest.raises(ConfigError) as info:
        parse_policy(POLICY.replace(old, new, 1), "bad.yaml")
    assert str(info.value).startswith("bad.yaml") and expected in str(info.value)


def _routes() -> tuple[Routes, dict[str, PoolClient], Metrics]:
    policy = parse_policy(POLICY, "test")
    pools = {p.name: PoolClient.build(p) for p in policy.pools}
    metrics = Metrics(policy)
    return Routes(policy, pools, metrics), pools, metrics


def _load(pool: PoolClient, running: float, spec: SpecCounters | None = None) -> None:
    r = pool.replicas.replicas[0]
    r.load = Load(
        waiting=0, running=running, kv_usage=0.1, prefix_queries=0, prefix_hits=0, at=time.monotonic()
    )
    if spec is not None:
        r.spec = SpecHistory()  # this window: from zero to `spec`
        r.spec.add(r.load.at - 1, SpecCounters(0, 0, 0), 60)
        r.spec.add(r.load.at, spec, 60)


def _pool_of(routes: Routes, alias: str, allowed: frozenset[str] = frozenset()) -> str:
    route = routes.direct(alias, allowed)
    assert route is not None
    return route.pool.config.name


def test_the_alias_follows_batch_acceptance_and_slo_class() -> None:
    routes, pools, metrics = _routes()
    assert _pool_of(routes, "chat") == "fast"  # no scrape yet: own in-flight 0, acceptance unknown
    _load(pools["fast"], running=12, spec=SpecCounters(100, 300, 240))
    assert _pool_of(routes, "chat") == "fast"
    assert _pool_of(routes, "bulk") == "plain"  # 12 >= 16 x 0.5: batch traffic steps aside first
    _load(pools["fast"], running=16)
    assert _pool_of(routes, "chat") == "plain"
    _load(pools["fast"], running=1, spec=SpecCounters(10, 30, 9))  # 0.3, but 30 draft tokens say little
    assert _pool_of(routes, "chat") == "fast"
    _load(pools["fast"], running=1, spec=SpecCounters(100, 300, 90))  # 0.3 < 0.4 over 300 draft tokens
    assert _pool_of(routes, "chat") == "plain"
    # A key limited to one of the pools gets that one, whatever the load says.
    assert _pool_of(routes, "chat", frozenset({"fast"})) == "fast"
    assert routes.any_route("chat").pool.config.name == "fast"
    text = generate_latest(metrics.registry).decode()
    labels = 'model="chat",pool="fast",reason="memory_bound"'
    assert metric(text, "llmgw_spec_route_decisions_total", labels) == 3
    assert (
        metric(text, "llmgw_spec_route_decisions_total", 'model="chat",pool="plain",reason="compute_bound"')
        == 1
    )
    assert (
        metric(text, "llmgw_spec_route_decisions_total", 'model="chat",pool="plain",reason="low_acceptance"')
        == 1
    )
    assert metric(text, "llmgw_spec_route_switch_batch", 'model="chat"') == 16


def test_a_learning_alias_switches_where_the_scraped_curves_cross() -> None:
    text = POLICY.replace("switch_batch: 16, min_acceptance: 0.4", "switch_batch: 16, learn: true")
    policy = parse_policy(text, "test")
    pools = {p.name: PoolClient.build(p) for p in policy.pools}
    metrics = Metrics(policy)
    routes = Routes(policy, pools, metrics)
    _load(pools["fast"], running=10)
    assert _pool_of(routes, "chat") == "fast"  # the curves have not crossed: configured 16
    fast, plain = (pools[n].replicas.replicas[0].tpot for n in ("fast", "plain"))
    fast.bins = {1: (0.004, 5), 4: (0.006, 5), 8: (0.012, 5)}
    plain.bins = {1: (0.008, 5), 4: (0.009, 5), 8: (0.010, 5)}
    assert _pool_of(routes, "chat") == "plain"  # learnt: 8 (10 is past it)
    _load(pools["fast"], running=4)  # under 8, but 6 ms expected here vs 8 ms on the idle plain pool
    assert _pool_of(routes, "chat") == "fast"
    plain.bins[1] = (0.005, 5)  # now the idle plain pool is expected to be faster
    assert _pool_of(routes, "chat") == "plain"
    out = generate_latest(metrics.registry).decode()
    assert metric(out, "llmgw_spec_route_switch_batch", 'model="chat"') == 8
