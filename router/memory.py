"""Outcome memory: (prompt embedding, needs_strong) records, and the kNN difficulty blended with the prior.

    memory = OutcomeMemory(dim=384, capacity=50_000, k=64)
    memory.add(embedding, needs_strong=1.0)          # an explored / judged outcome
    d = blend(prior, memory.neighbourhood(embedding), BlendParams())

The memory is an in-process bounded ring of L2-normalized float32 rows: when full, the oldest outcome is
overwritten (traffic drifts; recent outcomes say more about it). A query is one matrix-vector product
over the filled rows (50k x 384 float32 = 77 MB, ~5 ms on one core), so no index is needed at this size.
Records travel between replicas as `to_record` bytes (float16 embedding + one float32 label).

`blend` is pure: the prior's difficulty, pulled towards the neighbours' similarity-weighted mean label
with weight n_eff / (n_eff + c), where n_eff is the sum of the neighbours' (non-negative) cosine
similarities: many close neighbours outweigh the prior, a few distant ones barely move it.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

__all__ = ["BlendParams", "Neighbourhood", "OutcomeMemory", "blend", "from_record", "to_record"]

F32 = npt.NDArray[np.float32]

_LABEL = struct.Struct("<f")
_PERCENTILE_SD = 1.0 / math.sqrt(12.0)


@dataclass(frozen=True, slots=True)
class BlendParams:
    """How strongly the memory overrides the prior: weight = n_eff / (n_eff + blend_c)."""

    blend_c: float = 128.0
    scale: Literal["prior", "probability"] = "prior"

    def __post_init__(self) -> None:
        if not self.blend_c > 0:
            raise ValueError(f"blend_c must be > 0, got {self.blend_c}")


@dataclass(frozen=True, slots=True)
class Neighbourhood:
    """The k nearest stored outcomes of one query: cosine similarities (descending) and their labels."""

    similarities: F32
    labels: F32
    # Mean label over the whole memory: the live base rate the neighbours' share is judged against.
    base_rate: float = 0.5

    @property
    def weights(self) -> F32:
        # Dissimilar rows (cosine <= 0) carry no evidence about this prompt.
        return np.maximum(self.similarities, 0.0).astype(np.float32)

    @property
    def n_eff(self) -> float:
        return float(self.weights.sum())

    @property
    def p_strong(self) -> float:
        """Similarity-weighted share of neighbours that needed the strong tier (0.5 with no weight)."""
        w = self.weights
        total = float(w.sum())
        return float((w * self.labels).sum() / total) if total > 0 else 0.5


def _normalized(embedding: npt.ArrayLike) -> F32:
    v = np.asarray(embedding, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(v))
    if not np.isfinite(norm) or norm == 0.0:
        raise ValueError("embedding must be finite and non-zero")
    return (v / norm).astype(np.float32)


class OutcomeMemory:
    """A bounded ring of outcomes; not thread-safe (one per event loop / replay)."""

    def __init__(self, dim: int, capacity: int = 50_000, k: int = 64) -> None:
        if dim < 1 or capacity < 1 or k < 1:
            raise ValueError(f"dim, capacity and k must be >= 1, got {dim}, {capacity}, {k}")
        self.dim, self.capacity, self.k = dim, capacity, k
        self._rows = np.zeros((capacity, dim), dtype=np.float32)
        self._labels = np.zeros(capacity, dtype=np.float32)
        self._size = 0
        self._next = 0
        self._label_sum = 0.0  # over the filled rows: the base rate without a pass over the memory

    def __len__(self) -> int:
        return self._size

    def add(self, embedding: np.ndarray, needs_strong: float) -> None:
        if not 0.0 <= needs_strong <= 1.0:
            raise ValueError(f"needs_strong must be in [0, 1], got {needs_strong}")
        v = _normalized(embedding)
        if v.shape[0] != self.dim:
            raise ValueError(f"embedding has dim {v.shape[0]}, memory has {self.dim}")
        self._rows[self._next] = v
        if self._size == self.capacity:
            self._label_sum -= float(self._labels[self._next])  # the outcome it overwrites
        self._labels[self._next] = needs_strong
        self._label_sum += needs_strong
        self._next = (self._next + 1) % self.capacity
        self._size = min(self._size + 1, self.capacity)

    def neighbourhood(self, embedding: np.ndarray) -> Neighbourhood | None:
        """The k most cosine-similar outcomes, most similar first; None while the memory is empty."""
        if self._size == 0:
            return None
        q = _normalized(embedding)
        sims = self._rows[: self._size] @ q
        k = min(self.k, self._size)
        top = np.argpartition(-sims, k - 1)[:k] if k < self._size else np.arange(self._size)
        top = top[np.argsort(-sims[top], kind="stable")]
        base = min(max(self._label_sum / self._size, 0.0), 1.0)
        return Neighbourhood(sims[top].astype(np.float32), self._labels[top].copy(), base)


def blend(prior: float, hood: Neighbourhood | None, cfg: BlendParams) -> float:
    """The difficulty the policy uses: the prior, moved by the neighbours' evidence with their weight.

    `scale="prior"` blends on the prior's scale: the prior is a training percentile (uniform, sd
    1/sqrt(12)) while the neighbours' share is a probability around the live base rate, so the share's
    deviation from that base rate, in base-rate standard deviations, is mapped onto the percentile's
    spread. A plain mix (`scale="probability"`) instead drags every well-covered prompt towards the
    base rate whatever its neighbours say, which reorders prompts by coverage, not by difficulty.
    """
    if hood is None:
        return prior
    n = hood.n_eff
    if n <= 0:
        return prior
    w = n / (n + cfg.blend_c)
    if cfg.scale == "probability":
        return (1.0 - w) * prior + w * hood.p_strong
    b = min(max(hood.base_rate, 0.01), 0.99)
    z = (hood.p_strong - b) / math.sqrt(b * (1.0 - b))
    return min(max(prior + w * z * _PERCENTILE_SD, 0.0), 1.0)


def to_record(embedding: np.ndarray, needs_strong: float) -> bytes:
    """Wire form for sharing through Redis streams: float16 normalized embedding, then float32 label."""
    v = _normalized(embedding).astype("<f2")
    return v.tobytes() + _LABEL.pack(float(needs_strong))


def from_record(data: bytes) -> tuple[np.ndarray, float]:
    body = len(data) - _LABEL.size
    if body <= 0 or body % 2:
        raise ValueError(f"not an outcome record ({len(data)} bytes)")
    emb = np.frombuffer(data[:body], dtype="<f2").astype(np.float32)
    (label,) = _LABEL.unpack(data[body:])
    return emb, float(label)
