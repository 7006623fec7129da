"""The multi-model success predictor: prompt embedding -> P(model answers correctly), for every model
of its training data. Pure numpy at inference; the only I/O is `load_success_model`.

Model (item-response / matrix-factorisation style, as RouteLLM's MF router and RouterArena's
MIRT-BERT): a prompt x gets a low-dimensional latent vector from its MiniLM embedding, every model m an
ability and a loading vector over the same latent axes, and

    z(x)          = (emb(x) - mean) @ basis                        shared by all models, (k,)
    logit(x, m)   = ability_m + loadings_m . z(x)
    P(m right | x) = sigmoid(logit(x, m))

`basis` is learned jointly with the per-model parameters (eval/routing/success_train.py) from every
(prompt, model) outcome of every training file, so a model seen on one task borrows the prompt axes
learnt from all the others: that sharing is what lets the predictor say something about a task type
its own rows never covered. Per request this is one (d x k) and one (k x M) product: a few
microseconds, far below the difficulty head's kNN scan.

The artifact directory `router/artifacts/success/` holds `success.npz` (the arrays, no pickles) and
`manifest.json` (format, encoder identity incl. probe embedding, input view and token budget, the
model names in column order, the sha256 of the npz, and the training provenance). Loading validates
all of it and raises `RouterArtifactError` naming the path; the encoder itself is opened by the
gateway, which must call `check_encoder` with the live encoder's identity: a predictor trained on
another encoder's embeddings would route on noise.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from router.artifact import MANIFEST, VIEW, read_manifest, sha256_file
from router.artifact_error import RouterArtifactError
from router.encoder import EncoderIdentity, probe_cosine

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

FORMAT = "llmgw-router-success"
FORMAT_VERSION = 1
ARRAYS_FILE = "success.npz"
# Same bar as the difficulty artifact's encoder probe (router.encoder.PROBE_MIN_COSINE is checked on
# the live encoder against its own manifest; here the live probe is compared to the trained one).
PROBE_MIN_COSINE = 0.999


def default_success_dir() -> Path:
    return Path(__file__).resolve().parent / "artifacts" / "success"


def _sigmoid(x: F64) -> F64:
    # exp of a non-positive argument only: no overflow warning for large |logit|.
    e = np.exp(-np.abs(x))
    out: F64 = np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    return out


@dataclass(frozen=True, slots=True)
class SuccessModel:
    models: tuple[str, ...]
    mean: F32  # (d,) training embedding mean
    basis: F32  # (d, k) prompt embedding -> latent prompt vector
    loadings: F32  # (M, k) each model's sensitivity to each latent axis
    ability: F64  # (M,) each model's logit at the mean prompt
    manifest: Mapping[str, Any] = field(default_factory=dict)
    encoder: EncoderIdentity | None = None
    max_tokens: int = 32
    # Other names of trained models (e.g. RouterBench's `mixtral-8x7b-chat`), casefolded -> trained name.
    aliases: Mapping[str, str] = field(default_factory=dict)
    _index: Mapping[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        m, k = self.loadings.shape if self.loadings.ndim == 2 else (-1, -1)
        if (
            self.mean.ndim != 1
            or self.basis.shape != (self.mean.shape[0], k)
            or self.ability.shape != (m,)
            or len(self.models) != m
            or m < 1
        ):
            raise ValueError(
                f"success model shapes disagree: mean {self.mean.shape}, basis {self.basis.shape}, "
                f"loadings {self.loadings.shape}, ability {self.ability.shape}, {len(self.models)} names"
            )
        index = {name.casefold(): i for i, name in enumerate(self.models)}
        if len(index) != len(self.models):
            raise ValueError("success model names must be unique up to letter case")
        for alias, target in self.aliases.items():
            if target.casefold() not in index:
                raise ValueError(f"alias {alias!r} names {target!r}, which is not a trained model")
            index.setdefault(alias.casefold(), index[target.casefold()])
        object.__setattr__(self, "_index", index)

    @classmethod
    def from_arrays(
        cls,
        models: Sequence[str],
        *,
        mean: npt.ArrayLike,
        basis: npt.ArrayLike,
        loadings: npt.ArrayLike,
        ability: npt.ArrayLike,
        manifest: Mapping[str, Any] | None = None,
        encoder: EncoderIdentity | None = None,
        max_tokens: int = 32,
        aliases: Mapping[str, str] | None = None,
    ) -> SuccessModel:
        return cls(
            models=tuple(models),
            mean=np.asarray(mean, dtype=np.float32),
            basis=np.asarray(basis, dtype=np.float32),
            loadings=np.asarray(loadings, dtype=np.float32),
            ability=np.asarray(ability, dtype=np.float64),
            manifest=dict(manifest or {}),
            encoder=encoder,
            max_tokens=max_tokens,
            aliases={str(a): str(b) for a, b in (aliases or {}).items()},
        )

    @property
    def dim(self) -> int:
        return int(self.mean.shape[0])

    def index(self, name: str) -> int:
        """The column of `name` in `predict`'s output: a trained name in any letter case, or one of
        its declared aliases; KeyError if the model is unknown."""
        try:
            return self._index[name.casefold()]
        except KeyError:
            raise KeyError(f"{name!r} is not a model of this success predictor") from None

    def latent(self, emb: F32) -> F64:
        out: F64 = ((emb - self.mean) @ self.basis).astype(np.float64)
        return out

    def logits(self, emb: F32) -> F64:
        out: F64 = self.latent(emb) @ self.loadings.T.astype(np.float64) + self.ability
        return out

    def predict(self, emb: F32, texts: Sequence[str] = ()) -> F64:
        """(n, len(models)) success probabilities for (n, d) L2-normalised embeddings.

        `texts` (the request texts the embeddings came from) is part of the interface so that a
        text-reading component can join without changing callers; this recipe reads embeddings only.
        """
        if emb.ndim != 2 or emb.shape[1] != self.dim:
            raise ValueError(f"embeddings must be (n, {self.dim}), got {emb.shape}")
        return _sigmoid(self.logits(emb))

    def check_encoder(self, live: EncoderIdentity, live_probe: Sequence[float] | None = None) -> None:
        """Refuse an encoder other than the one the predictor was trained on (RouterArtifactError).

        `live` is the identity the serving encoder read from its own manifest; `live_probe`, when
        given, the probe embedding it computes now (router.encoder.PROBE_TEXT, 64 tokens)."""
        trained = self.encoder
        where = self.manifest.get("path", "success predictor")
        if trained is None:
            raise RouterArtifactError(f"{where}: records no encoder identity")
        if (live.model_sha256, live.layers, live.dim) != (trained.model_sha256, trained.layers, trained.dim):
            raise RouterArtifactError(
                f"{where}: trained on encoder {trained.describe()} ({trained.model_sha256[:12]}…), "
                f"but the gateway serves {live.describe()} ({live.model_sha256[:12]}…)"
            )
        probe = live.probe_embedding if live_probe is None else tuple(live_probe)
        cos = probe_cosine(probe, trained.probe_embedding)
        if cos < PROBE_MIN_COSINE:
            raise RouterArtifactError(
                f"{where}: the live encoder's probe embedding differs from the trained one "
                f"(cosine {cos:.4f} < {PROBE_MIN_COSINE})"
            )


ARRAY_NAMES = ("mean", "basis", "loadings", "ability")


def _fail(path: Path, what: str) -> RouterArtifactError:
    return RouterArtifactError(f"success predictor {path}: {what}")


def load_success_model(path: Path | None = None) -> SuccessModel:
    """The predictor at `path` (None = the shipped router/artifacts/success), fully validated."""
    root = Path(path) if path is not None else default_success_dir()
    manifest = read_manifest(root, FORMAT, FORMAT_VERSION, "success predictor")
    try:
        encoder = EncoderIdentity.from_json(manifest["encoder"], f"success predictor {root}: encoder")
        view = manifest["input"]["view"]
        max_tokens = int(manifest["input"]["max_tokens"])
        models = [str(m) for m in manifest["models"]]
        aliases = dict(manifest.get("aliases") or {})
        expected_sha = str(manifest["arrays"]["sha256"])
    except (KeyError, TypeError, ValueError) as exc:
        raise _fail(root, f"{MANIFEST} lacks or mistypes a required field ({exc!r})") from exc
    if view != VIEW:
        raise _fail(root, f"{MANIFEST}: input view {view!r} is not supported (need {VIEW!r})")
    if not 3 <= max_tokens <= 512:
        raise _fail(root, f"{MANIFEST}: input.max_tokens {max_tokens} is outside [3, 512]")
    arrays_path = root / ARRAYS_FILE
    if not arrays_path.is_file():
        raise _fail(root, f"{ARRAYS_FILE} is missing")
    actual_sha = sha256_file(arrays_path)
    if actual_sha != expected_sha:
        raise _fail(
            root,
            f"{ARRAYS_FILE} is corrupt or was replaced "
            f"(sha256 {actual_sha[:12]}…, manifest says {expected_sha[:12]}…)",
        )
    try:
        with np.load(arrays_path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in ARRAY_NAMES}
    except KeyError as exc:
        raise _fail(root, f"{ARRAYS_FILE} lacks an array ({exc})") from exc
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise _fail(root, f"{ARRAYS_FILE} is unreadable ({exc})") from exc
    try:
        model = SuccessModel.from_arrays(
            models,
            **arrays,
            manifest={**manifest, "path": str(root)},
            encoder=encoder,
            max_tokens=max_tokens,
            aliases=aliases,
        )
    except (ValueError, TypeError, AttributeError) as exc:
        raise _fail(root, f"{ARRAYS_FILE} does not match the manifest ({exc})") from exc
    if model.dim != encoder.dim:
        raise _fail(root, f"arrays are for {model.dim}-d embeddings, the encoder gives {encoder.dim}")
    # A non-finite weight would make every request's probabilities NaN: refuse it at load.
    if not all(np.all(np.isfinite(a)) for a in arrays.values()):
        raise _fail(root, f"{ARRAYS_FILE} holds non-finite values")
    return model


def write_success_model(
    out: str | Path, model: SuccessModel, encoder: EncoderIdentity, extra: Mapping[str, Any]
) -> Path:
    """Write success.npz then manifest.json (the manifest pins the arrays' hash, so it goes last)."""
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        root / ARRAYS_FILE,
        mean=model.mean,
        basis=model.basis,
        loadings=model.loadings,
        ability=model.ability,
    )
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "encoder": encoder.to_json(),
        "input": {"view": VIEW, "max_tokens": model.max_tokens},
        "models": list(model.models),
        "aliases": dict(model.aliases),
        "arrays": {"sha256": sha256_file(root / ARRAYS_FILE), "names": list(ARRAY_NAMES)},
        **extra,
    }
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return root
