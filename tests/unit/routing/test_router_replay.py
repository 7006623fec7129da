import dataclasses

import numpy as np
import pytest

from eval.routing.replay import ReplayConfig, ReplayData, replay
from eval.routing.replay_report import combine


def _data(n: int = 400) -> ReplayData:
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(4, 16))
    topic = rng.integers(0, 4, n)
    emb = (centres[topic] + 0.1 * rng.normal(size=(n, 16))).astype(np.float32)
    hard = topic < 2  # the weak model fails topics 0 and 1, which the (useless) prior cannot see
    return ReplayData(
        ids=[f"r{i}" for i in range(n)],
        prompts=["q"] * n,
        emb=emb,
        prior=rng.random(n),
        strong=np.ones(n),
        weak=np.where(hard, 0.0, 1.0),
        strong_cost=np.ones(n),
        weak_cost=np.zeros(n),
        strong_text=[None] * n,
        weak_text=[None] * n,
    )


def test_memory_learns_what_the_prior_misses() -> None:
    cfg = ReplayConfig(explore_rate=1.0, seed=1, blend_c=4.0)
    report, routed, ids = replay(_data(), cfg, threshold=0.7)
    assert len(routed) == len(ids) == 400
    assert report["labels"] > 100
    assert abs(report["apgr_prior"] - 0.5) < 0.1
    assert report["apgr"] > report["apgr_prior"] + 0.15
    last = report["curve"][-1]
    assert last["apgr"] > last["apgr_prior"] + 0.15


def test_estimate_tracks_truth_and_no_exploration_learns_nothing() -> None:
    report, _, _ = replay(_data(), ReplayConfig(explore_rate=0.3, seed=2), threshold=0.7)
    lo, hi = report["quality_share_ci90"]
    assert lo <= report["quality_share_true"] <= hi
    quiet, _, _ = replay(_data(), ReplayConfig(explore_rate=0.0, seed=2), threshold=0.7)
    assert quiet["labels"] == 0 and quiet["apgr"] == quiet["apgr_prior"]
    both = combine([report, quiet])
    assert both["summary"]["labels"]["n"] == 2 and len(both["runs"]) == 2


def test_exploration_calls_the_judge_cannot_label_still_count_as_strong_calls() -> None:
    # Free-text answers: the agreement judge cannot tell, so nothing is learnt, but every explored
    # cheap-routed row still made a strong call, which CPT must count.
    data = dataclasses.replace(_data(), strong_text=["Blue deep water."] * 400, weak_text=["Waves."] * 400)
    cfg = ReplayConfig(explore_rate=1.0, judge="agreement", seed=4)
    explored, _, _ = replay(data, cfg, threshold=0.7)
    quiet, _, _ = replay(data, dataclasses.replace(cfg, explore_rate=0.0), threshold=0.7)
    assert explored["labels"] == 0 and explored["explore_cost_share"] > 0.5
    cheap_share = 1.0 - explored["strong_share"]
    assert explored["cpt50"] == pytest.approx(quiet["cpt50"] + cheap_share)
    assert explored["cpt80"] == pytest.approx(quiet["cpt80"] + cheap_share)
