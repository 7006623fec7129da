"""Embeddings of routing prompts through the serving encoder, cached on disk by text.

Training must see exactly what serving computes (same int8 model, same tail truncation), so training
embeds with `router.encoder.Encoder` itself. That costs ~5 ms per prompt on one core, so results are
kept in a content-addressed cache: one `.npz` per (encoder model hash, token budget) holding the
BLAKE2b digest of each text and its embedding. Any subset of any file hits it, and a different
encoder or budget can never be served a stale vector. The cache directory is gitignored (`.cache/`).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from router.encoder import Embeddings, Encoder

DEFAULT_CACHE_DIR = Path(".cache") / "router-embeddings"
CACHE_PROCEDURE = "row1"
BATCH = 32


def text_key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _cache_file(cache_dir: Path, encoder: Encoder, max_tokens: int) -> Path:
    # The procedure is part of the key: vectors from batched calls (an earlier version) differ slightly
    # from the one-row-per-call vectors serving computes, and must never be reused.
    return cache_dir / f"{encoder.identity.model_sha256[:16]}-t{max_tokens}-{CACHE_PROCEDURE}.npz"


def _load(path: Path) -> dict[bytes, Embeddings]:
    if not path.is_file():
        return {}
    with np.load(path) as data:
        keys = data["keys"]
        emb = data["emb"].astype(np.float32)
    return {bytes(k): emb[i] for i, k in enumerate(keys)}


def _save(path: Path, table: dict[bytes, Embeddings]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = np.array(list(table), dtype="S16")
    emb = np.stack(list(table.values())).astype(np.float32)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp.npz")
    np.savez(tmp, keys=keys, emb=emb)
    tmp.replace(path)


def embed_texts(
    encoder: Encoder,
    texts: Sequence[str],
    max_tokens: int,
    cache_dir: Path | None = DEFAULT_CACHE_DIR,
    progress: bool = False,
) -> Embeddings:
    """(len(texts), dim) embeddings, cached when `cache_dir` is set (the encoder runs one row per call)."""
    path = _cache_file(cache_dir, encoder, max_tokens) if cache_dir is not None else None
    table = _load(path) if path is not None else {}
    keys = [text_key(t) for t in texts]
    missing = sorted({k: t for k, t in zip(keys, texts, strict=True) if k not in table}.items())
    if missing:
        tokens = [(k, encoder.token_ids(t, max_tokens)) for k, t in missing]
        start = time.monotonic()
        for b in range(0, len(tokens), BATCH):
            chunk = tokens[b : b + BATCH]
            out = encoder.embed_ids([ids for _, ids in chunk])
            for (k, _), vec in zip(chunk, out, strict=True):
                table[k] = vec
            if progress and (b // BATCH) % 50 == 0:
                done = b + len(chunk)
                rate = done / max(time.monotonic() - start, 1e-9)
                print(f"  embedded {done}/{len(tokens)} ({rate:.0f}/s)", file=sys.stderr)
        if path is not None:
            _save(path, table)
    if not texts:
        return np.zeros((0, encoder.identity.dim), dtype=np.float32)
    return np.stack([table[k] for k in keys]).astype(np.float32)
