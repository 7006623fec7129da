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
        top = ks[-1]
        if q.shape[0] == 1:  # serving: one request per call (difficulty.DEFAULT_MAX_BATCH)
            return np.array([self._predict_one(q[0], ks, top)], dtype=np.float64)
        out = np.empty(q.shape[0], dtype=np.float64)
        # Blocks bound the (block, n) similarity matrix when scoring a whole dataset.
        for start in range(0, q.shape[0], 256):
            sims = q[start : start + 256] @ self.keys.T
            idx = (
                np.argpartition(-sims, top - 1, axis=1)[:, :top]
                if top < n
                else np.tile(np.arange(n), (len(sims), 1))
            )
            order = np.argsort(-np.take_along_axis(sims, idx, axis=1), axis=1, kind="stable")
            ranked = self.values[np.take_along_axis(idx, order, axis=1)].astype(np.float64)
            csum = np.cumsum(ranked, axis=1)
            out[start : start + 256] = np.mean([csum[:, k - 1] / k for k in ks], axis=0)
        return out

    def _predict_one(self, q: F32, ks: Sequence[int], top: int) -> float:
        """`predict` for one query row, on 1-D arrays: the same steps in the same order (a partition of
        the negated similarities, a stable sort of the top, prefix sums), so the same neighbours and the
        same value (tests/unit/test_router_head_fast.py), without the 2-D temporaries and index
        broadcasting, ~0.1 ms less per request. `keys @ q` is the matrix-vector product of C-ordered
        keys, the memory-bound part (n x r float32 read once)."""
        sims = self.keys @ q
        n = sims.shape[0]
        neg = np.negative(sims, out=sims)
        idx = np.argpartition(neg, top - 1)[:top] if top < n else np.arange(n)
        order = np.argsort(neg[idx], kind="stable")
        csum = np.cumsum(self.values[idx[order]], dtype=np.float64)
        return float(np.mean([csum[k - 1] / k for k in ks]))

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
