"""Feedback shared through Redis when Redis misbehaves: the flusher survives what it does not expect,
a record it cannot decode is unknown, one answer is rated once even while Redis fails, and ratings of
other replicas' answers leave nothing behind in the local store. Redis is a fake here: the failures
are injected exactly where they matter (tests/integration/test_feedback_shared.py has the real one)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from gateway.errors import ConflictError, UpstreamUnavailableError
from gateway.observability.feedback import Feedback, FeedbackRequest
from gateway.observability.feedback_shared import (
    Flushing,
    SharedFeedback,
    encode,
    record_key,
)
from tests.support.feedback import shared_feedback


class _Pipe:
    def __init__(self, redis: _FakeRedis) -> None:
        self._redis = redis
        self._sets: list[tuple[str, bytes]] = []

    def set(self, key: str, value: bytes, ex: int) -> None:
        self._sets.append((key, value))

    async def execute(self) -> None:
        if self._redis.execute_errors:
            raise self._redis.execute_errors.pop(0)
        self._redis.values.update(self._sets)


class _FakeRedis:
    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}
        self.execute_errors: list[BaseException] = []
        self.claim_gate: asyncio.Event | None = None  # claims wait for it, then fail

    def pipeline(self, transaction: bool = False) -> _Pipe:
        return _Pipe(self)

    async def mget(self, *keys: str) -> list[bytes | None]:
        return [self.values.get(k) for k in keys]

    async def set(self, key: str, value: bytes, nx: bool = False, ex: int = 0) -> bool | None:
        if self.claim_gate is not None:
            await self.claim_gate.wait()
            raise ConnectionError("redis went away")
        if nx and key in self.values:
            return None
        self.values[key] = value
        return True


def _shared(redis: _FakeRedis, reg: CollectorRegistry, **flushing: Any) -> SharedFeedback:
    return SharedFeedback(cast(Any, redis), 60.0, reg, "t:", Flushing(**flushing))


async def test_the_flusher_keeps_flushing_after_an_error_it_does_not_expect() -> None:
    redis = _FakeRedis()
    redis.execute_errors.append(RuntimeError("not a RedisError"))
    shared = _shared(redis, CollectorRegistry(), interval_s=0.01)
    shared.start()
    try:
        shared.publish("acme", "r1", "p", 1.0, None)
        await asyncio.sleep(0.05)  # the first flush fails
        shared.publish("acme", "r2", "p", 1.0, None)
        await asyncio.sleep(0.05)
    finally:
        await shared.close()
    assert shared.flush_errors._value.get() == 1
    assert await shared.find("acme", "r2") is not None  # flushed by the same, still running task


async def test_a_record_that_does_not_decode_is_unknown() -> None:
    redis = _FakeRedis()
    shared = _shared(redis, CollectorRegistry())
    redis.values[record_key("t:", "acme", "short")] = b"\x00\x01"
    redis.values[record_key("t:", "acme", "latin1")] = encode("p", 1.0, None)[:-1] + b"\xff"
    assert await shared.find("acme", "short") is None
    assert await shared.find("acme", "latin1") is None


async def test_a_local_answer_is_rated_once_while_redis_fails_under_both_ratings() -> None:
    redis = _FakeRedis()
    redis.claim_gate = asyncio.Event()
    fb = shared_feedback(redis)
    rated: list[str] = []
    fb.on_rated(lambda org, rid, *_: rated.append(rid))
    fb.remember("acme", "local", "p")
    body = FeedbackRequest(request_id="local", accepted=False)
    both = asyncio.gather(fb.rate("acme", body), fb.rate("acme", body), return_exceptions=True)
    await asyncio.sleep(0)  # both are waiting for Redis now
    redis.claim_gate.set()
    results = await both
    assert sum(r is None for r in results) == 1
    assert sum(isinstance(r, ConflictError) for r in results) == 1
    assert rated == ["local"]


async def _served_by_another_replica(redis: _FakeRedis) -> Feedback:
    """A second replica's Feedback, with "r1" served by the first and flushed to Redis."""
    one, two = shared_feedback(redis), shared_feedback(redis)
    one.remember("acme", "r1", "p")
    assert one.shared is not None
    await one.shared.flush()
    return two


async def test_another_replicas_answer_is_marked_in_redis_not_in_the_local_store() -> None:
    two = await _served_by_another_replica(_FakeRedis())
    await two.rate("acme", FeedbackRequest(request_id="r1", accepted=True))
    assert not two.store.rated("acme", "r1")  # nothing that only a ring overwrite would ever clear
    with pytest.raises(ConflictError):  # the marker in Redis still says it was rated
        await two.rate("acme", FeedbackRequest(request_id="r1", accepted=True))


async def test_another_replicas_answer_is_not_rated_when_its_marker_cannot_be_set() -> None:
    redis = _FakeRedis()
    two = await _served_by_another_replica(redis)
    redis.claim_gate = asyncio.Event()
    redis.claim_gate.set()  # found in Redis, then setting the marker fails
    with pytest.raises(UpstreamUnavailableError):
        await two.rate("acme", FeedbackRequest(request_id="r1", accepted=True))
