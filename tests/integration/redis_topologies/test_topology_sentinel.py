"""The gateway on a Sentinel group (a primary, one replica, three sentinels; issue 41), configured with
LLMGW_REDIS_MODE=sentinel, the sentinels and the master name only (no URL): the limiter, key store and
response cache work; the primary killed under a trickle of requests is followed to the promoted replica
without a restart, the switch answered with the failure mode (fail_closed: 503), never a 500; sentinels
that do not answer, or that do not know the master's name, stop the start naming the setting."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.redis_topologies.conftest import (
    Gateway,
    StartAttempt,
    assert_refused_start,
    exercise,
    failover_under_trickle,
    gateway_env,
    start_attempts,
    write_policy,
)
from tests.support.procs import free_port
from tests.support.redis_topologies import SentinelGroup
from tests.support.stack import Stack


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelGroup]:
    with SentinelGroup(tmp_path_factory.mktemp("sentinel") / "redis") as g:
        yield g


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with Stack(tmp_path_factory.mktemp("sentinel-stack")) as s:
        yield s


@pytest.fixture(scope="module")
def policy(stack: Stack) -> Path:
    sim = stack.sim("sim", "--profile", "instant")
    return write_policy(stack.tmp / "policy.yaml", sim.url, on_backend_error="fail_closed")


@pytest.fixture(scope="module")
def refusals(stack: Stack, policy: Path, group: SentinelGroup) -> Iterator[dict[str, StartAttempt]]:
    envs = {
        "unreachable-sentinels": {
            **group.env(),
            "LLMGW_REDIS_SENTINELS": f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}",
        },
        "unknown-master": {**group.env(), "LLMGW_REDIS_SENTINEL_MASTER": "not-monitored"},
    }
    with start_attempts(stack.tmp, policy, envs) as attempts:
        yield attempts


@pytest.fixture(scope="module")
def gw(stack: Stack, policy: Path, group: SentinelGroup, refusals: dict[str, StartAttempt]) -> Gateway:
    """The gateway, booting together with the refused starts."""
    return Gateway(stack.gateway(policy, env=gateway_env(group.env())))


def test_limiter_key_store_and_cache_on_sentinel(gw: Gateway) -> None:
    exercise(gw, "sentinel")


def test_unreachable_sentinels_refuse_to_start(refusals: dict[str, StartAttempt]) -> None:
    assert_refused_start(*refusals["unreachable-sentinels"].outcome(), "LLMGW_REDIS_SENTINELS")


def test_unknown_master_name_refuses_to_start(refusals: dict[str, StartAttempt]) -> None:
    assert_refused_start(*refusals["unknown-master"].outcome(), "LLMGW_REDIS_SENTINEL_MASTER")


# Last in the module: the group has no replica left afterwards.
def test_primary_killed_under_requests_is_followed(gw: Gateway, group: SentinelGroup) -> None:
    failover_under_trickle(gw, group.kill_primary, group.wait_failover)
