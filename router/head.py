"""The trained head: sentence embedding -> difficulty in [0, 1]. Pure numpy, no I/O.

A head is a weighted sum of standardized components, mapped through a calibration curve:

    raw(x)        = sum_i weight_i * (component_i(x) - center_i) / scale_i
    difficulty(x) = P(raw of a training prompt <= raw(x))          (empirical CDF, out-of-fold)

Components (each predicts the expected quality gain of the strong model over the weak one, s - w, which
ranks "weak right, strong wrong" prompts last and has lower variance than a binary label):

- `knn`: mean gain of the k most cosine-similar training prompts. With large k it acts as a learned,
  soft topic prior (it never sees a task label), and unlike a subject table it still says something
  about a topic absent from training. Keys are stored in a PCA projection as int8 (artifact size) and
  expanded to float32 at load (one matrix-vector product per request, well under a millisecond).
- `linear`: ridge regression on the embedding (within-topic signal, heavily regularized).
- `lexical`: ridge on hashed word uni+bigrams of the text itself (router/lexical.py): the words of
  the whole question, which the short encoder tail does not see.

The difficulty is a percentile of the training distribution, so the threshold for a target strong share
x is simply the (1 - x) quantile; the manifest stores those thresholds (calibration) and the gateway
may override them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from router.lexical import LexicalComponent

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]


class Component(Protocol):
    @property
    def kind(self) -> str: ...

    def predict(self, emb: F32, texts: Sequence[str]) -> F64: ...

    def arrays(self, prefix: str) -> dict[str, npt.NDArray[Any]]: ...

    def params(self) -> dict[str, Any]: ...


def _normalize_rows(x: F32) -> F32:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    out: F32 = (x / np.maximum(norms, 1e-12)).astype(np.float32)
    return out


@dataclass(frozen=True, slots=True)
class Projection:
    """Centered PCA projection; cosine similarity is taken in the projected space."""

    mean: F32  # (d,)
    basis: F32  # (d, r)

    def apply(self, emb: F32) -> F32:
        return _normalize_rows(((emb - self.mean) @ self.basis).astype(np.float32))

    def apply_exact(self, row: F32) -> F64:
        """`apply` for one embedding row in float64: the kNN's tie-breaking similarities."""
        out: F64 = (row.astype(np.float64) - self.mean) @ self.basis
        return out / max(float(np.linalg.norm(out)), 1e-12)


def fit_projection(emb: F32, rank: int) -> Projection:
    mean = emb.mean(axis=0).astype(np.float32)
    _, _, vt = np.linalg.svd((emb - mean).astype(np.float64), full_matrices=False)
    return Projection(mean=mean, basis=vt[:rank].T.astype(np.float32))


def quantize_rows(x: F32) -> tuple[npt.NDArray[np.int8], F32]:
    """Symmetric per-row int8: the keys are unit vectors, so the row maximum sets a tight scale."""
    scale = (np.abs(x).max(axis=1) / 127.0).astype(np.float32)
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    q = np.clip(np.rint(x / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale


# Float32 similarities closer than this at a k boundary are re-ranked in float64 (KnnComponent
# `_mean_of_tops`). Rounding differences between a batch and one request were <= 3e-7 on mmlu_dev;
# the worst-case float32 error of a 96-d unit dot product is ~6e-6.
AMBIGUOUS = 1e-5
# Candidates kept beyond the largest k, so that a near-tie band at that boundary is complete.
RERANK_MARGIN = 32
# Float64 similarities are rounded to this many decimals before ranking, so that equal keys (duplicate
# training prompts) rank by index whatever their last bit.
EXACT_DECIMALS = 12


@dataclass(frozen=True, slots=True)
class KnnComponent:
    """Mean target of the nearest training prompts, averaged over several neighbourhood sizes.

    Averaging the top-k means for k in `ks` (e.g. 50..800) is a kNN whose weight decays with neighbour
    rank: close neighbours count most, but the estimate never rests on a few noisy 0/1 outcomes. On
    mmlu task-held-out CV it beat every single k (design doc 008).
    """

    projection: Projection
    keys: F32  # (n, r), unit rows in the projected space
    values: F32  # (n,) training targets
    ks: tuple[int, ...]
    kind: str = "knn"

    def predict(self, emb: F32, texts: Sequence[str] = ()) -> F64:
        q = self.projection.apply(emb)
        n = self.keys.shape[0]
        ks = sorted({min(k, n) for k in self.ks})
        wide = min(n, ks[-1] + RERANK_MARGIN)
        if q.shape[0] == 1:  # serving: one request per call (difficulty.DEFAULT_MAX_BATCH)
            return np.array([self._predict_one(emb[0], q[0], ks, wide)], dtype=np.float64)
        out = np.empty(q.shape[0], dtype=np.float64)
        # Blocks bound the (block, n) similarity matrix when scoring a whole dataset.
        for start in range(0, q.shape[0], 256):
            sims = q[start : start + 256] @ self.keys.T
            cands = (
                np.argpartition(-sims, wide - 1, axis=1)[:, :wide]
                if wide < n
                else np.tile(np.arange(n), (len(sims), 1))
            )
            for r, cand in enumerate(cands):
                out[start + r] = self._mean_of_tops(emb[start + r], sims[r, cand], cand, ks)
        return out

    def _predict_one(self, row: F32, q: F32, ks: Sequence[int], wide: int) -> float:
        """`predict` for one query row without the 2-D temporaries and index broadcasting (~0.1 ms
        less per request). `keys @ q` is the matrix-vector product of C-ordered keys, the memory-bound
        part (n x r float32 read once)."""
        neg = np.negative(self.keys @ q)
        n = neg.shape[0]
        cand = np.argpartition(neg, wide - 1)[:wide] if wide < n else np.arange(n)
        return self._mean_of_tops(row, -neg[cand], cand, ks)

    def _mean_of_tops(self, row: F32, sims: F32, cand: npt.NDArray[np.intp], ks: Sequence[int]) -> float:
        """Mean over k in `ks` of the mean value of the k most similar candidates.

        `sims` are the candidates' float32 similarities. A batch's matrix product and one request's
        matrix-vector product round them differently in the last bits, which swapped two near-tied
        neighbours at a k boundary on 1 mmlu_dev prompt in 300: the score depended on how it was
        computed. So where the k-th and (k+1)-th similarities are closer than AMBIGUOUS, membership
        of the top k is decided by float64 similarities recomputed from the embedding row (rounded,
        ties to the lower key index), the same way in both paths. Elsewhere float32 already decides.
        """
        neg = np.negative(sims)
        order = np.argsort(neg, kind="stable")
        neg_s = neg[order]  # ascending: searchsorted finds the near-tie bands on it directly
        s = sims[order]
        ranked = cand[order]
        csum = np.cumsum(self.values[ranked], dtype=np.float64)
        means = []
        exact_q: F64 | None = None
        for k in ks:
            total = float(csum[k - 1])
            if k < len(s) and s[k - 1] - s[k] < AMBIGUOUS:
                # The band of near-ties around the boundary; every candidate above it is in the top k
                # and every one below is out, whatever the rounding (errors are << AMBIGUOUS).
                lo = int(np.searchsorted(neg_s, -(s[k - 1] + AMBIGUOUS), side="right"))
                hi = int(np.searchsorted(neg_s, -(s[k] - AMBIGUOUS), side="left"))
                if exact_q is None:
                    exact_q = self.projection.apply_exact(row)
                band = np.sort(ranked[lo:hi])
                exact = np.round(self.keys[band].astype(np.float64) @ exact_q, EXACT_DECIMALS)
                chosen = band[np.lexsort((band, -exact))[: k - lo]]
                total = (float(csum[lo - 1]) if lo > 0 else 0.0) + float(
                    self.values[chosen].astype(np.float64).sum()
                )
            means.append(total / k)
        return float(np.mean(means))

    def arrays(self, prefix: str) -> dict[str, npt.NDArray[Any]]:
        q, scale = quantize_rows(self.keys)
        return {
            f"{prefix}.proj_mean": self.projection.mean,
            f"{prefix}.proj_basis": self.projection.basis.astype(np.float16),
            f"{prefix}.keys_q": q,
            f"{prefix}.keys_scale": scale,
            f"{prefix}.values": self.values.astype(np.float16),
        }

    def params(self) -> dict[str, Any]:
        return {"ks": list(self.ks), "rows": int(self.keys.shape[0]), "rank": int(self.keys.shape[1])}

    @classmethod
    def from_arrays(
        cls, arrays: Mapping[str, npt.NDArray[Any]], prefix: str, params: Mapping[str, Any]
    ) -> KnnComponent:
        keys = arrays[f"{prefix}.keys_q"].astype(np.float32) * arrays[f"{prefix}.keys_scale"][:, None]
        ks = tuple(int(k) for k in params["ks"])
        if not ks or min(ks) < 1:
            raise ValueError(f"knn ks must be positive integers, got {ks}")
        return cls(
            projection=Projection(
                mean=arrays[f"{prefix}.proj_mean"].astype(np.float32),
                basis=arrays[f"{prefix}.proj_basis"].astype(np.float32),
            ),
            keys=_normalize_rows(keys.astype(np.float32)),
            values=arrays[f"{prefix}.values"].astype(np.float32),
            ks=ks,
        )


def fit_knn(emb: F32, target: F64, ks: Sequence[int], rank: int) -> KnnComponent:
    """Keys go through the int8 round trip here too, so training scores what serving will compute."""
    rank = max(1, min(rank, emb.shape[0], emb.shape[1]))
    projection = fit_projection(emb, rank)
    q, scale = quantize_rows(projection.apply(emb))
    keys = _normalize_rows((q.astype(np.float32) * scale[:, None]).astype(np.float32))
    values = target.astype(np.float16).astype(np.float32)
    return KnnComponent(projection=projection, keys=keys, values=values, ks=tuple(int(k) for k in ks))


@dataclass(frozen=True, slots=True)
class LinearComponent:
    weights: F32  # (d,)
    mean: F32  # (d,) training embedding mean
    bias: float
    kind: str = "linear"

    def predict(self, emb: F32, texts: Sequence[str] = ()) -> F64:
        return ((emb - self.mean) @ self.weights).astype(np.float64) + self.bias

    def arrays(self, prefix: str) -> dict[str, npt.NDArray[Any]]:
        return {f"{prefix}.weights": self.weights, f"{prefix}.mean": self.mean}

    def params(self) -> dict[str, Any]:
        return {"bias": self.bias}

    @classmethod
    def from_arrays(
        cls, arrays: Mapping[str, npt.NDArray[Any]], prefix: str, params: Mapping[str, Any]
    ) -> LinearComponent:
        return cls(
            weights=arrays[f"{prefix}.weights"].astype(np.float32),
            mean=arrays[f"{prefix}.mean"].astype(np.float32),
            bias=float(params["bias"]),
        )


def fit_ridge(emb: F32, target: F64, alpha: float) -> LinearComponent:
    mean = emb.mean(axis=0)
    x = (emb - mean).astype(np.float64)
    y = target - target.mean()
    w = np.linalg.solve(x.T @ x + alpha * np.eye(x.shape[1]), x.T @ y)
    return LinearComponent(
        weights=w.astype(np.float32), mean=mean.astype(np.float32), bias=float(target.mean())
    )


COMPONENT_TYPES: dict[str, Any] = {
    "knn": KnnComponent,
    "linear": LinearComponent,
    "lexical": LexicalComponent,
}


@dataclass(frozen=True, slots=True)
class Head:
    components: tuple[Component, ...]
    centers: tuple[float, ...]
    scales: tuple[float, ...]
    weights: tuple[float, ...]
    # Empirical CDF of out-of-fold raw scores on the training rows: raw value -> cumulative share.
    cdf_raw: F64
    cdf_share: F64

    def raw(self, emb: F32, texts: Sequence[str]) -> F64:
        """`emb[i]` is the embedding of `texts[i]` (the lexical component reads the text itself)."""
        total = np.zeros(emb.shape[0], dtype=np.float64)
        for comp, c, s, w in zip(self.components, self.centers, self.scales, self.weights, strict=True):
            total += w * (comp.predict(emb, texts) - c) / s
        return total

    def difficulty(self, emb: F32, texts: Sequence[str]) -> F64:
        return to_share(self.raw(emb, texts), self.cdf_raw, self.cdf_share)

    def thresholds(self, shares: Sequence[float]) -> dict[float, float]:
        """Strong share x -> the difficulty above which a prompt goes to the strong model."""
        return {float(x): round(1.0 - float(x), 6) for x in shares}


def to_share(raw: F64, cdf_raw: F64, cdf_share: F64) -> F64:
    out: F64 = np.clip(np.interp(raw, cdf_raw, cdf_share), 0.0, 1.0)
    return out


def empirical_cdf(raw: F64, points: int = 201) -> tuple[F64, F64]:
    """`points` quantiles of `raw` (strictly increasing after dropping ties) and their shares."""
    shares = np.linspace(0.0, 1.0, points)
    values = np.quantile(raw, shares)
    keep = np.concatenate(([True], np.diff(values) > 0))
    return values[keep].astype(np.float64), shares[keep].astype(np.float64)
