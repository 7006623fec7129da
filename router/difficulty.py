"""Serving the difficulty model: request text -> difficulty in [0, 1] (higher = needs a stronger model).

    model = DifficultyModel.load()            # the shipped artifact (router/artifacts/default)
    d = await model.score(request_text(body["messages"]))
    strong = d >= model.thresholds[0.3]       # route ~30 % of traffic (training mix) to the strong tier
    model.close()

Flow of `score`: LRU cache (keyed by a hash of the text; retries and repeated prompts are common) ->
a thread-side queue -> the model's one inference thread (its executor), which tokenizes, runs the int8
encoder (onnxruntime releases the GIL, one intra-op thread) and the numpy head, then hands each result
back to its caller's loop. The event loop only appends to the queue and awaits a future, so routing
never blocks it. No timer: a lone request starts at once; requests that queue while the thread is
busy run next, back to back, and with `max_batch` > 1 the head scores up to that many in one call
(default 1: see DEFAULT_MAX_BATCH for why). Whatever the batch, the encoder runs one row per
onnxruntime call: its int8 quantization is dynamic per tensor, so rows sharing a call change each
other's embedding (on 300 mmlu_dev prompts in runs of 8: |difficulty change| up to 0.145, mean
0.018), while per-row runs keep a prompt's score what training saw (|change| < 1e-7). Measured on
the pinned core, a shared call would not buy much anyway: 2.96 ms for one 32-token row, 2.7-2.8 ms
per row in runs of 2-8 (doc 008).

Loading checks the artifact (router/artifact.py) and that the encoder on this machine produces the
probe embedding the head was trained with; any fault is a `RouterArtifactError` naming the path.

The same thread serves the N-tier success predictor (router/success.py, policy in router/tiers.py):
`SuccessScorer.assess` queues its text on this model's batcher with its own batch function, which
embeds the text (with this model's encoder when the predictor was trained on the same variant) and
runs the predictor's one numpy call right after, in the same drain: no second thread, no extra hop
back to the loop. A success request does not run the difficulty head (its start tier does not read it).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from router.artifact import Artifact, load_artifact
from router.artifact_error import RouterArtifactError
from router.encoder import PROBE_MIN_COSINE, PROBE_TEXT, Encoder, probe_cosine
from router.text import request_text

if TYPE_CHECKING:
    from router.tiers import SuccessPredictor

__all__ = [
    "DEFAULT_MAX_BATCH",
    "Assessment",
    "DifficultyModel",
    "RouterArtifactError",
    "SuccessAssessment",
    "SuccessScorer",
    "request_text",
]


# One request per head call by default: a batch answers its first caller only after the others'
# encoder runs (~3 ms each), and the head's saving (~0.3 ms per extra row) does not pay for that.
# Interleaved A/B on the pinned core (doc 008): P50 1.5-4 ms lower at 50-100 req/s than batches of
# up to 16, P99 lower or equal. Larger values trade latency for throughput once the core saturates.
DEFAULT_MAX_BATCH = 1


def _text_key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


# (difficulty, the L2-normalized prompt embedding it was computed from): the outcome memory's key.
Assessment = tuple[float, npt.NDArray[np.float32]]
# (success probability of every model the predictor knows, the embedding it was computed from).
SuccessAssessment = tuple[npt.NDArray[np.float64], npt.NDArray[np.float32]]
# What the inference thread runs for a batch of texts: one result per text, in order.
BatchFn = Callable[[Sequence[str]], Sequence[Any]]


@dataclass(slots=True)
class _Job:
    text: str
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    run: BatchFn


def _resolve(jobs: Sequence[_Job], values: Sequence[Any] | BaseException) -> None:
    """On the caller's loop: asyncio futures may only be completed from their own loop's thread."""
    for i, job in enumerate(jobs):
        if job.future.done():  # the caller was cancelled meanwhile
            continue
        if isinstance(values, BaseException):
            job.future.set_exception(values)
        else:
            job.future.set_result(values[i])


def _hand_back(jobs: Sequence[_Job], result: Sequence[Any] | BaseException) -> None:
    """From the inference thread: each caller's loop completes its own callers' futures."""
    for loop in {job.loop for job in jobs}:
        mine = [i for i, job in enumerate(jobs) if job.loop is loop]
        values = result if isinstance(result, BaseException) else [result[i] for i in mine]
        try:
            loop.call_soon_threadsafe(_resolve, [jobs[i] for i in mine], values)
        except RuntimeError:  # that loop is closed: nobody is waiting any more
            pass


class _Batcher:
    """A thread-side queue of score requests, drained in batches on the model's one inference thread.

    `submit` (on any event loop) appends under a lock and, when no drain is running, submits one to
    the executor. The drain takes up to `max_batch` queued requests, scores them, hands the results
    back to each caller's loop with `call_soon_threadsafe`, and goes straight on to whatever queued
    meanwhile; when the queue is empty it ends (no spinning, no timer). So a lone request starts at
    once, and the thread never waits for a busy event loop between batches (a loop-side batcher needs
    a loop round trip per batch). The executor stays the one inference thread: the semantic cache's
    embedding jobs, submitted to it directly, run between drains.
    """

    def __init__(self, model: DifficultyModel) -> None:
        self._model = model
        self._lock = threading.Lock()
        self._pending: deque[_Job] = deque()
        self._draining = False

    def submit(self, text: str, run: BatchFn) -> asyncio.Future[Any]:
        """Queue `text` for `run` (a batch function: texts -> one result each) on the inference thread."""
        loop = asyncio.get_running_loop()
        job = _Job(text, loop.create_future(), loop, run)
        with self._lock:
            self._pending.append(job)
            start, self._draining = not self._draining, True
        if start:
            try:
                self._model.executor.submit(self._drain)
            except RuntimeError:  # executor shut down (model closed): fail instead of hanging
                with self._lock:
                    self._draining = False
                    self._pending.remove(job)
                raise
        return job.future

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    self._draining = False
                    return
                # A batch is the run of queued jobs with the first one's batch function (difficulty or
                # success): each function scores its own batch, and the queue stays first-come.
                pending, run = self._pending, self._pending[0].run
                batch: list[_Job] = []
                while pending and len(batch) < self._model.max_batch and pending[0].run == run:
                    batch.append(pending.popleft())
            # Cancelled callers are not scored. `done()` read off-loop can only lag: a caller cancelled
            # just after this check is scored and its result dropped by `_resolve`.
            live = [job for job in batch if not job.future.done()]
            if not live:
                continue
            result: Sequence[Any] | BaseException
            try:
                result = run([job.text for job in live])
            except Exception as exc:  # delivered to every caller of this batch
                result = exc
            _hand_back(live, result)
            # Let the woken loop deliver now. On a shared core it needs the CPU and then the GIL, and
            # without this it often gets both only when the next row's encoder run releases them,
            # ~3 ms later (interleaved A/B, doc 008: P99 of the hop back to the caller 2.9-5.1 ms
            # without, 0.6-4.0 ms with). One syscall per batch; the GIL is released around it.
            os.sched_yield()

    def fail_pending(self) -> None:
        """After the executor shut down: a drain it cancelled before it started leaves callers
        queued; answer them instead of leaving them waiting forever."""
        with self._lock:
            left = list(self._pending)
            self._pending.clear()
            self._draining = False
        _hand_back(left, RuntimeError("difficulty model closed"))


class DifficultyModel:
    """A loaded artifact + encoder. Build one per process (app lifespan); `close()` on shutdown."""

    def __init__(
        self,
        artifact: Artifact,
        encoder: Encoder,
        *,
        cache_size: int = 4096,
        max_batch: int = DEFAULT_MAX_BATCH,
    ):
        self.artifact = artifact
        self.encoder = encoder
        self.max_batch = max_batch
        self._cache_size = cache_size
        self._cache: OrderedDict[bytes, Assessment] = OrderedDict()
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="router-difficulty")
        self._batcher = _Batcher(self)

    @classmethod
    def load(
        cls,
        path: str | Path | None = None,
        *,
        encoder_path: str | Path | None = None,
        cache_size: int = 4096,
        max_batch: int = DEFAULT_MAX_BATCH,
    ) -> DifficultyModel:
        """`path=None` loads the shipped default artifact; `encoder_path=None` the built encoder."""
        artifact = load_artifact(path)
        # The artifact names the encoder depth its head was trained on (the variant of the same model).
        encoder = Encoder.load(encoder_path, layers=artifact.encoder.layers)
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
        """Blocking batch scoring (CLI, evaluation)."""
        return [d for d, _ in self.assess_many(texts)]

    def assess_many(self, texts: Sequence[str]) -> list[Assessment]:
        """Blocking: difficulty and embedding of each text (the executor thread, the replay)."""
        if not texts:
            return []
        emb = self.encoder.embed(texts, self.artifact.max_tokens)
        values = np.asarray(self.artifact.head.difficulty(emb, texts), dtype=np.float64)
        rows = np.asarray(emb, dtype=np.float32)
        return [(float(v), rows[i]) for i, v in enumerate(values)]

    def score_sync(self, text: str) -> float:
        return self.score_many([text])[0]

    async def score(self, text: str) -> float:
        return (await self.assess(text))[0]

    async def assess(self, text: str) -> Assessment:
        """Difficulty and embedding, off the event loop (cached by text: retries and repeats are common)."""
        key = _text_key(text)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        value: Assessment = await self._batcher.submit(text, self.assess_many)
        if self._cache_size > 0:
            self._cache[key] = value
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return value

    def submit(self, text: str, run: BatchFn) -> asyncio.Future[Any]:
        """Run `run([text, ...])` on this model's inference thread, batched with other callers of the
        same function (the success predictor's serving, below)."""
        return self._batcher.submit(text, run)

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)
        self._batcher.fail_pending()
        self._cache.clear()


class SuccessScorer:
    """The success predictor served on a DifficultyModel's inference thread: text -> the success
    probability of every model the predictor knows (a routed alias picks its tiers' columns).

    Build with `load` at start-up (one per predictor artifact, shared by the aliases that use it);
    closing the DifficultyModel ends it too."""

    def __init__(
        self,
        model: DifficultyModel,
        predictor: SuccessPredictor,
        encoder: Encoder,
        max_tokens: int,
        *,
        cache_size: int = 4096,
    ) -> None:
        self.model = model  # whose thread, batcher and (usually) encoder this runs on
        self.predictor = predictor
        self.encoder = encoder
        self.max_tokens = max_tokens
        self._cache_size = cache_size
        self._cache: OrderedDict[bytes, SuccessAssessment] = OrderedDict()

    @classmethod
    def load(
        cls, model: DifficultyModel, path: str | Path | None = None, *, cache_size: int = 4096
    ) -> SuccessScorer:
        """The predictor at `path` (None: the shipped one) on `model`'s thread. Its embeddings come from
        `model`'s encoder when the predictor was trained on the same variant, else from that variant
        of the same export (loaded here); either way the predictor checks the live encoder's identity
        and probe (RouterArtifactError: it would route on another encoder's noise)."""
        from router.success import load_success_model

        predictor = load_success_model(Path(path) if path is not None else None)
        trained, encoder = predictor.encoder, model.encoder
        if trained is not None and trained.layers != encoder.identity.layers:
            encoder = Encoder.load(encoder.path, layers=trained.layers)
        predictor.check_encoder(encoder.identity, encoder.embed_one(PROBE_TEXT, max_tokens=64).tolist())
        return cls(model, predictor, encoder, predictor.max_tokens, cache_size=cache_size)

    def assess_many(self, texts: Sequence[str]) -> list[SuccessAssessment]:
        """Blocking: per-model probabilities and embedding of each text (on the inference thread)."""
        if not texts:
            return []
        emb = np.asarray(self.encoder.embed(texts, self.max_tokens), dtype=np.float32)
        probs = np.asarray(self.predictor.predict(emb, texts), dtype=np.float64)
        return [(probs[i], emb[i]) for i in range(len(texts))]

    async def assess(self, text: str) -> SuccessAssessment:
        """Off the event loop, cached by text like DifficultyModel.assess."""
        key = _text_key(text)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        value: SuccessAssessment = await self.model.submit(text, self.assess_many)
        if self._cache_size > 0:
            self._cache[key] = value
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return value
