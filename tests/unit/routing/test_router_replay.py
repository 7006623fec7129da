import numpy as np

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
