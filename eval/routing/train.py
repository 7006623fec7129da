"""Training the difficulty head (`llmgw router train`): routing files -> versioned artifact directory.

Target: the strong model's quality gain over the weak one, g = s - w in {-1, 0, 1} on 0/1 data. It has
lower variance than the binary `weak < strong` label and ranks "weak right, strong wrong" prompts last,
which APGR rewards (design doc 007: +0.03-0.05 task-held-out APGR over the binary label).

Head (hyper-parameters chosen on cross-validation, never on mmlu_dev; design doc 008):
  2 x z(kNN gain, averaged over k = 50..800, cosine in a 96-d PCA space)  +  1 x z(ridge gain, alpha=100)
  + 1 x z(ridge gain on hashed TF-IDF word uni+bigrams of the text, alpha=10)

Steps:
1. load the files, keep rows with both models, drop repeated prompts and prompts that appear in any
   `--exclude` file (the evaluation set: 29 mmlu_dev prompts are verbatim in mmlu_train);
2. embed every prompt through the serving encoder (same int8 model, same tail budget), cached;
3. K-fold by id: fit the components on K-1 folds, predict the held-out fold. These out-of-fold scores
   give each component's standardization (center, scale) and the calibration curve (difficulty =
   percentile among out-of-fold training scores), and the in-distribution CV APGR;
4. K-fold by task (when there are several tasks): the leave-tasks-out APGR, i.e. how the same recipe does
   on topics it never saw — the generalization figure reported beside dev;
5. fit the components on all rows and write the artifact (router/artifact.py).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from eval.routing.data import FloatArray, Row, kfold_indices, load_rows, pair_outcomes, rows_with_models
from eval.routing.embed_cache import DEFAULT_CACHE_DIR, embed_texts
from eval.routing.metrics import apgr, routing_curve
from router.artifact import sha256_file, write_artifact
from router.difficulty import request_text
from router.encoder import Embeddings, Encoder
from router.head import Component, Head, empirical_cdf, fit_knn, fit_ridge
from router.lexical import fit_lexical

DEFAULT_SHARES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


@dataclass(frozen=True, slots=True)
class TrainConfig:
    strong: str = "gpt-4-1106-preview"
    weak: str = "mixtral-8x7b-instruct-v0.1"
    max_tokens: int = 32
    ks: tuple[int, ...] = (50, 100, 200, 400, 800)
    rank: int = 96
    alpha: float = 100.0
    knn_weight: float = 2.0
    linear_weight: float = 1.0
    lexical_alpha: float = 10.0
    lexical_weight: float = 1.0
    folds: int = 5
    name: str = "difficulty"


@dataclass(frozen=True, slots=True)
class TrainingSet:
    rows: tuple[Row, ...]
    texts: tuple[str, ...]
    embeddings: Embeddings
    gain: FloatArray
    dropped: dict[str, int] = field(default_factory=dict)


def _prompt_key(prompt: str) -> bytes:
    return hashlib.blake2b(prompt.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def select_rows(
    rows: Sequence[Row], cfg: TrainConfig, exclude: Sequence[Row] = ()
) -> tuple[tuple[Row, ...], dict[str, int]]:
    """Rows with both models, first occurrence of each prompt, none whose prompt is in `exclude`."""
    paired, missing = rows_with_models(rows, (cfg.strong, cfg.weak))
    banned = {_prompt_key(r.prompt) for r in exclude}
    seen: set[bytes] = set()
    kept: list[Row] = []
    duplicate = excluded = 0
    for row in paired:
        key = _prompt_key(row.prompt)
        if key in banned:
            excluded += 1
        elif key in seen:
            duplicate += 1
        else:
            seen.add(key)
            kept.append(row)
    return tuple(kept), {"missing_pair": missing, "duplicate_prompt": duplicate, "excluded_prompt": excluded}


def row_texts(rows: Sequence[Row]) -> list[str]:
    # Exactly what the gateway embeds for a one-turn chat whose user message is the prompt.
    return [request_text([{"role": "user", "content": r.prompt}]) for r in rows]


def prepare(
    rows: Sequence[Row],
    cfg: TrainConfig,
    encoder: Encoder,
    exclude: Sequence[Row] = (),
    cache_dir: Path | None = DEFAULT_CACHE_DIR,
    progress: bool = False,
) -> TrainingSet:
    kept, dropped = select_rows(rows, cfg, exclude)
    if len(kept) < 2 * cfg.folds:
        raise ValueError(f"need at least {2 * cfg.folds} usable rows to train, got {len(kept)} ({dropped})")
    pair = pair_outcomes(kept, cfg.strong, cfg.weak)
    texts = tuple(row_texts(kept))
    emb = embed_texts(encoder, texts, cfg.max_tokens, cache_dir=cache_dir, progress=progress)
    gain = pair.strong_score - pair.weak_score
    return TrainingSet(rows=kept, texts=texts, embeddings=emb, gain=gain, dropped=dropped)


def fit_components(ts: TrainingSet, idx: np.ndarray, cfg: TrainConfig) -> list[Component]:
    emb, gain = ts.embeddings[idx], ts.gain[idx]
    return [
        fit_knn(emb, gain, cfg.ks, cfg.rank),
        fit_ridge(emb, gain, cfg.alpha),
        fit_lexical([ts.texts[i] for i in idx], gain, cfg.lexical_alpha),
    ]


def _weights(cfg: TrainConfig) -> tuple[float, float, float]:
    return (cfg.knn_weight, cfg.linear_weight, cfg.lexical_weight)


def _oof(ts: TrainingSet, cfg: TrainConfig, group_by_task: bool) -> tuple[np.ndarray, list[np.ndarray]]:
    """Out-of-fold predictions, (rows, components), and the test indices of each non-empty fold."""
    preds = np.zeros((len(ts.rows), len(_weights(cfg))), dtype=np.float64)
    tests: list[np.ndarray] = []
    for train_idx, test_idx in kfold_indices(ts.rows, cfg.folds, group_by_task=group_by_task):
        if len(test_idx) == 0 or len(train_idx) == 0:
            continue
        comps = fit_components(ts, train_idx, cfg)
        test_texts = [ts.texts[i] for i in test_idx]
        for j, comp in enumerate(comps):
            preds[test_idx, j] = comp.predict(ts.embeddings[test_idx], test_texts)
        tests.append(test_idx)
    return preds, tests


def _combine(preds: np.ndarray, test_sets: list[np.ndarray], cfg: TrainConfig) -> np.ndarray:
    """Standardize within each fold (a fold's model has its own offset), then weight and sum."""
    raw = np.zeros(preds.shape[0], dtype=np.float64)
    for idx in test_sets:
        block = preds[idx]
        z = (block - block.mean(axis=0)) / np.maximum(block.std(axis=0), 1e-12)
        raw[idx] = z @ np.asarray(_weights(cfg))
    return raw


def _fold_apgr(
    ts: TrainingSet, raw: np.ndarray, test_sets: list[np.ndarray], cfg: TrainConfig
) -> list[float]:
    pair = pair_outcomes(ts.rows, cfg.strong, cfg.weak)
    out = []
    for idx in test_sets:
        value = apgr(routing_curve(raw[idx], pair.strong_score[idx], pair.weak_score[idx]))
        if not math.isnan(value):
            out.append(round(value, 4))
    return out


def _summary(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"apgr_mean": None, "apgr_std": None, "folds": []}
    return {
        "apgr_mean": round(float(np.mean(values)), 4),
        "apgr_std": round(float(np.std(values)), 4),
        "folds": values,
    }


def fit_head(ts: TrainingSet, cfg: TrainConfig) -> tuple[Head, dict[str, Any]]:
    """The final head (components fit on all rows, calibrated out of fold) and the CV report."""
    preds, tests = _oof(ts, cfg, group_by_task=False)
    centers = preds.mean(axis=0)
    scales = np.maximum(preds.std(axis=0), 1e-12)
    raw_oof = ((preds - centers) / scales) @ np.asarray(_weights(cfg))
    cdf_raw, cdf_share = empirical_cdf(raw_oof)
    cv: dict[str, Any] = {"id": _summary(_fold_apgr(ts, _combine(preds, tests, cfg), tests, cfg))}
    if len({r.task for r in ts.rows}) >= cfg.folds:
        tpreds, ttests = _oof(ts, cfg, group_by_task=True)
        cv["task"] = _summary(_fold_apgr(ts, _combine(tpreds, ttests, cfg), ttests, cfg))
    head = Head(
        components=tuple(fit_components(ts, np.arange(len(ts.rows)), cfg)),
        centers=tuple(float(c) for c in centers),
        scales=tuple(float(s) for s in scales),
        weights=_weights(cfg),
        cdf_raw=cdf_raw,
        cdf_share=cdf_share,
    )
    return head, cv


def train(
    data: Sequence[str | Path],
    out: str | Path,
    cfg: TrainConfig,
    exclude: Sequence[str | Path] = (),
    encoder: Encoder | None = None,
    cache_dir: Path | None = DEFAULT_CACHE_DIR,
    progress: bool = False,
) -> tuple[Path, dict[str, Any]]:
    enc = encoder or Encoder.load()
    rows = load_rows(list(data))
    excluded_rows = load_rows(list(exclude)) if exclude else ()
    ts = prepare(rows, cfg, enc, excluded_rows, cache_dir=cache_dir, progress=progress)
    head, cv = fit_head(ts, cfg)
    training = {
        "files": [
            {"path": str(Path(p).resolve()), "name": Path(p).name, "sha256": sha256_file(Path(p))}
            for p in data
        ],
        "exclude": [{"name": Path(p).name, "sha256": sha256_file(Path(p))} for p in exclude],
        "strong": cfg.strong,
        "weak": cfg.weak,
        "target": "gain = strong score - weak score",
        "rows_used": len(ts.rows),
        "tasks": len({r.task for r in ts.rows}),
        "dropped": ts.dropped,
        "hyper_parameters": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(cfg).items()},
        "cv": cv,
    }
    path = write_artifact(
        out,
        name=cfg.name,
        encoder=enc.identity,
        max_tokens=cfg.max_tokens,
        head=head,
        thresholds=head.thresholds(DEFAULT_SHARES),
        extra={"training": training},
    )
    return path, training
