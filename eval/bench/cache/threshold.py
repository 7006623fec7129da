"""Threshold math for the semantic cache: precision/recall of "serve the cached answer" per cosine
threshold, the threshold to ship, and a cross-validated estimate of what it achieves.

A pair is (score of the two prompts, whether they are paraphrases). The score is the cosine of their
embeddings, or for "cosine AND verifier" the cosine where cache.verify.same_question accepts the pair
and -1 where it rejects it (never a hit). At threshold t the cache would answer prompt b with a's
reply when score >= t: a paraphrase above t is a true hit, a
near-miss above t a false hit (a wrong answer served), a paraphrase below t a missed saving.
Precision is what matters for users (wrong answers), recall what the cache saves.

Picking: the most recall subject to precision >= the target, ties to the highest threshold (the same
hits with more margin). Precision is not monotonic in t on a few hundred pairs, so the pick can sit in
a dip below thresholds that miss the target; the cross-validated estimate (pick on one half, measure
on the other) is the figure that accounts for that.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Metrics:
    threshold: float
    tp: int
    fp: int
    fn: int
    tn: int

    @property
    def hits(self) -> int:
        return self.tp + self.fp

    @property
    def precision(self) -> float:
        # No hits, no wrong answers: vacuously precise (recall 0 says the threshold is useless).
        return self.tp / self.hits if self.hits else 1.0

    @property
    def recall(self) -> float:
        positives = self.tp + self.fn
        return self.tp / positives if positives else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "precision": round(self.precision, 4),
            "recall": round(self.recall, 4),
            "f1": round(self.f1, 4),
        }


def grid(lo: float = 0.50, hi: float = 0.99, step: float = 0.01) -> list[float]:
    n = round((hi - lo) / step)
    return [round(lo + i * step, 6) for i in range(n + 1)]


def metrics_at(sims: Floats, labels: Bools, threshold: float) -> Metrics:
    hit = sims >= threshold
    return Metrics(
        threshold=threshold,
        tp=int(np.sum(hit & labels)),
        fp=int(np.sum(hit & ~labels)),
        fn=int(np.sum(~hit & labels)),
        tn=int(np.sum(~hit & ~labels)),
    )


def sweep(sims: Floats, labels: Bools, thresholds: Sequence[float]) -> list[Metrics]:
    return [metrics_at(sims, labels, t) for t in thresholds]


def pick_threshold(rows: Sequence[Metrics], min_precision: float, low_ties: bool = False) -> Metrics | None:
    """The threshold with the most recall among those with precision >= `min_precision` (rows with hits
    only); among equal recall the highest threshold, which serves the same hits with more margin, or with
    `low_ties` the lowest: for a whitelist verifier that accepts no near miss at any cosine, the cosine
    is only a candidate gate, and a high tie merely fits the cosines of the few hits seen."""
    ok = [m for m in rows if m.hits and m.precision >= min_precision]
    sign = -1.0 if low_ties else 1.0
    return max(ok, key=lambda m: (m.recall, sign * m.threshold)) if ok else None


@dataclass(frozen=True, slots=True)
class CrossValidation:
    splits: int
    picked: int  # splits whose fitting half had a threshold reaching the target
    thresholds: list[float]
    precision: list[float]  # on the held-out half, at the threshold picked on the other
    recall: list[float]

    def summary(self) -> dict[str, Any]:
        def stats(xs: list[float]) -> dict[str, float]:
            if not xs:
                return {}
            a = np.asarray(xs)
            return {
                "mean": round(float(a.mean()), 4),
                "p05": round(float(np.quantile(a, 0.05)), 4),
                "median": round(float(np.median(a)), 4),
                "p95": round(float(np.quantile(a, 0.95)), 4),
                "min": round(float(a.min()), 4),
            }

        return {
            "splits": self.splits,
            "picked": self.picked,
            "threshold": stats(self.thresholds),
            "heldout_precision": stats(self.precision),
            "heldout_recall": stats(self.recall),
            "heldout_precision_ge_0.95": round(float(np.mean(np.asarray(self.precision) >= 0.95)), 4)
            if self.precision
            else 0.0,
        }


def cross_validate(
    sims: Floats,
    labels: Bools,
    thresholds: Sequence[float],
    min_precision: float,
    *,
    splits: int = 200,
    seed: int = 0,
    low_ties: bool = False,
) -> CrossValidation:
    """Repeated stratified half splits: pick on one half, measure on the other (then swap roles)."""
    rng = np.random.default_rng(seed)
    pos, neg = np.flatnonzero(labels), np.flatnonzero(~labels)
    picked: list[float] = []
    precision: list[float] = []
    recall: list[float] = []
    for _ in range(splits):
        mask = np.zeros(len(labels), dtype=bool)
        mask[rng.permutation(pos)[: len(pos) // 2]] = True
        mask[rng.permutation(neg)[: len(neg) // 2]] = True
        for fit in (mask, ~mask):
            choice = pick_threshold(sweep(sims[fit], labels[fit], thresholds), min_precision, low_ties)
            if choice is None:
                continue
            held = metrics_at(sims[~fit], labels[~fit], choice.threshold)
            picked.append(choice.threshold)
            precision.append(held.precision)
            recall.append(held.recall)
    return CrossValidation(
        splits=2 * splits, picked=len(picked), thresholds=picked, precision=precision, recall=recall
    )
