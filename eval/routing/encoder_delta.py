"""A fine-tuned encoder as a small committed file: low-rank weight deltas over the pip-installed MiniLM.

The router's encoder layers are fine-tuned on the gain target (eval/routing/finetune.py). The fine-tuned
weights themselves (10.6 MB at fp16 for three layers) do not belong in git, and the pip package only
carries the base model. What is committed is the difference, compressed:

- every 2-D weight of a transformer layer: the rank-`rank` truncated SVD of (tuned - base), stored as
  two float16 factors `a` (out x rank, singular values folded in) and `b` (rank x in);
- every 1-D parameter (biases, LayerNorm): the full difference, float32 (a few KB);
- the embedding tables are frozen while fine-tuning, so they have no delta.

`make router-encoder` (eval/routing/export_encoder.py) adds the delta to the base weights of the router's
variant before exporting it, and records the delta's sha256 in `encoder.json`. The file names the base
weights' sha256 and the depth it was trained for; applying it to anything else is refused.

Format: one `.npz` with arrays `<param>:a`, `<param>:b` (matrices) and `<param>:d` (vectors), where
<param> is a BertModel state-dict name, plus `meta` (a JSON string: base sha256, layers, rank, and how
it was trained).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[Any]
META_KEY = "meta"
# The committed delta `make router-encoder` merges into the router's 3-layer variant (encoder recipe 4).
DEFAULT_DELTA = Path(__file__).resolve().parent / "deltas" / "minilm-l3-gain.npz"


class DeltaError(ValueError):
    """A delta file that cannot be applied: unreadable, for other weights, or naming unknown params."""


@dataclass(frozen=True, slots=True)
class EncoderDelta:
    arrays: Mapping[str, Array]  # "<param>:a" / "<param>:b" / "<param>:d"
    meta: Mapping[str, Any]  # base_weights_sha256, layers, rank, training provenance

    @property
    def layers(self) -> int:
        return int(self.meta["layers"])

    def dense(self) -> dict[str, Array]:
        """param -> float32 delta, matrices re-multiplied from their factors."""
        out: dict[str, Array] = {}
        for key, value in self.arrays.items():
            param, _, part = key.rpartition(":")
            if part == "d":
                out[param] = value.astype(np.float32)
            elif part == "a":
                b = self.arrays[f"{param}:b"]
                out[param] = value.astype(np.float32) @ b.astype(np.float32)
        return out


def compress(
    base: Mapping[str, Array], tuned: Mapping[str, Array], rank: int, meta: Mapping[str, Any]
) -> EncoderDelta:
    """The delta from `base` to `tuned` (same param names, float32 numpy), matrices truncated to `rank`.

    Parameters equal in both (the frozen embeddings) are left out.
    """
    if rank < 1:
        raise DeltaError(f"rank must be >= 1, got {rank}")
    arrays: dict[str, Array] = {}
    for name, tuned_value in tuned.items():
        if name not in base:
            raise DeltaError(f"tuned parameter {name!r} has no base weight")
        diff = np.asarray(tuned_value, dtype=np.float64) - np.asarray(base[name], dtype=np.float64)
        if not diff.any():
            continue
        if diff.ndim == 2:
            r = min(rank, *diff.shape)
            u, s, vt = np.linalg.svd(diff, full_matrices=False)
            arrays[f"{name}:a"] = (u[:, :r] * s[:r]).astype(np.float16)
            arrays[f"{name}:b"] = vt[:r].astype(np.float16)
        else:
            arrays[f"{name}:d"] = diff.astype(np.float32)
    return EncoderDelta(arrays=arrays, meta={**meta, "rank": rank})


def apply_to(state: Mapping[str, Array], delta: EncoderDelta) -> dict[str, Array]:
    """`state` (param -> numpy) plus the delta, as new float32 arrays; every delta param must exist."""
    out = {name: np.asarray(v, dtype=np.float32) for name, v in state.items()}
    for name, diff in delta.dense().items():
        if name not in out:
            raise DeltaError(f"delta names {name!r}, which the model does not have")
        if out[name].shape != diff.shape:
            raise DeltaError(f"delta for {name!r} has shape {diff.shape}, the model {out[name].shape}")
        out[name] = out[name] + diff
    return out


def apply_to_module(module: Any, delta: EncoderDelta) -> None:
    """Add the delta to a torch module's parameters in place (a BertModel, names as in its state dict)."""
    import torch

    state = {k: v.detach().cpu().numpy() for k, v in module.state_dict().items()}
    merged = apply_to(state, delta)
    module.load_state_dict({k: torch.from_numpy(v) for k, v in merged.items()})


def save(delta: EncoderDelta, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = np.array(json.dumps(dict(delta.meta), sort_keys=True))
    arrays: dict[str, Any] = {META_KEY: meta, **dict(sorted(delta.arrays.items()))}
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


def load(path: Path, *, base_sha256: str | None = None, layers: int | None = None) -> EncoderDelta:
    """Read a delta file; with `base_sha256` / `layers`, refuse one made for other weights or depth."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files if k != META_KEY}
            meta = json.loads(str(npz[META_KEY]))
    except (OSError, ValueError, KeyError) as exc:
        raise DeltaError(f"{path}: not a readable encoder delta ({exc})") from exc
    if not isinstance(meta, dict) or "base_weights_sha256" not in meta or "layers" not in meta:
        raise DeltaError(f"{path}: meta lacks base_weights_sha256 or layers")
    for key in arrays:
        param, sep, part = key.rpartition(":")
        if not sep or part not in ("a", "b", "d") or (part == "a" and f"{param}:b" not in arrays):
            raise DeltaError(f"{path}: unexpected array {key!r}")
    if base_sha256 is not None and meta["base_weights_sha256"] != base_sha256:
        raise DeltaError(
            f"{path}: made for base weights {meta['base_weights_sha256'][:12]}…, "
            f"the installed ones are {base_sha256[:12]}…; rebuild it (python -m eval.routing.finetune)"
        )
    if layers is not None and int(meta["layers"]) != layers:
        raise DeltaError(f"{path}: made for {meta['layers']} layers, asked to apply to {layers}")
    return EncoderDelta(arrays=arrays, meta=meta)
