"""The gateway on a Redis Cluster of three primaries with one replica each (issue 41), configured with
LLMGW_REDIS_MODE=cluster and one seed node: the limiter, key store and response cache work; the primary
of the limiter's `{llmgw}` slot killed under a trickle of requests is replaced by its replica and the
gateway follows without a restart, the switch answered with the failure mode (fail_open), never a 500;
the cluster's URL with LLMGW_REDIS_MODE=standalone stops the start naming the setting."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from redis.cluster import ClusterNode
from redis.cluster import RedisCluster as ClusterClient

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
from tests.support.redis_topologies import RedisCluster
from tests.support.stack import Stack

LIMITER_TAG = "{llmgw}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    with RedisCluster(tmp_path_factory.mktemp("cluster") / "redis", primaries=3, replicas_per_primary=1) as c:
        yield c


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with Stack(tmp_path_factory.mktemp("cluster-stack")) as s:
        yield s


@pytest.fixture(scope="module")
def policy(stack: Stack) -> Path:
    sim = stack.sim("sim", "--profile", "instant")
    return write_policy(stack.tmp / "policy.yaml", sim.url, on_backend_error="fail_open")


@pytest.fixture(scope="module")
def refusals(stack: Stack, policy: Path, cluster: RedisCluster) -> Iterator[dict[str, StartAttempt]]:
    envs = {"cluster-as-standalone": {**cluster.env(), "LLMGW_REDIS_MODE": "standalone"}}
    with start_attempts(stack.tmp, policy, envs) as attempts:
        yield attempts


@pytest.fixture(scope="module")
def gw(stack: Stack, policy: Path, cluster: RedisCluster, refusals: dict[str, StartAttempt]) -> Gateway:
    """The gateway, booting together with the refused start."""
    return Gateway(stack.gateway(policy, env=gateway_env(cluster.env())))


def test_limiter_key_store_and_cache_on_cluster(gw: Gateway, cluster: RedisCluster) -> None:
    exercise(gw, "cluster")
    # What the gateway wrote is in the cluster (not in a local fallback).
    nodes = [ClusterNode(*seed.split(":")) for seed in cluster.seeds]
    with ClusterClient(startup_nodes=nodes) as c:
        keys = [k.decode() for k in c.scan_iter(count=1000, target_nodes=ClusterClient.PRIMARIES)]
    assert any(k.startswith("llmgw:{llmgw}:") for k in keys), keys[:20]  # the limiter's and key store's
    assert any(k.startswith("llmgw:cache:") for k in keys), keys[:20]
    # One prefix for everything the gateway writes, so one ACL pattern (`~llmgw:*`) covers it all.
    assert all(k.startswith("llmgw:") for k in keys), [k for k in keys if not k.startswith("llmgw:")]


def test_cluster_url_in_standalone_mode_refuses_to_start(refusals: dict[str, StartAttempt]) -> None:
    assert_refused_start(*refusals["cluster-as-standalone"].outcome(), "LLMGW_REDIS_MODE")


# Last in the module: the killed primary stays down.
def test_primary_of_the_limiter_slot_killed_under_requests(gw: Gateway, cluster: RedisCluster) -> None:
    failover_under_trickle(
        gw, partial(cluster.kill_primary_of, LIMITER_TAG), partial(cluster.wait_failover, LIMITER_TAG)
    )
