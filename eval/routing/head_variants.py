"""Head variants measured on honest fine-tuned embeddings (doc 008, "The head's hyper-parameters").

`finetune_cv --save-folds DIR` keeps every fold's fine-tuned embeddings. This tool refits the head on
them, inside each fold exactly as `finetune_cv` does, for many variants of the head recipe: component
weights (kNN, ridge, lexical, the network's own head), ridge alpha, the kNN's PCA rank and its
neighbourhood sizes. A variant costs seconds here against 40 minutes of fine-tuning per run, and the
figures are as honest as `finetune_cv`'s: no fold's encoder saw its test rows. The shipped recipe
reproduces `finetune_cv`'s `ft_combo` figures exactly (unit test).

Per variant: id-CV and task-CV APGR of the primary rows, and with `--pair-data` (the same files and
pairs the saved run used) leave-one-pair-file-out APGR: the head fitted on the primary rows and the
other pair files, on the all-rows fine-tune's embeddings (trained on the primary rows only, so a
held-out file is unseen by the encoder too), scored against `--strong` and each `--weak-models` model.

    python -m eval.routing.head_variants --folds DIR --data mmlu_train.jsonl --exclude mmlu_dev.jsonl \
        --pair-data routerbench_arc_challenge_train.jsonl gpt-4-1106-preview mixtral-8x7b-chat ...

Variants: `--weights` is a grid (every listed weight vector, at the shipped alpha, rank and sizes); each
`--alphas`, `--ranks` and `--ks` value is tried alone at the shipped weights.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eval.routing.cli_args import add_training_data
from eval.routing.data import FloatArray
from eval.routing.finetune import base_encoder
from eval.routing.metrics import apgr, routing_curve
from eval.routing.train import PairFile, TrainConfig, TrainingSet, component_weights, load_training_set
from router.head import fit_knn, fit_ridge
from router.lexical import fit_lexical

WEAK_MODELS = ("mixtral-8x7b-chat", "llama-2-70b-chat", "Yi-34B-Chat", "gpt-3.5-turbo-1106")


@dataclass(frozen=True, slots=True)
class Variant:
    weights: tuple[float, float, float, float]  # kNN, ridge, lexical, the fine-tuned network's head
    alpha: float
    rank: int
    ks: tuple[int, ...]

    @classmethod
    def shipped(cls, cfg: TrainConfig, head_weight: float = 0.0) -> Variant:
        return cls((*component_weights(cfg), head_weight), cfg.alpha, cfg.rank, cfg.ks)

    def label(self) -> str:
        w = "/".join(f"{x:g}" for x in self.weights)
        ks = ",".join(str(k) for k in self.ks)
        return f"w {w}  alpha {self.alpha:g}  rank {self.rank}  ks {ks}"


@dataclass(frozen=True, slots=True)
class Parts:
    """One test set's standardized component scores, keyed by what they depend on."""

    knn: dict[tuple[int, tuple[int, ...]], FloatArray]  # by (PCA rank, neighbourhood sizes)
    ridge: dict[float, FloatArray]  # by alpha
    lexical: FloatArray
    head: FloatArray

    def score(self, v: Variant) -> FloatArray:
        w = v.weights
        out: FloatArray = (
            w[0] * self.knn[(v.rank, v.ks)]
            + w[1] * self.ridge[v.alpha]
            + w[2] * self.lexical
            + w[3] * self.head
        )
        return out


def _z(values: FloatArray) -> FloatArray:
    out: FloatArray = (values - values.mean()) / max(float(values.std()), 1e-12)
    return out


def fit_parts(
    emb: FloatArray,
    head: FloatArray,
    ts: TrainingSet,
    fit_idx: np.ndarray,
    test_idx: np.ndarray,
    variants: Sequence[Variant],
    cfg: TrainConfig,
) -> Parts:
    """Every component the variants need, fitted on `fit_idx`, scored and standardized on `test_idx`."""
    texts = [ts.texts[i] for i in test_idx]
    gain = ts.gain
    lexical = fit_lexical([ts.texts[i] for i in fit_idx], gain[fit_idx], cfg.lexical_alpha)
    return Parts(
        knn={
            (rank, ks): _z(fit_knn(emb[fit_idx], gain[fit_idx], ks, rank).predict(emb[test_idx]))
            for rank, ks in sorted({(v.rank, v.ks) for v in variants})
        },
        ridge={
            alpha: _z(fit_ridge(emb[fit_idx], gain[fit_idx], alpha).predict(emb[test_idx]))
            for alpha in sorted({v.alpha for v in variants})
        },
        lexical=_z(lexical.predict(emb[test_idx], texts)),
        head=_z(head[test_idx]),
    )


def cv_parts(
    ts: TrainingSet, folds: Path, kind: str, variants: Sequence[Variant], cfg: TrainConfig
) -> list[tuple[Parts, np.ndarray]]:
    """(parts, test rows) per saved fold of `kind` ("id" or "task"); extra rows train every fold."""
    extra_idx = np.arange(ts.primary, len(ts.rows), dtype=np.int64)
    out = []
    for path in sorted(folds.glob(f"{kind}-fold*.npz"), key=lambda p: int(p.stem.rsplit("fold", 1)[1])):
        with np.load(path) as f:
            emb, head, train_idx, test_idx = f["embeddings"], f["head"], f["train_idx"], f["test_idx"]
        if emb.shape[0] != len(ts.rows):
            raise SystemExit(f"{path}: {emb.shape[0]} rows, the data gives {len(ts.rows)}: not the same run")
        fit_idx = np.concatenate([train_idx, extra_idx])
        out.append((fit_parts(emb, head, ts, fit_idx, test_idx, variants, cfg), test_idx))
    if not out:
        raise SystemExit(f"{folds}: no {kind}-fold*.npz (finetune_cv --save-folds writes them)")
    return out


def cv_apgr(ts: TrainingSet, parts: Sequence[tuple[Parts, np.ndarray]], v: Variant) -> list[float]:
    return [float(apgr(routing_curve(p.score(v), ts.strong_score[i], ts.weak_score[i]))) for p, i in parts]


@dataclass(frozen=True, slots=True)
class HeldOutFile:
    name: str
    parts: Parts
    # Per weak model: which of the file's rows it answered, and the strong / weak scores of those rows.
    pairs: tuple[tuple[np.ndarray, FloatArray, FloatArray], ...]


def leave_file_out(
    ts: TrainingSet,
    all_npz: Path,
    pairs: Sequence[PairFile],
    strong: str,
    weak_models: Sequence[str],
    variants: Sequence[Variant],
    cfg: TrainConfig,
) -> list[HeldOutFile]:
    if not all_npz.is_file():
        raise SystemExit(
            f"{all_npz}: missing (finetune_cv --save-folds writes it when run with --dev or --transfer)"
        )
    with np.load(all_npz) as f:
        emb, head, sizes = f["embeddings"], f["head"], f["sizes"]
    if int(sizes[0]) != len(ts.rows):
        raise SystemExit(
            f"{all_npz}: {int(sizes[0])} training rows, the data gives {len(ts.rows)}: not the same run"
        )
    # prepare() keeps each --pair-data file's rows together, in order, after the primary rows.
    file_of = np.repeat(np.arange(-1, len(ts.extra_sizes)), [ts.primary, *ts.extra_sizes])
    out = []
    for j, pair in enumerate(pairs):
        test_idx = np.flatnonzero(file_of == j)
        fit_idx = np.flatnonzero(file_of != j)  # the primary rows (-1) and the other files
        parts = fit_parts(emb, head, ts, fit_idx, test_idx, variants, cfg)
        rows = [ts.rows[i] for i in test_idx]
        per_weak = []
        for weak in weak_models:
            keep = np.array([strong in r.outcomes and weak in r.outcomes for r in rows])
            per_weak.append(
                (
                    keep,
                    np.array([r.outcomes[strong].score for r, k in zip(rows, keep, strict=True) if k]),
                    np.array([r.outcomes[weak].score for r, k in zip(rows, keep, strict=True) if k]),
                )
            )
        out.append(HeldOutFile(pair.path.name, parts, tuple(per_weak)))
    return out


def file_apgr(held: Sequence[HeldOutFile], v: Variant) -> dict[str, list[float]]:
    out = {}
    for h in held:
        s = h.parts.score(v)
        out[h.name] = [float(apgr(routing_curve(s[keep], st, wk))) for keep, st, wk in h.pairs]
    return out


def variants_from(
    cfg: TrainConfig,
    weights: Sequence[tuple[float, ...]],
    alphas: Sequence[float],
    ranks: Sequence[int],
    ks_sets: Sequence[tuple[int, ...]],
) -> list[Variant]:
    base = Variant.shipped(cfg)
    out = [base]
    out += [Variant((w[0], w[1], w[2], w[3]), base.alpha, base.rank, base.ks) for w in weights]
    out += [Variant(base.weights, a, base.rank, base.ks) for a in alphas]
    out += [Variant(base.weights, base.alpha, r, base.ks) for r in ranks]
    out += [Variant(base.weights, base.alpha, base.rank, ks) for ks in ks_sets]
    return list(dict.fromkeys(out))


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(","))


def _mean(values: Sequence[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return round(float(np.mean(kept)), 4) if kept else math.nan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--folds", required=True, type=Path, help="the directory finetune_cv --save-folds wrote"
    )
    add_training_data(
        parser, "the saved run's --pair-data, in the same order (each is also held out in turn)"
    )
    parser.add_argument("--strong", default="gpt-4-1106-preview", help="strong model of the held-out files")
    parser.add_argument("--weak-models", nargs="+", default=list(WEAK_MODELS))
    parser.add_argument(
        "--weights",
        nargs="*",
        default=[
            ",".join(map(str, w))
            for w in itertools.product((1, 2, 3), (0.5, 1, 2, 3), (0.5, 1, 1.5, 2), (0, 0.5, 1))
        ],
        metavar="K,R,L,H",
        help="weight vectors (kNN, ridge, lexical, network head); default: the grid of doc 008",
    )
    parser.add_argument("--alphas", nargs="*", type=float, default=[30.0, 300.0, 1000.0])
    parser.add_argument("--ranks", nargs="*", type=int, default=[64, 128, 384])
    parser.add_argument(
        "--ks",
        nargs="*",
        default=["25,50,100,200,400,800", "50,100,200,400,800,1600", "100,200,400,800,1600"],
    )
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--out", type=Path, help="write every variant's figures here as JSON")
    parser.add_argument("--top", type=int, default=20, help="table rows to print")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    cfg = TrainConfig(layers=args.layers)
    weights = [_floats(w) for w in args.weights]
    if any(len(w) != 4 for w in weights):
        raise SystemExit("--weights: each vector is K,R,L,H (four numbers)")
    ks_sets = [tuple(int(k) for k in _floats(s)) for s in args.ks]
    variants = variants_from(cfg, weights, args.alphas, args.ranks, ks_sets)
    pairs = PairFile.parse(args.pair_data)
    ts = load_training_set(args.data, cfg, base_encoder(args.layers), args.exclude, pairs)
    cv = {kind: cv_parts(ts, args.folds, kind, variants, cfg) for kind in ("id", "task")}
    held = (
        leave_file_out(ts, args.folds / "all.npz", pairs, args.strong, args.weak_models, variants, cfg)
        if pairs
        else []
    )
    results: list[dict[str, Any]] = []
    for v in variants:
        ids, tasks = _mean(cv_apgr(ts, cv["id"], v)), _mean(cv_apgr(ts, cv["task"], v))
        files = file_apgr(held, v)
        results.append(
            {
                "variant": v.label(),
                "id_cv": ids,
                "task_cv": tasks,
                "mean_cv": round((ids + tasks) / 2, 4),
                "leave_file_out": _mean([x for per in files.values() for x in per]) if files else None,
                "by_file": {k: [round(x, 4) for x in per] for k, per in files.items()},
            }
        )
    shipped = results[0]
    ranked = sorted(results, key=lambda r: -r["mean_cv"])
    print(f"{len(results)} variants; weak models {', '.join(args.weak_models)}", file=sys.stderr)
    print(f"{'id-CV':>7} {'task-CV':>7} {'mean':>7} {'LFO':>7}  variant")
    top = ranked[: args.top]
    for r in top if shipped in top else [shipped, *top]:
        lfo = "-" if r["leave_file_out"] is None else f"{r['leave_file_out']:.4f}"
        mark = "  (shipped)" if r is shipped else ""
        print(f"{r['id_cv']:7.4f} {r['task_cv']:7.4f} {r['mean_cv']:7.4f} {lfo:>7}  {r['variant']}{mark}")
    if args.out:
        args.out.write_text(json.dumps(ranked, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
