"""MemoryVectorIndex: threshold, scope isolation, TTL, the entry bound, duplicate writes."""

from __future__ import annotations

import numpy as np
import pytest

from cache.semantic import MemoryVectorIndex, Vector

DIM = 8


def at_cosine(c: float, axis: int = 0, other: int = 1) -> Vector:
    """A unit vector with cosine `c` to the basis vector `axis`."""
    v = np.zeros(DIM, dtype=np.float32)
    v[axis], v[other] = c, np.sqrt(1.0 - c * c)
    return v


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def index(clock: Clock) -> MemoryVectorIndex:
    return MemoryVectorIndex(100, clock, dim=DIM)


async def test_ensure_is_ready(index: MemoryVectorIndex) -> None:
    assert await index.ensure() is None


async def test_hit_at_or_above_threshold_miss_below(index: MemoryVectorIndex) -> None:
    await index.add(b"s", at_cosine(1.0), b"answer", ttl_s=60)
    hit = await index.search(b"s", at_cosine(0.95), min_similarity=0.95 - 1e-6)
    assert hit is not None
    assert hit[0] == b"answer"
    assert hit[1] == pytest.approx(0.95, abs=1e-5)
    assert await index.search(b"s", at_cosine(0.94), min_similarity=0.95) is None


async def test_best_entry_wins(index: MemoryVectorIndex) -> None:
    await index.add(b"s", at_cosine(0.90), b"far", ttl_s=60)
    await index.add(b"s", at_cosine(0.99), b"near", ttl_s=60)
    await index.add(b"s", at_cosine(0.0, axis=2), b"orthogonal", ttl_s=60)
    hit = await index.search(b"s", at_cosine(1.0), min_similarity=0.5)
    assert hit is not None and hit[0] == b"near"


async def test_unnormalized_vectors_compare_by_direction(index: MemoryVectorIndex) -> None:
    await index.add(b"s", 7.0 * at_cosine(1.0), b"answer", ttl_s=60)
    hit = await index.search(b"s", 0.1 * at_cosine(1.0), min_similarity=0.999)
    assert hit is not None and hit[1] == pytest.approx(1.0, abs=1e-5)


async def test_zero_vector_is_never_stored_or_matched(index: MemoryVectorIndex) -> None:
    zero = np.zeros(DIM, dtype=np.float32)
    await index.add(b"s", zero, b"x", ttl_s=60)
    assert len(index) == 0
    await index.add(b"s", at_cosine(1.0), b"answer", ttl_s=60)
    assert await index.search(b"s", zero, min_similarity=-1.0) is None


async def test_scope_isolation(index: MemoryVectorIndex) -> None:
    v = at_cosine(1.0)
    await index.add(b"tenant-a|model|sys", v, b"a's answer", ttl_s=60)
    assert await index.search(b"tenant-b|model|sys", v, min_similarity=-1.0) is None
    assert await index.search(b"tenant-a|model|sys2", v, min_similarity=-1.0) is None
    await index.add(b"tenant-b|model|sys", v, b"b's answer", ttl_s=60)
    hit_a = await index.search(b"tenant-a|model|sys", v, min_similarity=0.99)
    hit_b = await index.search(b"tenant-b|model|sys", v, min_similarity=0.99)
    assert hit_a is not None and hit_a[0] == b"a's answer"
    assert hit_b is not None and hit_b[0] == b"b's answer"


async def test_ttl_expiry(index: MemoryVectorIndex, clock: Clock) -> None:
    await index.add(b"s", at_cosine(1.0), b"short", ttl_s=10)
    await index.add(b"s", at_cosine(0.9), b"long", ttl_s=100)
    clock.t += 9.9
    hit = await index.search(b"s", at_cosine(1.0), min_similarity=0.5)
    assert hit is not None and hit[0] == b"short"
    clock.t += 0.1
    hit = await index.search(b"s", at_cosine(1.0), min_similarity=0.5)
    assert hit is not None and hit[0] == b"long"
    assert len(index) == 1  # the expired entry is gone, not just hidden
    clock.t += 100
    assert await index.search(b"s", at_cosine(1.0), min_similarity=-1.0) is None
    assert len(index) == 0


async def test_bounded_oldest_write_evicted_first(clock: Clock) -> None:
    index = MemoryVectorIndex(3, clock, dim=DIM)
    for i in range(3):
        await index.add(f"s{i}".encode(), at_cosine(1.0), f"v{i}".encode(), ttl_s=60)
    await index.add(b"s3", at_cosine(1.0), b"v3", ttl_s=60)
    assert len(index) == 3
    assert await index.search(b"s0", at_cosine(1.0), min_similarity=-1.0) is None
    for i in (1, 2, 3):
        hit = await index.search(f"s{i}".encode(), at_cosine(1.0), min_similarity=0.99)
        assert hit is not None and hit[0] == f"v{i}".encode()


async def test_same_vector_same_scope_replaces(index: MemoryVectorIndex, clock: Clock) -> None:
    await index.add(b"s", at_cosine(1.0), b"old", ttl_s=10)
    await index.add(b"s", at_cosine(1.0), b"new", ttl_s=100)
    assert len(index) == 1
    clock.t += 50  # the rewrite also renewed the TTL
    hit = await index.search(b"s", at_cosine(1.0), min_similarity=0.99)
    assert hit is not None and hit[0] == b"new"


async def test_many_entries_removal_keeps_rows_consistent(clock: Clock) -> None:
    """Swap-removal of expired rows in the middle must not mix up vectors and values."""
    rng = np.random.default_rng(7)
    index = MemoryVectorIndex(1000, clock, dim=DIM)
    vectors = rng.standard_normal((40, DIM)).astype(np.float32)
    for i, v in enumerate(vectors):
        await index.add(b"s", v, str(i).encode(), ttl_s=10 if i % 3 == 0 else 100)
    clock.t += 20
    for i, v in enumerate(vectors):
        hit = await index.search(b"s", v, min_similarity=0.9999)
        if i % 3 == 0:
            assert hit is None
        else:
            assert hit is not None and hit[0] == str(i).encode()
    assert len(index) == sum(1 for i in range(40) if i % 3)


async def test_rejects_wrong_dim_and_bad_ttl(index: MemoryVectorIndex) -> None:
    with pytest.raises(ValueError, match="shape"):
        await index.search(b"s", np.ones(DIM + 1, dtype=np.float32), 0.9)
    with pytest.raises(ValueError, match="ttl_s"):
        await index.add(b"s", at_cosine(1.0), b"x", ttl_s=0)
