"""Fine-tuning the router's encoder on the gain target, and building the committed delta (doc 008).

The shipped router embeds with the first 3 MiniLM layers. Here those layers plus a linear head are
fine-tuned to predict the gain g = s - w (MSE; AdamW, linear warm-up then decay; the usual BERT
defaults, no search), on the serving input (the last 32 word pieces of the last user turn). The word,
position and type embedding tables stay frozen: they are 11 MB of the model, freezing them keeps the
delta small, and CV did not move (doc 008: 0.6999 / 0.6570 frozen and rank 32, 0.7004 / 0.6570 with
everything trained and kept whole). After training, each weight matrix's
change is cut to rank `delta_rank` (eval/routing/encoder_delta.py): that compressed change is the delta.

    python -m eval.routing.finetune --data mmlu_train.jsonl --exclude mmlu_dev.jsonl [--out FILE.npz]

builds the delta from every training row (deterministic on one machine and thread count; ~4 minutes on
two cores; default output: the committed file). The committed file also records the cross-validated
figures of fine-tuning inside each fold, which this command does not measure: they came from
`finetune_cv`, retired in issue 23 (last version at commit 261cb64; results in doc 008). `make
router-encoder` merges the committed delta into the router's ONNX variant; when the base weights change
it refuses a stale delta, and this command rebuilds it. Needs the `router-build` extra (torch,
transformers, the weights package).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eval.routing import encoder_delta
from eval.routing.data import FloatArray, load_rows
from eval.routing.embed_cache import DEFAULT_CACHE_DIR
from eval.routing.export_encoder import HIDDEN, RECIPE_VERSION, export, source_weights
from eval.routing.train import TrainConfig, prepare
from router.artifact import sha256_file
from router.encoder import ROUTER_LAYERS, Encoder

# ~1.4 MB of float16 factors for three layers (the whole layers: 10.6 MB).
DEFAULT_RANK = 32


@dataclass(frozen=True, slots=True)
class FineTuneConfig:
    layers: int = ROUTER_LAYERS
    epochs: int = 2
    lr: float = 3e-5
    head_lr: float = 1e-3
    batch: int = 32
    warmup: float = 0.1
    weight_decay: float = 0.01
    seed: int = 0
    threads: int = 2
    delta_rank: int = DEFAULT_RANK

    def __post_init__(self) -> None:
        if self.delta_rank < 1:
            raise ValueError(f"delta_rank must be >= 1, got {self.delta_rank}")


def base_encoder(layers: int = ROUTER_LAYERS, cache_dir: Path = DEFAULT_CACHE_DIR) -> Encoder:
    """The serving encoder WITHOUT the committed delta, exported once into `cache_dir`.

    Fine-tuning starts from the base weights, so it must not embed with the shipped export, which is
    already fine-tuned on every training row.
    """
    out = cache_dir.parent / f"encoder-base-recipe{RECIPE_VERSION}"
    if not out.is_dir():
        export(out, delta_path=None)
    return Encoder.load(out, layers=layers)


def _regressor(layers: int) -> Any:
    """MiniLM's first `layers` layers, mean pooling + L2 norm (the serving graph's), then a linear head."""
    import torch
    from transformers import AutoModel

    source, _ = source_weights()

    class Regressor(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            bert = AutoModel.from_pretrained(str(source), attn_implementation="eager")
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


def _numpy_state(module: Any) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def _train(net: Any, token_ids: Sequence[Sequence[int]], target: FloatArray, cfg: FineTuneConfig) -> None:
    """Fine-tune `net` in place on every row; `cfg.seed` also fixes the data order."""
    import torch

    rng = np.random.default_rng(cfg.seed)
    train_idx = np.arange(len(token_ids))
    # The word, position and type tables stay frozen: they have no delta (encoder_delta.py).
    for p in net.bert.embeddings.parameters():
        p.requires_grad_(False)
    net.train()
    optimizer = torch.optim.AdamW(
        [
            {"params": [p for p in net.bert.parameters() if p.requires_grad], "lr": cfg.lr},
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


def fine_tune(
    token_ids: Sequence[Sequence[int]],
    target: FloatArray,
    cfg: FineTuneConfig,
    meta: dict[str, Any] | None = None,
) -> encoder_delta.EncoderDelta:
    """Fit on every row, then compress the change to `cfg.delta_rank`."""
    import torch

    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)  # the head's initialization
    net = _regressor(cfg.layers)
    base = _numpy_state(net.bert)
    _train(net, token_ids, target, cfg)
    info = {"layers": cfg.layers, "fine_tune": asdict(cfg), **(meta or {})}
    return encoder_delta.compress(base, _numpy_state(net.bert), cfg.delta_rank, info)


def delta_meta(cfg: TrainConfig, data: Sequence[Path], exclude: Sequence[Path], rows: int) -> dict[str, Any]:
    """What a delta file records of its making (the fine-tune settings are added by `fine_tune`)."""
    import torch

    return {
        "base_weights_sha256": source_weights()[1],
        "max_tokens": cfg.max_tokens,
        "target": f"gain {cfg.strong} - {cfg.weak}",
        "data": [{"file": p.name, "sha256": sha256_file(p)} for p in data],
        "exclude": [{"file": p.name, "sha256": sha256_file(p)} for p in exclude],
        "rows": rows,
        "torch": torch.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="fine-tune the router's encoder and write its delta")
    parser.add_argument("--data", nargs="+", required=True, type=Path)
    parser.add_argument("--exclude", nargs="*", default=[], type=Path)
    parser.add_argument("--out", type=Path, default=encoder_delta.DEFAULT_DELTA)
    parser.add_argument("--rank", type=int, default=DEFAULT_RANK)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cfg = TrainConfig()
    if args.rank < 1:
        raise SystemExit("--rank must be >= 1: the delta is what gets committed")
    ft = FineTuneConfig(layers=cfg.layers, delta_rank=args.rank)
    encoder = base_encoder(cfg.layers)
    excluded = load_rows(list(args.exclude)) if args.exclude else ()
    ts = prepare(load_rows(list(args.data)), cfg, encoder, excluded)
    token_ids = [encoder.token_ids(t, cfg.max_tokens) for t in ts.texts[: ts.primary]]
    meta = delta_meta(cfg, args.data, args.exclude, ts.primary)
    delta = fine_tune(token_ids, ts.gain[: ts.primary], ft, meta)
    encoder_delta.save(delta, args.out)
    size = args.out.stat().st_size
    print(
        f"encoder delta ({ts.primary} rows, rank {ft.delta_rank}) written to {args.out}, {size} bytes",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
