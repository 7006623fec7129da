"""A routed alias's learning state: blending, the exploration draw, outcomes from feedback, the estimate."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from prometheus_client import generate_latest

from gateway.config import ConfigError, default_policy, parse_policy
from gateway.observability.metrics import Metrics
from gateway.routing.learning import Learning, Outcome, decode_outcome, encode_outcome
from router.config import RoutingPolicy
from router.judge import grader_messages, grader_verdict

DIM = 8


def _emb(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def _learning(
    rate: float = 0.5, memory: bool = True, feedback: str = "shared", **explore: object
) -> tuple[Learning, Metrics, list[float]]:
    metrics = Metrics(default_policy())
    now = [0.0]
    mem = {"capacity": 100, "k": 8, "blend_c": 1.0, "feedback": feedback, "max_orgs": 3}
    policy = RoutingPolicy.model_validate(
        {
            "tiers": [{"pool": "small"}, {"pool": "large"}],
            "difficulty": {"memory": mem if memory else None},
            "explore": {"rate": rate, "tier": "standard", "window_s": 60, **explore},
        }
    )
    learning = Learning("auto", policy, DIM, metrics, rng=random.Random(3), clock=lambda: now[0])
    return learning, metrics, now


def test_outcome_records_round_trip_and_reject_foreign_bytes() -> None:
    e = _emb(1)
    out = decode_outcome(encode_outcome("auto", 0, e))
    assert isinstance(out, Outcome) and out.alias == "auto" and out.tier == 0
    assert np.allclose(out.embedding, e, atol=1e-3)
    for bad in (b"", b"\x01", b"\x02" + encode_outcome("auto", 0, e)[1:], encode_outcome("auto", 0, e)[:-1]):
        assert decode_outcome(bad) is None
    assert decode_outcome(encode_outcome("auto", 0, np.zeros(DIM, dtype=np.float32))) is None


def test_the_prior_stands_until_the_memory_learns_then_neighbours_move_it() -> None:
    learning, _, _ = _learning()
    e = _emb(2)
    assert learning.difficulty(0.4, e) == 0.4
    for i in range(20):  # near-identical prompts that needed the strong tier, others that did not
        learning.learn(e + 0.01 * _emb(100 + i), 0.0, "explore")
        learning.learn(_emb(200 + i), 1.0, "explore")
    assert learning.difficulty(0.4, e) > 0.45


def test_the_draw_explores_cheap_routed_requests_at_the_rate_and_never_strong_ones() -> None:
    learning, _, _ = _learning(rate=0.25)
    draws = [learning.explores(0) for _ in range(4000)]
    assert 0.22 < sum(draws) / len(draws) < 0.28
    assert not any(learning.explores(1) for _ in range(200))


def test_a_busy_alias_skips_exploration_and_counts_it() -> None:
    learning, metrics, _ = _learning(rate=1.0, max_inflight=2)
    learning.inflight = 2
    assert not learning.explores(0)
    assert b'llmgw_router_explore_total{model="auto",outcome="busy"} 1.0' in generate_latest(metrics.registry)


def test_feedback_teaches_only_ratings_of_cheap_answers() -> None:
    learning, _, _ = _learning()
    assert learning.memory is not None
    learning.rated(Outcome("auto", 1, _emb(3)), False, "acme")  # a strong answer: nothing about cheap
    assert len(learning.memory) == 0
    learning.rated(Outcome("auto", 0, _emb(3)), False, "acme")
    learning.rated(Outcome("auto", 0, np.ones(DIM + 1, dtype=np.float32)), True, "acme")  # wrong dim
    assert len(learning.memory) == 1
    hood = learning.memory.neighbourhood(_emb(3))
    assert hood is not None and hood.labels[0] == 1.0  # rejected cheap answer = needed the strong tier


def test_by_default_an_orgs_ratings_move_only_its_own_routing() -> None:
    """Issue 39: one org's 1,000 rejections must not change another org's difficulty."""
    learning, _, _ = _learning(feedback="org")
    e = _emb(4)
    for i in range(20):  # the shared memory, from the gateway's own judgements
        learning.learn(_emb(300 + i), 1.0, "explore")
    other_before = learning.difficulty(0.4, e, "globex")
    for i in range(500):  # prompts like `e` rejected, others accepted: 1,000 ratings
        learning.rated(Outcome("auto", 0, e + 0.01 * _emb(500 + i % 50)), False, "mallory")
        learning.rated(Outcome("auto", 0, _emb(600 + i % 50)), True, "mallory")
    assert learning.difficulty(0.4, e, "globex") == other_before  # untouched
    assert learning.difficulty(0.4, e, "") == other_before  # and the shared memory too
    assert learning.difficulty(0.4, e, "mallory") > other_before + 0.1  # its own routing moved
    # A rating shared from another replica lands in the org's memory as well, never the shared one.
    assert learning.memory is not None and len(learning.memory) == 20
    learning.shared(_emb(7), 1.0, "initech")
    assert len(learning.memory) == 20
    # At most `max_orgs` org memories are kept (least recently used dropped).
    for org in ("a", "b", "c"):
        learning.rated(Outcome("auto", 0, e), False, org)
    assert learning.difficulty(0.4, e, "mallory") == other_before


def test_shared_feedback_is_the_opt_in() -> None:
    learning, _, _ = _learning(feedback="shared")
    e = _emb(5)
    before = learning.difficulty(0.4, e, "globex")
    for i in range(50):
        learning.rated(Outcome("auto", 0, e), False, "mallory")
        learning.rated(Outcome("auto", 0, _emb(700 + i)), True, "mallory")
    assert learning.difficulty(0.4, e, "globex") > before


def test_the_live_estimate_gauges_follow_the_samples_of_the_window() -> None:
    learning, metrics, now = _learning()

    def gauge(name: str) -> float:
        for line in generate_latest(metrics.registry).decode().splitlines():
            if line.startswith(name):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(name)

    assert math.isnan(gauge('llmgw_router_quality_share{bound="estimate",model="auto"}'))
    for i in range(100):
        learning.routed(strong=i % 4 == 0)  # 25 % answered by the strong tier
    for i in range(40):
        learning.sample(1.0 if i % 5 else 0.0, 0.1, 1.0)  # the cheap answer good enough 80 % of the time
    est = gauge('llmgw_router_quality_share{bound="estimate",model="auto"}')
    assert est == pytest.approx(0.25 + 0.75 * 0.8)
    assert gauge('llmgw_router_quality_share{bound="ci90_low",model="auto"}') < est
    assert gauge('llmgw_router_quality_share{bound="ci90_high",model="auto"}') > est
    assert gauge('llmgw_router_explore_samples{model="auto"}') == 40
    now[0] = 120.0  # the window moved on
    learning.routed(strong=False)
    assert math.isnan(gauge('llmgw_router_quality_share{bound="estimate",model="auto"}'))


def test_grader_prompt_is_bounded_and_its_reply_parsed_strictly() -> None:
    msgs = grader_messages("q" * 50_000, "cheap", "strong")
    assert sum(len(m["content"]) for m in msgs) < 30_000
    assert grader_verdict("YES.") == 1.0
    assert grader_verdict("no, the candidate is wrong") == 0.0
    assert grader_verdict("The candidate answer is fine") is None
    assert grader_verdict("YESTERDAY") is None


def test_explore_needs_two_tiers_and_a_known_tenancy_tier() -> None:
    with pytest.raises(ValueError, match="two tiers"):
        RoutingPolicy.model_validate({"tiers": [{"pool": "a"}], "explore": {"rate": 0.1, "tier": "standard"}})
    text = """
pools:
  - {name: small, engine: vllm, model: s, endpoints: {static: [http://a]}}
  - {name: large, engine: vllm, model: l, endpoints: {static: [http://b]}}
models:
  - name: auto
    route:
      policy:
        tiers: [{pool: small}, {pool: large}]
        explore: {rate: 0.05, tier: nosuchtier}
"""
    with pytest.raises(
        ConfigError, match=r"models\[0\]\.route\.policy\.explore\.tier: unknown tier .nosuchtier"
    ):
        parse_policy(text, "test.yaml")
