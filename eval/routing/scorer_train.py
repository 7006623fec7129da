"""Training the answer scorer (router/scorers.py TrainedAnswerScorer) on routing data with responses.

Every (prompt, recorded response) of every model on the given rows is one example, labelled with that
response's score; so a RouterBench row contributes up to 11 examples, and a fold's training rows never
share a prompt with its evaluation rows (cross-validation splits rows, not examples).

L2-regularized logistic regression in numpy over the sparse features of router/answer_features.py:
full-batch Adam on the mean log-loss from zero weights (convex objective, deterministic result; no
torch, no scipy). The sparse matrix is CSR by hand: X @ w and X.T @ r are two `np.bincount`s.

The step scorer (`train_step_scorer`, artifact format 2) is trained for one alias: every row is played
through the alias's plan (no difficulty: every step from the first), and each answer of each cheap
step is an example with its context — the tier that gave it and the other answers made so far, as the
cascade will see them at that step — plus, optionally, every other model's response as an
answer-only example (more text to learn answer quality from).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from eval.routing.data import FloatArray, IntArray, Row
from router.answer_features import CONTEXT_BUCKETS, N_FEATURES, context_features, features
from router.config import RoutingPolicy
from router.policy import plan_route
from router.scorers import TrainedAnswerScorer

FeatureCache = dict[tuple[str, ...], tuple[IntArray, FloatArray]]


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


def _sparse(prompt: str, text: str, context: dict[int, float] | None = None) -> tuple[IntArray, FloatArray]:
    f = features(prompt, text)
    if context:
        f = {**f, **context}
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
    return _csr(idx_parts, val_parts, labels)


def _csr(idx_parts: list[IntArray], val_parts: list[FloatArray], labels: list[float]) -> Examples:
    if not labels:
        raise ValueError("no (prompt, response) pairs to train on: the data has no responses")
    lengths = np.array([len(p) for p in idx_parts], dtype=np.int64)
    return Examples(
        indptr=np.concatenate(([0], np.cumsum(lengths))).astype(np.int64),
        indices=np.concatenate(idx_parts),
        data=np.concatenate(val_parts),
        labels=np.array(labels, dtype=np.float64),
    )


def step_examples(
    rows: Sequence[Row],
    policy: RoutingPolicy,
    models: Sequence[str],
    cache: FeatureCache | None = None,
    extra_models: Sequence[str] = (),
) -> Examples:
    """Examples for a step scorer of `policy` (tier i served by models[i]); see the module docstring."""
    cache = {} if cache is None else cache
    steps = plan_route(policy, None).steps[:-1]  # the strong tier's answer is never scored
    idx_parts: list[IntArray] = []
    val_parts: list[FloatArray] = []
    labels: list[float] = []
    for row in rows:
        made: list[tuple[int, str]] = []
        for step in steps:
            got = [(c.tier, row.outcomes[models[c.tier]]) for c in step.calls]
            ok = [(t, o.response, o.score) for t, o in got if o.response is not None]
            for pos, (tier, text, score) in enumerate(ok):
                others = made + [(t, x) for j, (t, x, _) in enumerate(ok) if j != pos]
                key = ("step", row.id, f"{tier}:{models[tier]}", *(f"{t}:{models[t]}" for t, _ in others))
                if key not in cache:
                    cache[key] = _sparse(row.prompt, text, context_features(row.prompt, text, tier, others))
                idx, val = cache[key]
                idx_parts.append(idx)
                val_parts.append(val)
                labels.append(score)
            made += [(t, x) for t, x, _ in ok]
        for model in extra_models:
            out = row.outcomes.get(model)
            if out is None or out.response is None:
                continue
            key = (row.id, model)
            if key not in cache:
                cache[key] = _sparse(row.prompt, out.response)
            idx_parts.append(cache[key][0])
            val_parts.append(cache[key][1])
            labels.append(out.score)
    return _csr(idx_parts, val_parts, labels)


def train_step_scorer(
    rows: Sequence[Row],
    policy: RoutingPolicy,
    models: Sequence[str],
    cache: FeatureCache | None = None,
    extra_models: Sequence[str] = (),
    l2: float = 1e-3,
    iterations: int = 300,
) -> TrainedAnswerScorer:
    ex = step_examples(rows, policy, models, cache, extra_models)
    w = fit_logistic(ex, l2=l2, iterations=iterations, n_features=N_FEATURES + CONTEXT_BUCKETS)
    return TrainedAnswerScorer(
        weights=tuple(float(x) for x in w[:N_FEATURES]),
        context_weights=tuple(float(x) for x in w[N_FEATURES:]),
    )


def fit_logistic(
    ex: Examples, l2: float = 1e-3, iterations: int = 300, lr: float = 0.05, n_features: int = N_FEATURES
) -> FloatArray:
    """Weights minimizing mean log-loss + l2/2 * |w|^2 (the bias feature is regularized too; harmless)."""
    n = ex.n
    row_of = np.repeat(np.arange(n, dtype=np.int64), np.diff(ex.indptr))
    w = np.zeros(n_features, dtype=np.float64)
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    b1, b2, eps = 0.9, 0.999, 1e-8
    for t in range(1, iterations + 1):
        z = np.bincount(row_of, weights=ex.data * w[ex.indices], minlength=n)
        p = 1.0 / (1.0 + np.exp(-np.clip(z, -40.0, 40.0)))
        r = (p - ex.labels) / n
        grad = np.bincount(ex.indices, weights=ex.data * r[row_of], minlength=n_features) + l2 * w
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
