"""The semantic-threshold evaluation's math, on fake vectors and similarities (no encoder)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from eval.bench.cache.semantic_eval import DEFAULT_DATA, Pair, fixed_report, load_pairs, pair_cosines, report
from eval.bench.cache.threshold import Metrics, cross_validate, grid, metrics_at, pick_threshold


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
    assert len(g) == 50 and g[0] == 0.50 and g[-1] == 0.99 and 0.93 in g


def row(t: float, tp: int, fp: int) -> Metrics:
    return Metrics(threshold=t, tp=tp, fp=fp, fn=10 - tp, tn=10 - fp)


def test_pick_most_recall_with_precision_at_target_ties_to_highest_threshold() -> None:
    rows = [
        row(0.80, 9, 5),  # 0.64
        row(0.85, 8, 0),  # 1.00, recall 0.8: the most recall at the target
        row(0.90, 7, 1),  # 0.875
        row(0.95, 5, 0),  # 1.00
        row(0.97, 5, 0),  # 1.00, recall 0.5
        row(0.99, 0, 0),  # no hits: never picked
    ]
    assert pick_threshold(rows, 0.97) == rows[1]
    assert pick_threshold(rows[2:], 0.97) == rows[4]  # 0.95 and 0.97 tie on recall: the higher one
    assert pick_threshold(rows[2:], 0.97, low_ties=True) == rows[3]  # or the lower one, if asked
    assert pick_threshold(rows, 0.6) == rows[0]


def test_pick_none_when_no_threshold_reaches_the_target() -> None:
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


def test_report_sweeps_cosine_alone_and_with_the_verifier() -> None:
    pairs = [Pair(f"p{i}", f"q{i}", True, "k") for i in range(5)] + [
        Pair("x", "y", False, "opposite"),
        Pair("u", "v", False, "entity"),
    ]
    sims = np.array([0.97, 0.96, 0.95, 0.91, 0.85, 0.93, 0.70])
    # The verifier rejects the near miss at 0.93 and one paraphrase (0.91).
    reasons: list[str | None] = [None, None, None, "key_terms", None, "antonym", None]
    out = report(pairs, sims, reasons, 0.97, splits=5, seed=0)
    assert out["cosine_only"]["shipped"]["threshold"] == 0.95  # above the 0.93 near miss; ties go up
    assert out["cosine_only"]["shipped"]["recall"] == 0.6
    verified = out["cosine_and_verifier"]["shipped"]
    assert verified["threshold"] == 0.85 and verified["precision"] == 1.0 and verified["recall"] == 0.8
    assert len(out["cosine_only"]["sweep"]) == 50
    assert out["breakdown"]["false_hits"] == []
    assert out["breakdown"]["paraphrases_rejected_by_rule"] == {"key_terms": 1}
    assert out["verifier_alone"]["near_misses_accepted"] == 0.5
    json.dumps(out)  # the CLI writes it as JSON


def test_fixed_threshold_report_does_not_pick() -> None:
    pairs = [Pair("a", "b", True, "k"), Pair("c", "d", False, "entity"), Pair("e", "f", False, "number")]
    sims = np.array([0.90, 0.95, 0.80])
    out = fixed_report(pairs, sims, [None, None, "numbers"], 0.85)
    assert out["cosine_only"]["fp"] == 1 and out["cosine_and_verifier"]["fp"] == 1
    assert out["breakdown"]["false_hits_by_kind"] == {"entity": 1}
    json.dumps(out)


def test_shipped_pair_set_is_well_formed() -> None:
    pairs = load_pairs(DEFAULT_DATA)
    assert sum(p.paraphrase for p in pairs) >= 130
    assert sum(not p.paraphrase for p in pairs) >= 130
    assert all(p.a.strip() and p.b.strip() and p.a != p.b and p.kind for p in pairs)
    assert len({(p.a, p.b) for p in pairs}) == len(pairs)
