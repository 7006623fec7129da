"""Question embeddings for the semantic cache, from the full-depth router encoder.

The semantic cache compares the WHOLE last user turn: `embed` returns None for a question longer
than its window (an embedding of a tail must not stand for the question). When a routed alias
already loaded a difficulty model, the cache runs on that model's one inference thread, and uses its
encoder too if the model serves the full depth (then the encoder's memo makes the second embedding
of the same ids free); the shipped router serves a 3-layer variant, so the cache loads the full model
beside it (gateway/relay/response_cache.py `build_cache`).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from router.encoder import Embeddings, Encoder


class QuestionEmbedder:
    def __init__(self, encoder: Encoder, max_tokens: int, executor: ThreadPoolExecutor | None = None) -> None:
        self.encoder = encoder
        self.max_tokens = max_tokens
        self._own = executor is None
        self._executor = executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix="cache-embed")

    def embed_sync(self, text: str) -> Embeddings | None:
        ids = self.encoder.ids_within(text, self.max_tokens)
        if ids is None:
            return None
        vec: Embeddings = self.encoder.embed_ids([ids])[0]
        norm = float(np.linalg.norm(vec))
        return vec / norm if norm > 0 else vec

    async def embed(self, text: str) -> Embeddings | None:
        """Off the event loop, on the encoder's thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.embed_sync, text)

    def close(self) -> None:
        if self._own:
            self._executor.shutdown(wait=True, cancel_futures=True)
