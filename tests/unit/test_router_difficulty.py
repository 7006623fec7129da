"""Serving: scores in [0, 1], bad input handled, the async path matches the blocking one."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from router.difficulty import Assessment, DifficultyModel

pytestmark = pytest.mark.needs_encoder  # the router's built encoder (tests/unit/conftest.py)


@pytest.fixture(scope="module")
def model() -> Iterator[DifficultyModel]:
    m = DifficultyModel.load()
    yield m
    m.close()


def test_scores_are_in_unit_interval(model: DifficultyModel) -> None:
    texts = ["What is 2 + 2?", "Prove that there are infinitely many primes.", "hi"]
    for d in model.score_many(texts):
        assert 0.0 <= d <= 1.0


def test_distinct_prompts_get_distinct_scores(model: DifficultyModel) -> None:
    a = model.score_sync("What is the capital of France?\nA. Paris\nB. Rome\nC. Madrid\nD. Berlin\nAnswer:")
    b = model.score_sync(
        "A defendant was charged with burglary after entering a neighbour's garage at night to "
        "retrieve his own lawnmower. Which of the following is his best defence?\n"
        "A. Mistake of fact\nB. Consent\nC. Necessity\nD. Entrapment\nAnswer:"
    )
    assert a != b


def test_empty_text(model: DifficultyModel) -> None:
    assert 0.0 <= model.score_sync("") <= 1.0


def test_100k_token_text_is_truncated_not_an_error(model: DifficultyModel) -> None:
    huge = "lorem ipsum dolor sit amet " * 25_000  # ~100k+ word pieces
    tail_only = "lorem ipsum dolor sit amet " * 200  # longer than every component reads
    assert model.score_sync(huge) == pytest.approx(model.score_sync(tail_only), abs=1e-6)
    assert len(model.encoder.token_ids(huge, model.max_tokens)) == model.max_tokens


def test_only_the_tail_counts(model: DifficultyModel) -> None:
    """Few-shot boilerplate in front must not change the score once it is outside the token budget."""
    # Longer than what the encoder and the word model read, so the boilerplate falls outside both.
    question = " Which gas do plants absorb from the air during photosynthesis, and why?" * 50 + "\nAnswer:"
    boiler_a = "Example: the sky is blue. " * 200
    boiler_b = "Example: water is wet. " * 200
    assert model.score_sync(boiler_a + question) == pytest.approx(
        model.score_sync(boiler_b + question), abs=1e-6
    )


async def test_async_matches_sync_and_runs_off_the_loop(model: DifficultyModel) -> None:
    texts = [f"Question {i}: what is {i} times {i + 3}?" for i in range(24)]
    expected = model.score_many(texts)
    loop_thread = threading.get_ident()
    seen: set[int] = set()
    original = model.assess_many

    def spy(batch: list[str]) -> list[Assessment]:
        seen.add(threading.get_ident())
        return original(batch)

    model.assess_many = spy  # type: ignore[method-assign]
    try:
        got = await asyncio.gather(*(model.score(t) for t in texts))
    finally:
        del model.assess_many
    assert got == pytest.approx(expected, abs=1e-6)
    assert seen and loop_thread not in seen


async def test_cache_answers_repeats(model: DifficultyModel) -> None:
    text = "A repeated prompt about thermodynamics."
    first = await model.score(text)
    calls = 0
    original = model.assess_many

    def counting(batch: list[str]) -> list[Assessment]:
        nonlocal calls
        calls += 1
        return original(batch)

    model.assess_many = counting  # type: ignore[method-assign]
    try:
        assert await model.score(text) == first
    finally:
        del model.assess_many
    assert calls == 0


async def test_assess_gives_the_embedding_the_difficulty_was_computed_from(model: DifficultyModel) -> None:
    text = "Assess: which planet has the most moons?"
    difficulty, emb = await model.assess(text)
    assert difficulty == pytest.approx(model.score_sync(text), abs=1e-6)
    direct = model.encoder.embed([text], model.max_tokens)[0]
    assert emb.shape == (model.encoder.identity.dim,)
    assert float(np.dot(emb, direct) / (np.linalg.norm(emb) * np.linalg.norm(direct))) > 0.9999


async def test_encoder_errors_reach_the_caller(model: DifficultyModel) -> None:
    def boom(batch: list[str]) -> list[Assessment]:
        raise RuntimeError("encoder exploded")

    model.assess_many = boom  # type: ignore[method-assign]
    try:
        with pytest.raises(RuntimeError, match="encoder exploded"):
            await model.score("a prompt that is not cached yet 1234")
    finally:
        del model.assess_many


async def test_a_cancelled_caller_does_not_break_its_batch(model: DifficultyModel) -> None:
    texts = [f"Cancellation case {i}: which planet is largest?" for i in range(6)]
    expected = model.score_many(texts)
    tasks = [asyncio.create_task(model.score(t)) for t in texts]
    await asyncio.sleep(0)  # all six are queued behind the first batch
    tasks[3].cancel()
    # A broken batcher would leave the others waiting forever: bound it so the test fails instead.
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=30)
    assert isinstance(results[3], asyncio.CancelledError)
    kept = [r for i, r in enumerate(results) if i != 3]
    assert kept == pytest.approx([e for i, e in enumerate(expected) if i != 3], abs=1e-6)
