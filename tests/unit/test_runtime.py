from __future__ import annotations

import pytest

from gateway.config import DEFAULT_POLICY_YAML as BASE
from gateway.config import ConfigError, default_policy, parse_policy
from gateway.parts import check_deployment
from gateway.settings import Settings


def test_memory_state_refuses_several_workers() -> None:
    with pytest.raises(ConfigError, match="2 workers would each enforce the whole budget"):
        check_deployment(default_policy(), Settings(workers=2))
    check_deployment(default_policy(), Settings(workers=1))


def test_redis_policy_needs_a_redis_url() -> None:
    policy = parse_policy(BASE + "limits: {backend: redis}\ntenancy: {store: redis}\n", "p.yaml")
    with pytest.raises(ConfigError, match="LLMGW_REDIS_URL is not set"):
        check_deployment(policy, Settings(redis_url=None))
    check_deployment(policy, Settings(redis_url="redis://127.0.0.1:6379/0", workers=4))
