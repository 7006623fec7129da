"""Serving the difficulty model: request text -> difficulty in [0, 1] (higher = needs a stronger model).

    model = DifficultyModel.load()            # the shipped artifact (router/artifacts/default)
    d = await model.score(request_text(body["messages"]))
    strong = d >= model.thresholds[0.3]       # route ~30 % of traffic (training mix) to the strong tier
    model.close()

Flow of `score`: LRU cache (keyed by a hash of the text; retries and repeated prompts are common) ->
micro-batcher -> one dedicated executor thread that tokenizes, runs the int8 encoder (onnxruntime
releases the GIL, one intra-op thread) and the numpy head. The event loop only appends to a list and
awaits a future, so routing never blocks it. Batching is "natural": no timer; while one batch runs,
new requests queue, and the next batch takes all of them (up to `max_batch`), so under load the
per-call overhead is shared and at low load a request never waits for company.

Loading checks the artifact (router/artifact.py) and that the encoder on this machine produces the
probe embedding the head was trained with; any fault is a `RouterArtifactError` naming the path.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from router.artifact import Artifact, load_artifact
from router.artifact_error import RouterArtifactError
from router.encoder import PROBE_MIN_COSINE, PROBE_TEXT, Encoder, probe_cosine
from router.text import request_text

__all__ = ["DifficultyModel", "RouterArtifactError", "request_text"]


def _text_key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class _Batcher:
    """Queues score requests of one event loop and runs them in batches on the model's thread."""

    def __init__(self, model: DifficultyModel, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._model = model
        self._pending: list[tuple[str, asyncio.Future[float]]] = []
        self._task: asyncio.Task[None] | None = None

    async def submit(self, text: str) -> float:
        future: asyncio.Future[float] = self.loop.create_future()
        self._pending.append((text, future))
        if self._task is None:
            self._task = self.loop.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self._pending:
                batch = self._pending[: self._model.max_batch]
                del self._pending[: self._model.max_batch]
                texts = [t for t, _ in batch]
                try:
                    values = await self.loop.run_in_executor(
                        self._model.executor, self._model.score_many, texts
                    )
                except Exception as exc:  # delivered to every caller of this batch
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                for (_, fut), value in zip(batch, values, strict=True):
                    if not fut.done():  # the caller may have been cancelled meanwhile
                        fut.set_result(value)
        finally:
            self._task = None


class DifficultyModel:
    """A loaded artifact + encoder. Build one per process (app lifespan); `close()` on shutdown."""

    def __init__(self, artifact: Artifact, encoder: Encoder, *, cache_size: int = 4096, max_batch: int = 16):
        self.artifact = artifact
        self.encoder = encoder
        self.max_batch = max_batch
        self._cache_size = cache_size
        self._cache: OrderedDict[bytes, float] = OrderedDict()
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="router-difficulty")
        self._batcher: _Batcher | None = None

    @classmethod
    def load(
        cls,
        path: str | Path | None = None,
        *,
        encoder_path: str | Path | None = None,
        cache_size: int = 4096,
        max_batch: int = 16,
    ) -> DifficultyModel:
        """`path=None` loads the shipped default artifact; `encoder_path=None` the built encoder."""
        artifact = load_artifact(path)
        encoder = Encoder.load(encoder_path)
        trained, local = artifact.encoder, encoder.identity
        if trained.dim != local.dim or trained.recipe_version != local.recipe_version:
            raise RouterArtifactError(
                f"router artifact {artifact.path}: trained on {trained.describe()}, dim {trained.dim}, "
                f"but the encoder at {encoder.path} is {local.describe()}, dim {local.dim}; "
                "retrain or rebuild the encoder"
            )
        live = encoder.embed_one(PROBE_TEXT, max_tokens=64)
        cos = probe_cosine(live, trained.probe_embedding)
        if cos < PROBE_MIN_COSINE:
            raise RouterArtifactError(
                f"router artifact {artifact.path}: the encoder at {encoder.path} does not reproduce the "
                f"probe embedding the head was trained with (cosine {cos:.4f} < {PROBE_MIN_COSINE}); "
                "rebuild the encoder (`make router-encoder`) or retrain the head"
            )
        return cls(artifact, encoder, cache_size=cache_size, max_batch=max_batch)

    @property
    def identity(self) -> str:
        return self.artifact.identity

    @property
    def thresholds(self) -> Mapping[float, float]:
        """Strong-call share -> difficulty threshold, calibrated on the training mix."""
        return self.artifact.thresholds

    @property
    def max_tokens(self) -> int:
        return self.artifact.max_tokens

    def score_many(self, texts: Sequence[str]) -> list[float]:
        """Blocking batch scoring (CLI, evaluation, the executor thread)."""
        if not texts:
            return []
        emb = self.encoder.embed(texts, self.artifact.max_tokens)
        values = self.artifact.head.difficulty(emb, texts)
        return [float(v) for v in np.asarray(values, dtype=np.float64)]

    def score_sync(self, text: str) -> float:
        return self.score_many([text])[0]

    async def score(self, text: str) -> float:
        key = _text_key(text)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        loop = asyncio.get_running_loop()
        if self._batcher is None or self._batcher.loop is not loop:
            self._batcher = _Batcher(self, loop)
        value = await self._batcher.submit(text)
        if self._cache_size > 0:
            self._cache[key] = value
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return value

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)
        self._cache.clear()
