"""Training the difficulty head (`llmgw router train`): routing files -> versioned artifact directory.

Target: the strong model's quality gain over the weak one, g = s - w in {-1, 0, 1} on 0/1 data. It has
lower variance than the binary `weak < strong` label and ranks "weak right, strong wrong" prompts last,
which APGR rewards (design doc 007: +0.03-0.05 task-held-out APGR over the binary label).

Head (hyper-parameters chosen on cross-validation, never on mmlu_dev; design doc 008):
  2 x z(kNN gain, averaged over k = 50..800, cosine in a 96-d PCA space)  +  1 x z(ridge gain, alpha=100)
  + 1 x z(ridge gain on hashed TF-IDF word uni+bigrams of the text, alpha=10)

Data: the primary files (`--data`, one strong/weak pair) and optional extra files, each with its own
pair (`--pair-data FILE STRONG WEAK`, e.g. the RouterBench train files, whose weak model is
mixtral-8x7b-chat). The target is always "the gain of that row's strong model over its weak one", so
rows of different pairs mean the same thing and can share one head. Extra rows are always training
rows: cross-validation folds, standardization and calibration come from the primary rows only, so
the CV figures stay comparable across recipes and the percentile calibration describes the primary
traffic. The shipped artifact pools the three RouterBench train files this way: on the fine-tuned
encoder it raised leave-one-file-out and within-file APGR on the RouterBench files (mean over four
weak models 0.486 -> 0.492 and 0.517 -> 0.542) at -0.0015 mmlu CV (doc 008, "RouterBench rows in the
shipped head").

Steps:
1. load the files, keep rows with both models of their pair, drop repeated prompts (across all files)
   and prompts that appear in any `--exclude` file (the evaluation set: 29 mmlu_dev prompts are
   verbatim in mmlu_train);
2. embed every prompt through the serving encoder (same int8 model, same tail budget), cached;
3. K-fold by id over the primary rows: fit the components on K-1 folds plus every extra row, predict
   the held-out fold. These out-of-fold scores give each component's standardization (center, scale)
   and the calibration curve (difficulty = percentile among out-of-fold training scores), and the
   in-distribution CV APGR;
4. K-fold by task (when there are several tasks): the leave-tasks-out APGR, i.e. how the same recipe does
   on topics it never saw — the generalization figure reported beside dev;
5. fit the components on all rows and write the artifact (router/artifact.py).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
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
from router.encoder import ENCODER_MANIFEST, ROUTER_LAYERS, Embeddings, Encoder
from router.head import Component, Head, empirical_cdf, fit_knn, fit_ridge
from router.lexical import fit_lexical

DEFAULT_SHARES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


@dataclass(frozen=True, slots=True)
class TrainConfig:
    strong: str = "gpt-4-1106-preview"
    weak: str = "mixtral-8x7b-instruct-v0.1"
    max_tokens: int = 32
    layers: int = ROUTER_LAYERS  # the encoder variant's depth (router/encoder.py)
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
class PairFile:
    """An extra training file whose rows are scored with their own strong/weak pair."""

    path: Path
    strong: str
    weak: str

    @classmethod
    def parse(cls, triples: Sequence[Sequence[str]]) -> list[PairFile]:
        """`--pair-data FILE STRONG WEAK` values (`llmgw router train`) as PairFiles."""
        return [cls(Path(f), strong, weak) for f, strong, weak in triples]


@dataclass(frozen=True, slots=True)
class TrainingSet:
    """Primary rows first (`primary` of them), then the extra rows; scores are each row's own pair."""

    rows: tuple[Row, ...]
    texts: tuple[str, ...]
    embeddings: Embeddings
    strong_score: FloatArray
    weak_score: FloatArray
    primary: int
    dropped: dict[str, int] = field(default_factory=dict)

    @property
    def gain(self) -> FloatArray:
        out: FloatArray = self.strong_score - self.weak_score
        return out


def _prompt_key(prompt: str) -> bytes:
    return hashlib.blake2b(prompt.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def select_rows(
    rows: Sequence[Row],
    strong: str,
    weak: str,
    exclude: Sequence[Row] = (),
    seen: set[bytes] | None = None,
) -> tuple[tuple[Row, ...], dict[str, int]]:
    """Rows with both models, first occurrence of each prompt, none whose prompt is in `exclude`.

    `seen` carries the prompts kept from earlier files, so a prompt repeated across files counts once.
    """
    paired, missing = rows_with_models(rows, (strong, weak))
    banned = {_prompt_key(r.prompt) for r in exclude}
    seen = set() if seen is None else seen
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
    extra: Sequence[tuple[Sequence[Row], str, str]] = (),
) -> TrainingSet:
    """`rows` scored with cfg's pair; `extra` = (rows, strong, weak) groups, always in training.

    A prompt present in several files keeps its first occurrence, primary files first.
    """
    seen: set[bytes] = set()
    kept, dropped = select_rows(rows, cfg.strong, cfg.weak, exclude, seen)
    if len(kept) < 2 * cfg.folds:
        raise ValueError(f"need at least {2 * cfg.folds} usable rows to train, got {len(kept)} ({dropped})")
    groups = [(kept, cfg.strong, cfg.weak)]
    for extra_rows, strong, weak in extra:
        more, more_dropped = select_rows(extra_rows, strong, weak, exclude, seen)
        if not more:
            # Most likely a misspelt model name: say so instead of training on the primary rows alone.
            raise ValueError(f"no usable extra row for the pair {strong!r}/{weak!r} ({more_dropped})")
        groups.append((more, strong, weak))
        dropped = {k: dropped[k] + more_dropped[k] for k in dropped}
    pairs = [pair_outcomes(group, strong, weak) for group, strong, weak in groups]
    all_rows = tuple(r for group, _, _ in groups for r in group)
    texts = tuple(row_texts(all_rows))
    emb = embed_texts(encoder, texts, cfg.max_tokens, cache_dir=cache_dir, progress=progress)
    return TrainingSet(
        rows=all_rows,
        texts=texts,
        embeddings=emb,
        strong_score=np.concatenate([p.strong_score for p in pairs]),
        weak_score=np.concatenate([p.weak_score for p in pairs]),
        primary=len(kept),
        dropped=dropped,
    )


def load_training_set(
    data: Sequence[str | Path],
    cfg: TrainConfig,
    encoder: Encoder,
    exclude: Sequence[str | Path] = (),
    pair_data: Sequence[PairFile] = (),
    cache_dir: Path | None = DEFAULT_CACHE_DIR,
    progress: bool = False,
) -> TrainingSet:
    """`prepare` from file paths: the primary files, the `--exclude` files and the `--pair-data` files."""
    excluded = load_rows(list(exclude)) if exclude else ()
    extra = [(load_rows(f.path), f.strong, f.weak) for f in pair_data]
    return prepare(
        load_rows(list(data)), cfg, encoder, excluded, cache_dir=cache_dir, progress=progress, extra=extra
    )


def fit_components(ts: TrainingSet, idx: np.ndarray, cfg: TrainConfig) -> list[Component]:
    emb, gain = ts.embeddings[idx], ts.gain[idx]
    return [
        fit_knn(emb, gain, cfg.ks, cfg.rank),
        fit_ridge(emb, gain, cfg.alpha),
        fit_lexical([ts.texts[i] for i in idx], gain, cfg.lexical_alpha),
    ]


def component_weights(cfg: TrainConfig) -> tuple[float, float, float]:
    return (cfg.knn_weight, cfg.linear_weight, cfg.lexical_weight)


def oof_predictions(
    ts: TrainingSet, cfg: TrainConfig, group_by_task: bool
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Out-of-fold predictions of the primary rows, (primary, components), and each fold's test rows.

    Extra rows (other pairs, other tasks) train every fold and are never tested: the folds, and so the
    CV figures, are those of the primary data alone.
    """
    preds = np.zeros((ts.primary, len(component_weights(cfg))), dtype=np.float64)
    tests: list[np.ndarray] = []
    extra_idx = np.arange(ts.primary, len(ts.rows), dtype=np.int64)
    folds = kfold_indices(ts.rows[: ts.primary], cfg.folds, group_by_task=group_by_task)
    for fold_train, test_idx in folds:
        if len(test_idx) == 0 or len(fold_train) == 0:
            continue
        train_idx = np.concatenate([fold_train, extra_idx])
        comps = fit_components(ts, train_idx, cfg)
        test_texts = [ts.texts[i] for i in test_idx]
        for j, comp in enumerate(comps):
            preds[test_idx, j] = comp.predict(ts.embeddings[test_idx], test_texts)
        tests.append(test_idx)
    return preds, tests


def combine_folds(preds: np.ndarray, test_sets: list[np.ndarray], cfg: TrainConfig) -> np.ndarray:
    """Standardize within each fold (a fold's model has its own offset), then weight and sum."""
    raw = np.zeros(preds.shape[0], dtype=np.float64)
    for idx in test_sets:
        block = preds[idx]
        z = (block - block.mean(axis=0)) / np.maximum(block.std(axis=0), 1e-12)
        raw[idx] = z @ np.asarray(component_weights(cfg))
    return raw


def _fold_apgr(
    ts: TrainingSet, raw: np.ndarray, test_sets: list[np.ndarray], cfg: TrainConfig
) -> list[float]:
    out = []
    for idx in test_sets:
        value = apgr(routing_curve(raw[idx], ts.strong_score[idx], ts.weak_score[idx]))
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
    preds, tests = oof_predictions(ts, cfg, group_by_task=False)
    centers = preds.mean(axis=0)
    scales = np.maximum(preds.std(axis=0), 1e-12)
    raw_oof = ((preds - centers) / scales) @ np.asarray(component_weights(cfg))
    cdf_raw, cdf_share = empirical_cdf(raw_oof)
    cv: dict[str, Any] = {"id": _summary(_fold_apgr(ts, combine_folds(preds, tests, cfg), tests, cfg))}
    if len({r.task for r in ts.rows[: ts.primary]}) >= cfg.folds:
        tpreds, ttests = oof_predictions(ts, cfg, group_by_task=True)
        cv["task"] = _summary(_fold_apgr(ts, combine_folds(tpreds, ttests, cfg), ttests, cfg))
    head = Head(
        components=tuple(fit_components(ts, np.arange(len(ts.rows)), cfg)),
        centers=tuple(float(c) for c in centers),
        scales=tuple(float(s) for s in scales),
        weights=component_weights(cfg),
        cdf_raw=cdf_raw,
        cdf_share=cdf_share,
    )
    return head, cv


def encoder_fine_tuning(enc: Encoder) -> dict[str, Any] | None:
    """The delta the encoder's variant was fine-tuned with (encoder.json, recipe 4), if any."""
    try:
        raw = json.loads((enc.path / ENCODER_MANIFEST).read_text())
        delta = raw["variants"][str(enc.identity.layers)].get("delta")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return delta if isinstance(delta, dict) else None


def cv_caveat(
    delta: dict[str, Any] | None, files: Sequence[str | Path], pair_files: Sequence[str | Path] = ()
) -> str | None:
    """Why the CV figures are optimistic, when the encoder was fine-tuned on a training file.

    The honest figures a delta carries (measured by fine-tuning inside each fold, doc 008) name the
    `--pair-data` files their heads trained on (`cv.pair_data`, none when absent); when those differ
    from this head's `pair_files`, the note says the figures describe another recipe."""
    if delta is None:
        return None
    tuned_on = {d.get("sha256") for d in delta.get("data") or [] if isinstance(d, dict)}
    shared = [Path(p).name for p in [*files, *pair_files] if sha256_file(Path(p)) in tuned_on]
    if not shared:
        return None
    honest = delta.get("cv") or {}
    measured_pairs = (honest.get("pair_data") or []) if isinstance(honest, dict) else []
    same_pairs = {d.get("sha256") for d in measured_pairs if isinstance(d, dict)} == {
        sha256_file(Path(p)) for p in pair_files
    }
    if same_pairs:
        recipe = "this recipe"
    elif measured_pairs:
        recipe = "the same recipe with other --pair-data rows"
    else:
        recipe = "the same recipe without the --pair-data rows"
    figures = (
        f"; measured there for {recipe}: id-CV {honest['id']:.4f}, task-CV {honest['task']:.4f}"
        if isinstance(honest, dict) and {"id", "task"} <= honest.keys()
        else ""
    )
    return (
        f"the encoder was fine-tuned on {', '.join(shared)} (delta {delta.get('file')}), so these CV "
        "folds' test rows were seen by the encoder and the CV APGR is optimistic; the honest figures "
        f"come from fine-tuning inside each fold (docs/design/008{figures})"
    )


def _file_entry(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    return {"path": str(p.resolve()), "name": p.name, "sha256": sha256_file(p)}


def train(
    data: Sequence[str | Path],
    out: str | Path,
    cfg: TrainConfig,
    exclude: Sequence[str | Path] = (),
    encoder: Encoder | None = None,
    cache_dir: Path | None = DEFAULT_CACHE_DIR,
    progress: bool = False,
    pair_data: Sequence[PairFile] = (),
) -> tuple[Path, dict[str, Any]]:
    enc = encoder or Encoder.load(layers=cfg.layers)
    ts = load_training_set(data, cfg, enc, exclude, pair_data, cache_dir=cache_dir, progress=progress)
    head, cv = fit_head(ts, cfg)
    extra_counts = Counter(ts.rows[i].task for i in range(ts.primary, len(ts.rows)))
    delta = encoder_fine_tuning(enc)
    training = {
        "files": [_file_entry(p) for p in data],
        "pair_files": [{**_file_entry(f.path), "strong": f.strong, "weak": f.weak} for f in pair_data],
        "exclude": [{"name": Path(p).name, "sha256": sha256_file(Path(p))} for p in exclude],
        "strong": cfg.strong,
        "weak": cfg.weak,
        "target": "gain = strong score - weak score (each row's own pair)",
        "rows_used": len(ts.rows),
        "rows_primary": ts.primary,
        "rows_extra_by_task": dict(sorted(extra_counts.items())),
        "tasks": len({r.task for r in ts.rows}),
        "dropped": ts.dropped,
        "hyper_parameters": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(cfg).items()},
        "cv": cv,
        "encoder_delta": delta,
        "cv_caveat": cv_caveat(delta, data, [f.path for f in pair_data]),
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
