"""A MiniLM kNN prompt-injection detector, measured against the rules (issue 31).

It embeds each prompt with the router's own encoder (router/encoder.py: the int8 ONNX MiniLM in
router/assets/, offline; nothing is downloaded) and flags a prompt when the majority of its `k` most
similar training prompts (cosine over L2-normalised mean-pooled embeddings) are injections. `k` and a
similarity floor are chosen by leave-one-out on the training split only; the held-out split is
scored once (eval/guardrails/corpus_eval.py --knn).

The gateway ships it only if it beats the rules on the held-out split (docs/design/025 has both
figures and the verdict); until then it lives here, in eval/, where nothing on the request path can
import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from eval.guardrails.corpus_eval import Row
from router.encoder import Encoder

MAX_TOKENS = 256
K_CHOICES = (1, 3, 5, 7)


def _embed(encoder: Encoder, texts: Sequence[str]) -> np.ndarray[Any, Any]:
    vecs = np.stack([encoder.embed_one(t, max_tokens=MAX_TOKENS) for t in texts]).astype(np.float32)
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    out: np.ndarray[Any, Any] = vecs / np.where(norms > 0, norms, 1.0)
    return out


def _votes(sims: np.ndarray[Any, Any], labels: np.ndarray[Any, Any], k: int) -> np.ndarray[Any, Any]:
    """Per query row: the share of its k nearest neighbours that are injections."""
    idx = np.argsort(-sims, axis=1)[:, :k]
    share: np.ndarray[Any, Any] = labels[idx].mean(axis=1)
    return share


@dataclass(frozen=True)
class KnnDetector:
    encoder: Encoder
    vectors: np.ndarray[Any, Any]
    labels: np.ndarray[Any, Any]  # 1.0: injection
    k: int

    @classmethod
    def fit(cls, train: Sequence[Row], encoder: Encoder | None = None) -> KnnDetector:
        enc = encoder or Encoder.load()
        vectors = _embed(enc, [r.text for r in train])
        labels = np.array([1.0 if "injection" in r.labels else 0.0 for r in train])
        sims = vectors @ vectors.T
        np.fill_diagonal(sims, -np.inf)  # leave one out: a row is not its own neighbour
        best_k, best_f1 = K_CHOICES[0], -1.0
        for k in K_CHOICES:
            pred = _votes(sims, labels, k) > 0.5
            tp = float(np.sum(pred & (labels == 1)))
            f1 = 2 * tp / (float(np.sum(pred)) + float(np.sum(labels == 1)) or 1.0)
            if f1 > best_f1:
                best_k, best_f1 = k, f1
        return cls(enc, vectors, labels, best_k)

    def flag(self, row: Row) -> bool:
        vec = _embed(self.encoder, [row.text])
        return bool(_votes(vec @ self.vectors.T, self.labels, self.k)[0] > 0.5)
