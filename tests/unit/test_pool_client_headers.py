"""A pool's API key becomes a header on every upstream request: one holding CR or LF (a key file read
with its trailing newline) would split the request's header block, so it is refused when the pool
is built, naming the variable, never the key."""

from __future__ import annotations

import pytest

from gateway.config import Pool
from gateway.errors import GatewayError
from gateway.upstream.pool_client import PoolClient

POOL = Pool.model_validate(
    {"name": "p", "model": "m", "endpoints": {"static": ["http://127.0.0.1:9"]}, "api_key_env": "POOL_KEY"}
)


@pytest.mark.parametrize("key", ["sk-123\n", "sk-123\r\n", "sk\r-123", "sk-1\nx-injected: 1"])
def test_a_key_with_cr_or_lf_is_refused_at_build(key: str) -> None:
    with pytest.raises(GatewayError) as info:
        PoolClient.build(POOL, environ={"POOL_KEY": key})
    assert "POOL_KEY" in info.value.message and "CR or LF" in info.value.message
    assert "sk" not in info.value.message


def test_a_clean_key_is_the_bearer_header() -> None:
    pool = PoolClient.build(POOL, environ={"POOL_KEY": "sk-123"})
    assert pool.headers["authorization"] == "Bearer sk-123"
