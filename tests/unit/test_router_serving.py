"""The serving path of the difficulty model: the thread-side batcher scores what the one-prompt path
scores, bounds its batches, never makes a lone request wait for company, and serves several loops."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import orjson
import pytest

from router.difficulty import Assessment, DifficultyModel

pytestmark = pytest.mark.needs_encoder  # the router's built encoder (tests/unit/conftest.py)

MMLU_DEV = Path("/work/shared/data/routing/mmlu_dev.jsonl")


@pytest.fixture(scope="module")
def model() -> Iterator[DifficultyModel]:
    m = DifficultyModel.load(cache_size=0, max_batch=8)
    yield m
    m.close()


def _batch_sizes(model: DifficultyModel, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the size of every batch the inference thread scores (undone after the test)."""
    sizes: list[int] = []
    original = model.assess_many

    def spy(batch: Sequence[str]) -> list[Assessment]:
        sizes.append(len(batch))
        return original(batch)

    monkeypatch.setattr(model, "assess_many", spy)
    return sizes


def _real_prompts(n: int) -> list[str]:
    if not MMLU_DEV.is_file():
        pytest.skip(f"{MMLU_DEV} not present (shared routing data)")
    with MMLU_DEV.open("rb") as fh:
        prompts = [str(orjson.loads(line)["prompt"]) for line in fh]
    return prompts[:n]


async def test_concurrent_scores_equal_one_prompt_at_a_time(
    model: DifficultyModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under concurrency requests are scored in batches (the encoder still runs one row per call);
    the difficulty must be what one prompt alone gets, the way the head was trained."""
    prompts = _real_prompts(300)
    alone = [model.score_sync(p) for p in prompts]
    sizes = _batch_sizes(model, monkeypatch)
    together = await asyncio.gather(*(model.score(p) for p in prompts))
    assert max(sizes) > 1, "no batch formed: the comparison would not test batching"
    assert max(abs(a - b) for a, b in zip(alone, together, strict=True)) < 1e-4


async def test_batches_are_bounded_and_a_lone_request_goes_alone(
    model: DifficultyModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = _batch_sizes(model, monkeypatch)
    await model.score("a lone request about prime numbers")
    assert sizes == [1]
    texts = [f"Batch bound {i}: name a noble gas." for i in range(40)]
    await asyncio.gather(*(model.score(t) for t in texts))
    assert sum(sizes[1:]) == 40
    assert max(sizes) <= model.max_batch


def test_callers_on_two_event_loops_get_their_own_results(model: DifficultyModel) -> None:
    texts = {
        0: [f"Loop A question {i}: what is osmosis?" for i in range(10)],
        1: [f"Loop B question {i}: who wrote Hamlet?" for i in range(10)],
    }
    expected = {k: model.score_many(v) for k, v in texts.items()}
    got: dict[int, list[float]] = {}

    async def run(k: int) -> None:
        got[k] = list(await asyncio.gather(*(model.score(t) for t in texts[k])))

    threads = [threading.Thread(target=lambda k=k: asyncio.run(run(k))) for k in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for k in texts:
        assert got[k] == pytest.approx(expected[k], abs=1e-6)


async def test_scoring_after_close_fails_instead_of_hanging() -> None:
    m = DifficultyModel.load(cache_size=0)
    m.close()
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(m.score("too late"), timeout=10)


async def test_callers_queued_behind_other_work_are_answered_when_the_model_closes() -> None:
    """close() cancels a drain that had not started yet (the cache's jobs share the executor): its
    callers get an error instead of waiting forever."""
    m = DifficultyModel.load(cache_size=0)
    release = threading.Event()
    m.executor.submit(release.wait, 30)  # the one thread is busy, so the drain only queues
    caller = asyncio.create_task(m.score("queued behind a cache job"))
    await asyncio.sleep(0)
    closing = asyncio.create_task(asyncio.to_thread(m.close))
    await asyncio.sleep(0.05)  # shutdown has cancelled the queued drain and waits for the busy job
    release.set()
    await asyncio.wait_for(closing, timeout=30)
    with pytest.raises(RuntimeError, match="closed"):
        await asyncio.wait_for(caller, timeout=10)
