"""Training the answer scorer (router/scorers.py TrainedAnswerScorer) on routing data with responses.

Every (prompt, recorded response) of every model on the given rows is one example, labelled with that
response's score; so a RouterBench row contributes up to 11 examples, and a fold's training rows never
share a prompt with its evaluation rows (cross-validation splits rows, not examples).

L2-regularized logistic regression in numpy over the sparse features of router/answer_features.py:
full-batch Adam on the mean log-loss from zero weights (convex objective, deterministic result; no
torch, no scipy). The sparse matrix is CSR by hand: X @ w and X.T @ r are two `np.bincount`s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from eval.routing.data import FloatArray, IntArray, Row
from router.answer_features import N_FEATURES, features
from router.scorers import TrainedAnswerScorer

FeatureCache = dict[tuple[str, str], tuple[IntArray, FloatArray]]


@dataclass(frozen=True, slots=True)
class Examples:
    """CSR feature rows and labels."""

    indptr: IntArray
    indices: IntArray
    data: FloatArray
    labels: FloatArray

    @property
    def n(self) -> int:
        return int(self.labels.shape[0])


def _sparse(prompt: str, text: str) -> tuple[IntArray, FloatArray]:
    f = features(prompt, text)
    idx = np.fromiter(f.keys(), dtype=np.int64, count=len(f))
    val = np.fromiter(f.values(), dtype=np.float64, count=len(f))
    return idx, val


def examples(
    rows: Sequence[Row], cache: FeatureCache | None = None, models: Sequence[str] | None = None
) -> Examples:
    """One example per (row, model with a response); `cache` keyed by (row id, model) spares recomputing."""
    cache = {} if cache is None else cache
    idx_parts: list[IntArray] = []
    val_parts: list[FloatArray] = []
    labels: list[float] = []
    for row in rows:
        for model, outcome in sorted(row.outcomes.items()):
            if outcome.response is None or (models is not None and model not in models):
                continue
            key = (row.id, model)
            if key not in cache:
                cache[key] = _sparse(row.prompt, outcome.response)
            idx, val = cache[key]
            idx_parts.append(idx)
            val_parts.append(val)
            labels.append(outcome.score)
    if not labels:
        raise ValueError("no (prompt, response) pairs to train on: the data has no responses")
    lengths = np.array([len(p) for p in idx_parts], dtype=np.int64)
    return Examples(
        indptr=np.concatenate(([0], np.cumsum(lengths))).astype(np.int64),
        indices=np.concatenate(idx_parts),
        data=np.concatenate(val_parts),
        labels=np.array(labels, dtype=np.float64),
    )


def fit_logistic(ex: Examples, l2: float = 1e-3, iterations: int = 300, lr: float = 0.05) -> FloatArray:
    """Weights minimizing mean log-loss + l2/2 * |w|^2 (the bias feature is regularized too; harmless)."""
    n = ex.n
    row_of = np.repeat(np.arange(n, dtype=np.int64), np.diff(ex.indptr))
    w = np.zeros(N_FEATURES, dtype=np.float64)
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    b1, b2, eps = 0.9, 0.999, 1e-8
    for t in range(1, iterations + 1):
        z = np.bincount(row_of, weights=ex.data * w[ex.indices], minlength=n)
        p = 1.0 / (1.0 + np.exp(-np.clip(z, -40.0, 40.0)))
        r = (p - ex.labels) / n
        grad = np.bincount(ex.indices, weights=ex.data * r[row_of], minlength=N_FEATURES) + l2 * w
        m = b1 * m + (1 - b1) * grad
        v = b2 * v + (1 - b2) * grad * grad
        w -= lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
    return w


def train_scorer(
    rows: Sequence[Row],
    cache: FeatureCache | None = None,
    l2: float = 1e-3,
    iterations: int = 300,
    models: Sequence[str] | None = None,
) -> TrainedAnswerScorer:
    w = fit_logistic(examples(rows, cache, models), l2=l2, iterations=iterations)
    return TrainedAnswerScorer(weights=tuple(float(x) for x in w))


def auc(scores: Sequence[float], labels: Sequence[float]) -> float:
    """ROC AUC with ties averaged (Mann-Whitney); NaN when only one class is present."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64) >= 0.5
    pos, neg = int(y.sum()), int((~y).sum())
    if pos == 0 or neg == 0:
        return float("nan")
    order = np.argsort(s, kind="stable")
    ranks = np.empty(len(s), dtype=np.float64)
    sorted_s = s[order]
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return float((ranks[y].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def describe(scorer: TrainedAnswerScorer, top: int = 8) -> Mapping[str, float]:
    """The largest dense-feature weights, for the training report."""
    from router.answer_features import DENSE, HASH_BUCKETS

    dense = {name: scorer.weights[HASH_BUCKETS + i] for i, name in enumerate(DENSE)}
    return dict(sorted(dense.items(), key=lambda kv: -abs(kv[1]))[:top])
