"""SharedFeedback and Feedback.rate against a real redis-server: records round-trip with their extra
bytes, keys never hold the raw request id, one verdict across replicas, failures are counted."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from gateway.errors import ConflictError, NotFoundError, UpstreamUnavailableError
from gateway.observability.feedback import Delivered, FeedbackRequest
from gateway.observability.feedback_shared import Flushing, SharedFeedback, decode, encode
from tests.support.feedback import shared_feedback as _feedback
from tests.support.procs import free_port


def test_record_codec_round_trips() -> None:
    d = decode(encode("strong", 1234.5, b"\x00emb"), rated=True)
    assert d == Delivered("strong", 1234.5, True, b"\x00emb")
    assert decode(encode("weak", 1.0, None), rated=False).extra is None


async def test_a_record_shared_by_one_replica_is_rated_once_on_another(redis_client: aioredis.Redis) -> None:
    client = redis_client
    one, two = _feedback(client), _feedback(client)
    seen: list[tuple[str, str, bool, float | None, Delivered]] = []
    two.on_rated(lambda *args: seen.append(args))
    one.remember("acme", "req-1", "strong", b"extra")
    assert one.shared is not None
    await one.shared.flush()
    keys = [k.decode() if isinstance(k, bytes) else k for k in await client.keys("*")]
    assert keys and all("req-1" not in k and "acme" not in k for k in keys)  # hashed, never raw
    with pytest.raises(NotFoundError):  # another org: as unknown
        await two.rate("globex", FeedbackRequest(request_id="req-1", accepted=True))
    await two.rate("acme", FeedbackRequest(request_id="req-1", accepted=False, score=0.3))
    assert len(seen) == 1 and seen[0][:4] == ("acme", "req-1", False, 0.3)
    assert seen[0][4].pool == "strong" and seen[0][4].extra == b"extra"
    with pytest.raises(ConflictError):  # local on `one`, but rated on `two`
        await one.rate("acme", FeedbackRequest(request_id="req-1", accepted=True))
    with pytest.raises(ConflictError):
        await two.rate("acme", FeedbackRequest(request_id="req-1", accepted=True))


async def test_background_flush_and_bounded_buffer(redis_client: aioredis.Redis) -> None:
    client = redis_client
    reg = CollectorRegistry()
    shared = SharedFeedback(client, 60.0, reg, "t:", Flushing(interval_s=0.01, batch=2, max_buffer=3))
    for i in range(5):
        shared.publish("acme", f"r{i}", "p", 1.0, None)
    assert shared.dropped._value.get() == 2  # the buffer holds 3
    shared.start()
    await shared.close()
    assert await shared.find("acme", "r2") is not None
    assert await shared.find("acme", "r3") is None


async def test_redis_down_counts_drops_and_answers_503_for_non_local_ids() -> None:
    dead = aioredis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.2)
    fb = _feedback(dead)
    assert fb.shared is not None
    fb.remember("acme", "local", "p")
    await fb.shared.flush()
    assert fb.shared.flush_errors._value.get() == 1 and fb.shared.dropped._value.get() == 1
    with pytest.raises(UpstreamUnavailableError):
        await fb.rate("acme", FeedbackRequest(request_id="elsewhere", accepted=True))
    await fb.rate("acme", FeedbackRequest(request_id="local", accepted=True))  # served here
    with pytest.raises(ConflictError):
        await fb.rate("acme", FeedbackRequest(request_id="local", accepted=True))
    await dead.aclose()
