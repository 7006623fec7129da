"""One real redis-server per test session for the integration tests (limiter and key store)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.redis_server import REDIS_SERVER, RedisServer


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server binary not found on PATH (apt install redis-server)")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.kill()
