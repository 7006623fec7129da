"""The semantic cache's question embedding: whole questions only, unit length, and computed once per
request when the router embeds the same text (the encoder's memo)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from router.embedding import QuestionEmbedder
from router.encoder import Encoder

pytestmark = pytest.mark.needs_encoder  # the router's built encoder (tests/unit/conftest.py)


class _Counting:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.calls = 0

    def run(self, *args: Any) -> Any:
        self.calls += 1
        return self.session.run(*args)


@pytest.fixture(scope="module")
def encoder() -> Encoder:
    return Encoder.load()


def test_question_embedding_is_shared_with_the_router(encoder: Encoder) -> None:
    counting = _Counting(encoder._session)
    encoder._session = counting
    try:
        encoder.remember(16)
        q = QuestionEmbedder(encoder, max_tokens=128)
        text = "How do I reset my password?"
        vec = asyncio.run(q.embed(text))
        assert vec is not None and abs(float(np.linalg.norm(vec)) - 1.0) < 1e-5
        assert counting.calls == 1
        # The router's difficulty embedding of the same short question (32-token window): no new run.
        routed = encoder.embed([text], 32)[0]
        assert counting.calls == 1
        assert float(routed @ vec) > 0.999
        q.close()
    finally:
        encoder._session = counting.session
        encoder.remember(0)


def test_long_questions_are_not_embedded(encoder: Encoder) -> None:
    q = QuestionEmbedder(encoder, max_tokens=16)
    assert q.embed_sync("short question") is not None
    assert q.embed_sync("word " * 40) is None  # 40 word pieces > 14: the embedding would be of a tail
    assert q.embed_sync("x" * 100_000) is None  # bounded work before tokenizing
    q.close()
