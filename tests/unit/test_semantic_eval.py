"""The semantic-threshold evaluation's math, on fake vectors and similarities (no encoder)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from eval.cache.semantic_eval import DEFAULT_DATA, Pair, load_pairs, pair_cosines, report
from eval.cache.threshold import Metrics, cross_validate, grid, metrics_at, pick_threshold


def test_pair_cosines_normalize_whatever_the_encoder_returns() -> None:
    vectors = {
        "a": np.array([3.0, 0.0]),
        "b": np.array([0.0, 0.5]),
        "c": np.array([2.0, 2.0]),
    }
    pairs = [Pair("a", "b", False, ""), Pair("a", "c", True, ""), Pair("c", "c", True, "")]
    assert pair_cosines(vectors, pairs) == pytest.approx([0.0, np.sqrt(0.5), 1.0])


def test_metrics_count_hits_at_or_above_threshold() -> None:
    sims = np.array([0.95, 0.90, 0.85, 0.92, 0.80])
    labels = np.array([True, True, True, False, False])
    m = metrics_at(sims, labels, 0.90)
    assert (m.tp, m.fp, m.fn, m.tn) == (2, 1, 1, 1)
    assert m.precision == pytest.approx(2 / 3)
    assert m.recall == pytest.approx(2 / 3)
    assert m.f1 == pytest.approx(2 / 3)
    none = metrics_at(sims, labels, 0.99)
    assert (none.hits, none.precision, none.recall, none.f1) == (0, 1.0, 0.0, 0.0)


def test_grid_is_inclusive_and_exact() -> None:
    g = grid()
    assert len(g) == 20 and g[0] == 0.80 and g[-1] == 0.99 and 0.93 in g


def row(t: float, tp: int, fp: int) -> Metrics:
    return Metrics(threshold=t, tp=tp, fp=fp, fn=10 - tp, tn=10 - fp)


def test_pick_lowest_threshold_from_which_precision_stays_above_target() -> None:
    rows = [
        row(0.80, 9, 5),  # 0.64
        row(0.85, 8, 0),  # 1.00: a lucky dip, but 0.90 above it fails
        row(0.90, 7, 1),  # 0.875
        row(0.95, 5, 0),  # 1.00
        row(0.97, 3, 0),  # 1.00
        row(0.99, 0, 0),  # no hits: neither qualifies nor breaks the run
    ]
    picked = pick_threshold(rows, 0.97)
    assert picked is not None and picked.threshold == 0.95
    assert pick_threshold(rows, 0.85) == rows[1]


def test_pick_none_when_the_top_threshold_already_misses() -> None:
    assert pick_threshold([row(0.9, 5, 5), row(0.95, 1, 1)], 0.97) is None
    assert pick_threshold([row(0.9, 0, 0)], 0.97) is None  # no hits anywhere: nothing to ship


def test_cross_validation_on_separable_data_picks_in_the_gap() -> None:
    """Half the negatives sit at 0.85 (so every half holds some), positives at 0.93 or above: every
    half picks a threshold in (0.85, 0.93] and the other half scores perfectly."""
    rng = np.random.default_rng(1)
    sims = np.concatenate([rng.uniform(0.93, 0.99, 60), [0.85] * 30, rng.uniform(0.60, 0.80, 30)])
    labels = np.array([True] * 60 + [False] * 60)
    cv = cross_validate(sims, labels, grid(), 0.97, splits=20, seed=3)
    assert cv.splits == 40 and cv.picked == 40
    assert all(0.85 < t <= 0.93 for t in cv.thresholds)
    assert cv.precision == [1.0] * 40 and cv.recall == [1.0] * 40
    assert cv.summary()["heldout_precision_ge_0.95"] == 1.0


def test_cross_validation_measures_on_held_out_pairs() -> None:
    """One near miss scores above every paraphrase: whichever half holds it cannot reach 0.97 at any
    threshold, so only the other half picks, and its threshold is measured on the half with the miss."""
    sims = np.array([0.95] * 10 + [0.99] + [0.5] * 9)
    labels = np.array([True] * 10 + [False] * 10)
    cv = cross_validate(sims, labels, grid(), 0.97, splits=10, seed=0)
    assert cv.picked == 10  # one of the two halves per split
    assert all(p < 1.0 for p in cv.precision)  # the held-out half always contains the 0.99 near miss


def test_report_names_leaks_and_sweeps(tmp_path: Path) -> None:
    pairs = [Pair(f"p{i}", f"q{i}", True, "k") for i in range(5)] + [
        Pair("x", "y", False, "opposite"),
        Pair("u", "v", False, "entity"),
    ]
    sims = np.array([0.97, 0.96, 0.95, 0.91, 0.85, 0.93, 0.70])
    out = report(pairs, sims, 0.97, splits=5, seed=0)
    assert out["shipped"]["threshold"] == 0.94
    assert out["shipped"]["precision"] == 1.0 and out["shipped"]["recall"] == 0.6
    assert out["near_misses_above_shipped"] == []
    assert out["near_misses_above_every_paraphrase"] == 0
    assert len(out["sweep"]) == 20
    json.dumps(out)  # the CLI writes it as JSON


def test_shipped_pair_set_is_well_formed() -> None:
    pairs = load_pairs(DEFAULT_DATA)
    assert sum(p.paraphrase for p in pairs) >= 130
    assert sum(not p.paraphrase for p in pairs) >= 130
    assert all(p.a.strip() and p.b.strip() and p.a != p.b and p.kind for p in pairs)
    assert len({(p.a, p.b) for p in pairs}) == len(pairs)
