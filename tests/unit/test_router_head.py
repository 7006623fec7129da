"""The numpy head: multi-k kNN, ridge, calibration curve, int8 keys."""

from __future__ import annotations

import numpy as np

from router.head import Head, empirical_cdf, fit_knn, fit_ridge, quantize_rows, to_share


def _unit_rows(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)
    out: np.ndarray = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def test_knn_averages_top_k_means_over_ks() -> None:
    emb = _unit_rows(200, 16, 0)
    target = np.random.default_rng(1).choice([-1.0, 0.0, 1.0], size=200)
    knn = fit_knn(emb, target, ks=(5, 20), rank=16)
    query = _unit_rows(7, 16, 2)
    # Brute force in the same (projected, int8-rounded) space the component uses.
    q = knn.projection.apply(query)
    sims = q @ knn.keys.T
    order = np.argsort(-sims, axis=1)
    expected = np.mean([knn.values[order[:, :k]].mean(axis=1) for k in (5, 20)], axis=0)
    np.testing.assert_allclose(knn.predict(query), expected, atol=1e-6)


def test_knn_k_larger_than_training_set_is_the_global_mean() -> None:
    emb = _unit_rows(10, 8, 3)
    target = np.arange(10, dtype=np.float64)
    knn = fit_knn(emb, target, ks=(50,), rank=4)
    np.testing.assert_allclose(knn.predict(_unit_rows(3, 8, 4)), np.full(3, 4.5), atol=1e-3)


def test_ridge_recovers_a_linear_target() -> None:
    emb = _unit_rows(500, 8, 5)
    w = np.arange(8, dtype=np.float64)
    target = emb.astype(np.float64) @ w + 0.3
    ridge = fit_ridge(emb, target, alpha=1e-6)
    np.testing.assert_allclose(ridge.predict(emb), target, atol=1e-3)


def test_quantized_rows_keep_cosine() -> None:
    x = _unit_rows(50, 64, 6)
    q, scale = quantize_rows(x)
    back = q.astype(np.float32) * scale[:, None]
    cos = (back * x).sum(axis=1) / np.linalg.norm(back, axis=1)
    assert q.dtype == np.int8
    assert cos.min() > 0.999


def test_calibration_maps_training_scores_to_their_percentile() -> None:
    raw = np.random.default_rng(7).normal(size=10_000)
    cdf_raw, cdf_share = empirical_cdf(raw)
    assert np.all(np.diff(cdf_raw) > 0)
    shares = to_share(raw, cdf_raw, cdf_share)
    # A threshold of 1 - x sends about x of the training distribution to the strong model.
    for x in (0.1, 0.3, 0.8):
        assert abs(float((shares >= 1 - x).mean()) - x) < 0.01
    assert to_share(np.array([-1e9, 1e9]), cdf_raw, cdf_share).tolist() == [0.0, 1.0]


def test_head_thresholds_are_complements_of_the_share() -> None:
    head = Head(
        components=(),
        centers=(),
        scales=(),
        weights=(),
        cdf_raw=np.array([0.0, 1.0]),
        cdf_share=np.array([0.0, 1.0]),
    )
    assert head.thresholds([0.1, 0.5, 0.9]) == {0.1: 0.9, 0.5: 0.5, 0.9: 0.1}
