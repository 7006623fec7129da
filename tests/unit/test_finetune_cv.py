"""The fine-tuning measurement (eval/routing/finetune_cv.py): it learns, and only from training rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")  # the router-build extra; `make install` always installs it

from eval.routing.data import Outcome, Row  # noqa: E402
from eval.routing.finetune import FineTuneConfig, fine_tune  # noqa: E402
from eval.routing.finetune_cv import cross_validate  # noqa: E402
from eval.routing.train import TrainConfig, TrainingSet  # noqa: E402
from router.encoder import Encoder  # noqa: E402
from router.head import fit_ridge  # noqa: E402

HARD = ["prove the integral of the series converges", "derive the eigenvalues of the operator"]
EASY = ["what colour is the sky on a clear day", "how many legs does a cat have"]
FAST = FineTuneConfig(layers=1, epochs=4, lr=1e-4, head_lr=3e-2, batch=8, threads=1)


def _data() -> tuple[list[list[int]], np.ndarray]:
    enc = Encoder.load(layers=3)
    texts = [HARD[i % 2] + f" case {i}" for i in range(24)] + [EASY[i % 2] + f" case {i}" for i in range(24)]
    gain = np.array([1.0] * 24 + [0.0] * 24)
    return [enc.token_ids(t, 32) for t in texts], gain


def _training_set(texts: list[str], gain: np.ndarray, primary: int) -> TrainingSet:
    """One row per text, six tasks round robin, scored by `gain` (strong = gain, weak = 0)."""
    rows = tuple(
        Row(id=f"r{i}", source="s", task=f"task{i % 6}", prompt=t, outcomes={"s": Outcome(1.0, None, None)})
        for i, t in enumerate(texts)
    )
    return TrainingSet(
        rows=rows,
        texts=tuple(texts),
        embeddings=Encoder.load(layers=3).embed(texts, 32),
        strong_score=gain,
        weak_score=np.zeros_like(gain),
        primary=primary,
    )


@pytest.mark.parametrize("hard_is_positive", [True, False])
def test_fine_tune_learns_a_separable_target_and_scores_unseen_rows(hard_is_positive: bool) -> None:
    # Both label directions must be learned: an untrained head ranks the two groups the same way in
    # both runs, so it passes at most one of them.
    ids, gain = _data()
    if not hard_is_positive:
        gain = 1.0 - gain
    train = np.array([i for i in range(48) if i % 4 != 0])
    test = np.array([i for i in range(48) if i % 4 == 0])
    tuned = fine_tune(ids, gain, train, FAST)
    assert tuned.embeddings.shape == (48, 384)
    assert np.allclose(np.linalg.norm(tuned.embeddings, axis=1), 1.0, atol=1e-5)
    pos, neg = tuned.head[test][gain[test] == 1], tuned.head[test][gain[test] == 0]
    assert pos.min() > neg.max()  # every held-out positive row ranks above every negative one


def test_fine_tune_sees_only_its_training_rows() -> None:
    # Flipping the labels of rows outside train_idx must not change anything: they are never trained on.
    ids, gain = _data()
    train = np.arange(0, 48, 2)
    flipped = gain.copy()
    flipped[1::2] = 1.0 - flipped[1::2]
    a = fine_tune(ids, gain, train, FAST)
    b = fine_tune(ids, flipped, train, FAST)
    assert np.array_equal(a.head, b.head) and np.array_equal(a.embeddings, b.embeddings)


def test_a_soup_is_the_average_of_its_members_weights() -> None:
    # seeds=2 must be exactly "train seed 0 and seed 1 from the same base, average the weights", not
    # e.g. one longer run or an average of predictions.
    import dataclasses

    import torch

    from eval.routing.finetune import _batch, _member, _numpy_state, _regressor, _train_member

    ids, gain = _data()
    train = np.arange(0, 48, 2)
    cfg = dataclasses.replace(FAST, seeds=2, delta_rank=0)
    soup = fine_tune(ids, gain, train, cfg)
    members = [_numpy_state(_train_member(_member(cfg, s), ids, gain, train, cfg, s)) for s in (0, 1)]
    assert any(not np.array_equal(members[0][k], members[1][k]) for k in members[0])  # seeds differ
    net = _regressor(cfg.layers)
    net.load_state_dict(
        {
            k: torch.from_numpy(((a.astype(np.float64) + members[1][k]) / 2).astype(a.dtype))
            for k, a in members[0].items()
        }
    )
    net.eval()
    with torch.no_grad():
        pooled = net.pool(*_batch(ids, np.arange(48))).numpy()
        head = net.head(torch.from_numpy(pooled)).squeeze(-1).numpy()
    assert np.allclose(soup.embeddings, pooled, atol=1e-6)
    assert np.allclose(soup.head, head, atol=1e-6)
    single = fine_tune(ids, gain, train, dataclasses.replace(cfg, seeds=1))
    assert not np.allclose(single.head, soup.head, atol=1e-4)


def test_a_soup_needs_a_member() -> None:
    import dataclasses

    ids, gain = _data()
    with pytest.raises(ValueError, match="seeds"):
        fine_tune(ids, gain, np.arange(4), dataclasses.replace(FAST, seeds=0))


def test_pair_rows_train_every_fold_but_the_fine_tune_only_when_asked() -> None:
    # `--pair-data` rows (other pairs, other tasks) train each fold's head components and are never
    # test rows; with `--finetune-pairs` they train each fold's fine-tune as well.
    ids, gain = _data()
    enc = Encoder.load(layers=3)
    extra_texts = [HARD[i % 2] + f" other {i}" for i in range(8)] + [
        EASY[i % 2] + f" other {i}" for i in range(8)
    ]
    ids += [enc.token_ids(t, 32) for t in extra_texts]
    texts = [f"t{i}" for i in range(48)] + extra_texts
    cfg = TrainConfig(ks=(4, 8), rank=8, folds=3)

    def run(extra_gain: np.ndarray, finetune_extra: bool) -> tuple[np.ndarray, np.ndarray]:
        ts = _training_set(texts, np.concatenate([gain, extra_gain]), 48)
        result = cross_validate(ts, ids, cfg, FAST, False, finetune_extra=finetune_extra)
        assert result.oof["components"].shape == (48, 3)  # scores for the primary rows only
        return result.oof["ft_head"], result.oof["components"]

    one, flipped = np.array([1.0] * 8 + [0.0] * 8), np.array([0.0] * 8 + [1.0] * 8)
    head_a, comps_a = run(one, False)
    head_b, comps_b = run(flipped, False)
    assert np.array_equal(head_a, head_b)  # the fine-tune never saw the pair rows
    assert not np.allclose(comps_a, comps_b)  # the head components did
    head_c, _ = run(flipped, True)
    assert not np.allclose(head_a, head_c)  # with finetune_extra the fine-tune sees them


def test_saved_folds_hold_each_fine_tune_and_reproduce_the_out_of_fold_scores(tmp_path: Path) -> None:
    # `--save-folds` keeps what a fold's fine-tune computed, so head variants can be measured on
    # honest embeddings later: the saved test rows partition the data and carry the fold's scores.
    ids, gain = _data()
    ts = _training_set([f"t{i}" for i in range(48)], gain, 48)
    cfg = TrainConfig(ks=(4, 8), rank=8, folds=3)
    result = cross_validate(ts, ids, cfg, FAST, True, save_folds=tmp_path)
    saved = [np.load(tmp_path / f"task-fold{k}.npz") for k in range(3)]
    tests = np.concatenate([f["test_idx"] for f in saved])
    assert sorted(tests.tolist()) == list(range(48))
    for f in saved:
        assert f["embeddings"].shape == (48, 384)
        assert not set(f["train_idx"].tolist()) & set(f["test_idx"].tolist())
        assert np.array_equal(f["head"][f["test_idx"]], result.oof["ft_head"][f["test_idx"]])
        # The saved embeddings are the ones the fold's kNN and ridge were fitted on.
        ridge = fit_ridge(f["embeddings"][f["train_idx"]], gain[f["train_idx"]], cfg.alpha)
        assert np.allclose(
            ridge.predict(f["embeddings"][f["test_idx"]]), result.oof["components"][f["test_idx"], 1]
        )


def test_head_variants_reproduce_finetune_cv_on_its_saved_folds(tmp_path: Path) -> None:
    # eval.routing.head_variants refits heads on the saved folds; the shipped recipe (and the one with
    # the network's head added) must give exactly finetune_cv's own figures, fold by fold. A noisy
    # target, so that the components rank rows differently and a wrong weight changes the figures.
    from eval.routing.head_variants import Variant, cv_apgr, cv_parts

    ids, _ = _data()
    gain = np.random.default_rng(7).choice([-1.0, 0.0, 1.0], size=48, p=[0.1, 0.6, 0.3])
    ts = _training_set([f"t{i} " + ("hard" if g > 0 else "easy") for i, g in enumerate(gain)], gain, 48)
    cfg = TrainConfig(ks=(4, 8), rank=8, folds=3)
    shipped, with_head = Variant.shipped(cfg), Variant.shipped(cfg, head_weight=1.0)
    for by_task, kind in ((False, "id"), (True, "task")):
        result = cross_validate(ts, ids, cfg, FAST, by_task, save_folds=tmp_path)
        parts = cv_parts(ts, tmp_path, kind, [shipped, with_head], cfg)
        # (assert_array_equal: a fold without a quality gap is NaN in both)
        np.testing.assert_array_equal(np.round(cv_apgr(ts, parts, shipped), 4), result.apgr["ft_combo"])
        np.testing.assert_array_equal(
            np.round(cv_apgr(ts, parts, with_head), 4), result.apgr["ft_combo_head"]
        )
