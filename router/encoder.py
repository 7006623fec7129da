"""The router's sentence encoder at serve time: int8 ONNX MiniLM run by onnxruntime, no torch.

The model directory (built by `make router-encoder`, see eval/routing/export_encoder.py) holds
`model.onnx` (token ids + mask -> L2-normalized 384-d mean-pooled embedding), the tokenizer and
`encoder.json` (identity: source package/version, recipe version, the exported file's hash and the
embedding of PROBE_TEXT). Since recipe 3 it also holds truncated variants, `model-l<K>.onnx`: the same
weights with only the first K transformer layers, pooled the same way, each with its own hash and probe
under `variants` in `encoder.json`. The difficulty router serves the 3-layer one (better on both of its
training CVs and ~40 % cheaper; docs/design/008, "Encoder depth"); the semantic cache keeps the full
model, whose cosine is what MiniLM was trained for. It lives in `router/assets/` (gitignored: 40 MB of
derived weights, rebuilt from the pip-installed package) unless `LLMGW_ROUTER_ENCODER_DIR` points
elsewhere (e.g. a read-only path in a container image).

Input: the TAIL of the text, `max_tokens` long including [CLS]/[SEP]. Requests that carry few-shot
boilerplate (RouterBench prompts share their first 1,200-1,650 characters) differ only at the end, and
encoder cost grows with length, so the budget is what keeps a decision inside its latency target. Before
tokenizing, the text is cut to its last `max_tokens * CHARS_PER_TOKEN_BOUND` characters, which bounds
tokenizer work on a 100k-token prompt while still leaving more than `max_tokens` tokens of ordinary text.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from router.artifact_error import RouterArtifactError

ENCODER_MANIFEST = "encoder.json"
ENCODER_DIR_ENV = "LLMGW_ROUTER_ENCODER_DIR"
ENCODER_NAME = "minilm-l6-v2-int8"
# A fixed text whose embedding pins the encoder: a head stores it, loading recomputes and compares it.
PROBE_TEXT = (
    "Which of the following best explains why the sky appears blue during the day? "
    "A. Rayleigh scattering B. Reflection from the ocean C. Ozone absorption D. Mie scattering"
)
# Word pieces of English text average ~4-5 characters; 32 leaves a wide margin for long tokens.
CHARS_PER_TOKEN_BOUND = 32
# Same-recipe exports on another CPU may differ in the last float bits; a different model does not
# come anywhere near this (another all-MiniLM export with per-tensor int8 already scores ~0.95).
PROBE_MIN_COSINE = 0.99

Embeddings = npt.NDArray[np.float32]

# all-MiniLM-L6-v2 has 6 transformer layers; an identity without `layers` is the full model.
FULL_LAYERS = 6
# The depth `llmgw router train` uses unless told otherwise (docs/design/008, "Encoder depth").
ROUTER_LAYERS = 3


def variant_file(layers: int) -> str:
    """The model file of the first-`layers` variant (`model.onnx` for the full model)."""
    return "model.onnx" if layers == FULL_LAYERS else f"model-l{layers}.onnx"


def default_encoder_dir() -> Path:
    env = os.environ.get(ENCODER_DIR_ENV)
    return Path(env) if env else Path(__file__).resolve().parent / "assets" / ENCODER_NAME


@dataclass(frozen=True, slots=True)
class EncoderIdentity:
    name: str
    source_package: str
    source_version: str
    recipe_version: int
    model_sha256: str
    dim: int
    probe_embedding: tuple[float, ...]
    layers: int = FULL_LAYERS

    @classmethod
    def from_json(cls, raw: Any, where: str) -> EncoderIdentity:
        try:
            probe = tuple(float(x) for x in raw["probe_embedding"])
            identity = cls(
                name=str(raw["name"]),
                source_package=str(raw["source_package"]),
                source_version=str(raw["source_version"]),
                recipe_version=int(raw["recipe_version"]),
                model_sha256=str(raw["model_sha256"]),
                dim=int(raw["dim"]),
                probe_embedding=probe,
                layers=int(raw.get("layers", FULL_LAYERS)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise RouterArtifactError(
                f"{where}: encoder identity is incomplete or malformed ({exc!r})"
            ) from exc
        if len(probe) != identity.dim:
            raise RouterArtifactError(
                f"{where}: probe embedding has {len(probe)} values, expected {identity.dim}"
            )
        return identity

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source_package": self.source_package,
            "source_version": self.source_version,
            "recipe_version": self.recipe_version,
            "model_sha256": self.model_sha256,
            "dim": self.dim,
            "probe_embedding": list(self.probe_embedding),
            "layers": self.layers,
        }

    def describe(self) -> str:
        depth = "" if self.layers == FULL_LAYERS else f", first {self.layers} layers"
        return (
            f"{self.name} ({self.source_package}=={self.source_version}, recipe {self.recipe_version}{depth})"
        )


def probe_cosine(a: Sequence[float] | Embeddings, b: Sequence[float] | Embeddings) -> float:
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    denom = float(np.linalg.norm(x) * np.linalg.norm(y))
    return float(x @ y) / denom if denom > 0 else 0.0


class Encoder:
    """Tokenize the tail of a text and embed it. Thread-safe: onnxruntime's `run` and the tokenizer are."""

    def __init__(self, session: Any, tokenizer: Any, identity: EncoderIdentity, path: Path) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self.identity = identity
        self.path = path
        self._cls = int(tokenizer.token_to_id("[CLS]"))
        self._sep = int(tokenizer.token_to_id("[SEP]"))
        # Embeddings by token-id sequence, off unless `remember` sizes it: when the semantic cache and
        # the router embed the same ids for one request (a question shorter than both windows), the
        # second asks this instead of the model. A lock: the router and the cache call from threads.
        self._memo: OrderedDict[bytes, Embeddings] = OrderedDict()
        self._memo_size = 0
        self._memo_lock = threading.Lock()

    def remember(self, entries: int) -> None:
        """Keep the embeddings of the last `entries` distinct id sequences (0: none)."""
        with self._memo_lock:
            self._memo_size = entries
            while len(self._memo) > entries:
                self._memo.popitem(last=False)

    def ids_within(self, text: str, max_tokens: int) -> list[int] | None:
        """[CLS] + all word pieces of `text` + [SEP] when they fit in `max_tokens`, else None.

        Equal to `token_ids(text, max_tokens)` whenever it is not None, and to `token_ids` with any
        larger budget: a short text has one embedding whatever the window."""
        body_len = max_tokens - 2
        if len(text) > body_len * CHARS_PER_TOKEN_BOUND:
            return None  # more characters than any body_len word pieces can hold
        ids: list[int] = self._tokenizer.encode(text, add_special_tokens=False).ids
        if len(ids) > body_len:
            return None
        return [self._cls, *ids, self._sep]

    @classmethod
    def load(
        cls,
        path: str | Path | None = None,
        *,
        layers: int = FULL_LAYERS,
        verify_probe: bool = True,
        threads: int = 1,
    ) -> Encoder:
        """Open the exported encoder, its first-`layers` variant unless `layers` is the full depth;
        `threads` is onnxruntime's intra-op count (1 = one core per call)."""
        root = Path(path) if path is not None else default_encoder_dir()
        hint = "build it with `make router-encoder` (or `make install`)"
        model_file = variant_file(layers)
        for name in (model_file, "tokenizer.json", ENCODER_MANIFEST):
            if not (root / name).is_file():
                raise RouterArtifactError(f"{root / name}: router encoder file missing; {hint}")
        try:
            raw = json.loads((root / ENCODER_MANIFEST).read_text())
        except (OSError, ValueError) as exc:
            raise RouterArtifactError(f"{root / ENCODER_MANIFEST}: unreadable ({exc}); {hint}") from exc
        where = str(root / ENCODER_MANIFEST)
        if not isinstance(raw, dict):
            raise RouterArtifactError(f"{where}: not a JSON object; {hint}")
        if layers != FULL_LAYERS:
            variants = raw.get("variants")
            variant = variants.get(str(layers)) if isinstance(variants, dict) else None
            if not isinstance(variant, dict):
                raise RouterArtifactError(f"{where}: no {layers}-layer variant recorded; {hint}")
            # A variant shares the source and recipe; its own file hash and probe.
            raw = {**raw, **variant, "layers": layers}
        if verify_probe:
            identity = EncoderIdentity.from_json(raw, where)
        else:  # the exporter computes the probe with this very class, before the probe exists
            identity = EncoderIdentity.from_json({**raw, "probe_embedding": [0.0] * int(raw["dim"])}, where)

        import onnxruntime as ort
        from tokenizers import Tokenizer

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        try:
            session = ort.InferenceSession(
                str(root / model_file), options, providers=["CPUExecutionProvider"]
            )
            tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
        except Exception as exc:  # onnxruntime raises its own untyped errors on a corrupt file
            raise RouterArtifactError(f"{root}: cannot load the router encoder ({exc}); {hint}") from exc
        tokenizer.no_padding()
        tokenizer.no_truncation()
        encoder = cls(session, tokenizer, identity, root)
        if verify_probe:
            live = encoder.embed_one(PROBE_TEXT, max_tokens=64)
            cos = probe_cosine(live, identity.probe_embedding)
            if cos < PROBE_MIN_COSINE:
                raise RouterArtifactError(
                    f"{root / model_file}: encoder output does not match its own manifest (probe cosine "
                    f"{cos:.4f} < {PROBE_MIN_COSINE}); the model file is corrupt or from another export; "
                    f"{hint}"
                )
        return encoder

    def token_ids(self, text: str, max_tokens: int) -> list[int]:
        """[CLS] + the last `max_tokens - 2` word pieces of `text` + [SEP]."""
        if max_tokens < 3:
            raise ValueError(f"max_tokens must be >= 3, got {max_tokens}")
        body_len = max_tokens - 2
        tail = text[-body_len * CHARS_PER_TOKEN_BOUND :]
        ids: list[int] = self._tokenizer.encode(tail, add_special_tokens=False).ids
        return [self._cls, *ids[-body_len:], self._sep]

    def embed_ids(self, batch: Sequence[Sequence[int]]) -> Embeddings:
        """Embed pre-tokenized sequences, one onnxruntime call each.

        Never several rows per call: dynamic int8 quantization picks one activation scale per tensor,
        i.e. per batch, so a row's embedding would depend on its batch companions (cosine 0.98 against
        the same row alone). One row per call keeps a prompt's score deterministic, and the same in
        training (eval/routing/embed_cache.py) as in serving.
        """
        out = np.zeros((len(batch), self.identity.dim), dtype=np.float32)
        for i, ids in enumerate(batch):
            input_ids = np.asarray([ids], dtype=np.int64)
            key = input_ids.tobytes() if self._memo_size else b""
            if key:
                with self._memo_lock:
                    known = self._memo.get(key)
                    if known is not None:
                        self._memo.move_to_end(key)
                if known is not None:
                    out[i] = known
                    continue
            mask = np.ones_like(input_ids)
            out[i] = self._session.run(None, {"input_ids": input_ids, "attention_mask": mask})[0][0]
            if key:
                with self._memo_lock:
                    self._memo[key] = out[i].copy()
                    if len(self._memo) > self._memo_size:
                        self._memo.popitem(last=False)
        return out

    def embed(self, texts: Sequence[str], max_tokens: int) -> Embeddings:
        return self.embed_ids([self.token_ids(t, max_tokens) for t in texts])

    def embed_one(self, text: str, max_tokens: int) -> Embeddings:
        row: Embeddings = self.embed([text], max_tokens)[0]
        return row
