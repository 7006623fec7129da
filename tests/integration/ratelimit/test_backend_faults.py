"""Redis errors that are not outages, produced for real with either limiter client (redis-py, the
default, and the lean RESP client): each is a `BackendUnavailable` with its reason and op (never a raw
client error), the limiter's connection leaks nothing when AUTH fails; the gateway refuses to start on
settings that cannot work (a cluster node in standalone mode, a wrong password) and admits on a cluster
in cluster mode (issue 41)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import uvloop

from gateway.config import ConfigError, parse_policy
from gateway.errors import UpstreamUnavailableError
from gateway.parts import build
from gateway.settings import Settings
from ratelimit.errors import BackendUnavailable
from ratelimit.model import Admission, Dimension, Level, Reservation, Rule, Tenant
from ratelimit.redis_backend import RedisBackend
from ratelimit.resp import RespClient
from ratelimit.rules import request_cost, usage_cost
from tests.support.poll import wait_until
from tests.support.procs import free_port
from tests.support.redis_server import REDIS_SERVER, RedisServer

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")

RULES = (Rule(Level.KEY, "k", Dimension.TOKENS, 1000),)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    srv = RedisServer(tmp_path)  # its own: these tests reconfigure it
    srv.start()
    yield srv
    srv.kill()


@pytest.fixture(params=["redis-py", "resp"])
def client(request: pytest.FixtureRequest) -> str:
    """The limiter's client (`RedisBackend.from_url(client=...)`)."""
    return str(request.param)


def url_with(server: RedisServer, auth: str) -> str:
    return f"redis://{auth}@127.0.0.1:{server.port}/0"


def adm(rid: str) -> Admission:
    return Admission(rid, RULES, request_cost(10, 10))


async def failure(call: Coroutine[Any, Any, Any]) -> tuple[str, str]:
    with pytest.raises(BackendUnavailable) as info:
        await call
    return info.value.reason, info.value.op


async def test_out_of_memory_is_backend_unavailable_and_passes(server: RedisServer, client: str) -> None:
    admin = redis.Redis(port=server.port)
    backend = RedisBackend.from_url(server.url, lease_s=30, key_prefix="oom", client=client)
    await backend.load()
    held = await backend.admit(adm("before"))
    assert held.reservation is not None
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", 1)
    try:
        assert await failure(backend.admit(adm("during"))) == ("oom", "admit")
        assert await failure(backend.renew([held.reservation])) == ("oom", "renew")
        grow = backend.top_up(held.reservation, {Dimension.TOKENS: 5})
        assert await failure(grow) == ("oom", "top_up")
    finally:
        admin.config_set("maxmemory", 0)
    assert (await backend.admit(adm("after"))).allowed
    await backend.settle(held.reservation, usage_cost(10, 10))
    await backend.close()


async def test_authentication_errors_are_backend_unavailable(server: RedisServer, client: str) -> None:
    redis.Redis(port=server.port).config_set("requirepass", "right")
    for url in (server.url, url_with(server, ":wrong"), url_with(server, "nobody:right")):
        backend = RedisBackend.from_url(url, lease_s=30, key_prefix="auth", client=client)
        assert await failure(backend.check()) == ("auth", "load"), url
        assert await failure(backend.load()) == ("auth", "load"), url
        await backend.close()
    backend = RedisBackend.from_url(url_with(server, ":right"), lease_s=30, key_prefix="auth", client=client)
    await backend.check()
    await backend.load()
    assert (await backend.admit(adm("ok"))).allowed
    await backend.close()


async def test_acl_refusals_are_backend_unavailable(server: RedisServer, client: str) -> None:
    admin = redis.Redis(port=server.port)
    admin.execute_command("ACL", "SETUSER", "gw", "on", ">pw", "~*", "+@all", "-evalsha")
    backend = RedisBackend.from_url(url_with(server, "gw:pw"), lease_s=30, key_prefix="acl", client=client)
    await backend.load()  # SCRIPT LOAD is allowed, running the scripts is not
    assert await failure(backend.admit(adm("r"))) == ("noperm", "admit")
    await backend.close()


async def test_a_replica_is_read_only_and_said_so_at_start(
    server: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture, client: str
) -> None:
    (tmp_path / "replica").mkdir()
    replica = RedisServer(tmp_path / "replica")
    replica.start()
    try:
        redis.Redis(port=replica.port).replicaof("127.0.0.1", server.port)
        backend = RedisBackend.from_url(replica.url, lease_s=30, key_prefix="ro", client=client)
        await backend.check()  # not refused (Sentinel may promote it), but logged
        assert "replica" in caplog.text
        await backend.load()
        assert await failure(backend.admit(adm("r"))) == ("readonly", "admit")
        await backend.close()
    finally:
        replica.kill()


async def test_a_script_error_is_backend_unavailable(server: RedisServer, client: str) -> None:
    """A usage too large for Redis integers (the issue's 10^18: Lua prints it as 1e+18)."""
    backend = RedisBackend.from_url(server.url, lease_s=30, key_prefix="script", client=client)
    await backend.load()
    decision = await backend.admit(adm("huge"))
    assert decision.reservation is not None
    huge = backend.settle(decision.reservation, usage_cost(10**18, 0))
    assert await failure(huge) == ("script", "settle")
    await backend.close()


def run_on_both_loops(make: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(make())
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(make())


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_wrong_password_leaks_no_socket(server: RedisServer) -> None:
    redis.Redis(port=server.port).config_set("requirepass", "right")

    async def scenario() -> None:
        client = RespClient.from_url(url_with(server, ":wrong"))
        backend = RedisBackend(client, lease_s=30, key_prefix="fd")
        for _ in range(5):  # the loop's own descriptors settle first
            await failure(backend.load())
        await asyncio.sleep(0.05)
        before = open_fds()
        for _ in range(200):
            assert await failure(backend.load()) == ("auth", "load")
        await asyncio.sleep(0.05)  # aborted transports close on the next loop turns
        after = open_fds()
        print(f"\n[fds] before 200 failed AUTHs: {before}, after: {after}")
        assert after <= before, (before, after)
        await backend.close()

    run_on_both_loops(scenario)


def start_node(workdir: Path, *extra: str) -> tuple[subprocess.Popen[bytes], int]:
    assert REDIS_SERVER is not None
    port = free_port()
    while port > 55_000:  # a cluster node also listens on port + 10000
        port = free_port()
    args = [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    out = subprocess.DEVNULL
    proc = subprocess.Popen([*args, *extra], cwd=workdir, stdout=out, stderr=out)
    client = redis.Redis(host="127.0.0.1", port=port)

    def pong() -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    def exited() -> None:
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with {proc.returncode}")

    try:
        wait_until(pong, f"the cluster node on {port} to answer PING", timeout=10, interval=0.02, fail=exited)
    except BaseException:
        proc.kill()
        raise
    return proc, port


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[int, int]]:
    """Two Redis Cluster nodes: the second serves every slot, so the first answers MOVED."""
    procs = []
    ports = []
    for i in range(2):
        (tmp_path / f"node{i}").mkdir()
        proc, port = start_node(tmp_path / f"node{i}", "--cluster-enabled", "yes")
        procs.append(proc)
        ports.append(port)
    try:
        a, b = (redis.Redis(host="127.0.0.1", port=p) for p in ports)
        b.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        a.execute_command("CLUSTER", "MEET", "127.0.0.1", ports[1])
        wait_until(
            lambda: b"cluster_state:ok" in a.execute_command("CLUSTER", "INFO"),
            "the two cluster nodes to converge",
            timeout=20,
            interval=0.1,
        )
        yield ports[0], ports[1]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


async def test_a_standalone_client_on_a_cluster_node_gets_moved_as_backend_unavailable(
    cluster: tuple[int, int], client: str
) -> None:
    """What the gateway's start-up check (standalone mode on a cluster node) prevents: a client that
    follows no redirects sees every call MOVED."""
    node = f"redis://127.0.0.1:{cluster[0]}/0"
    backend = RedisBackend.from_url(node, lease_s=30, key_prefix="cl", client=client)
    await backend.check()  # the mode is the gateway's check, not the limiter's
    await backend.load()
    with pytest.raises(BackendUnavailable) as info:
        await backend.admit(adm("r"))
    assert (info.value.reason, info.value.op) == ("moved", "admit")
    reservation = Reservation("r", RULES, {Dimension.TOKENS: 1}, "standard")
    assert await failure(backend.renew([reservation])) == ("moved", "renew")
    await backend.close()


POLICY = """\
pools:
  - {name: gpu, model: m, endpoints: {static: ["http://127.0.0.1:1"]}}
  - {name: hosted, engine: litellm, model: openai/gpt-4o-mini}
  - {name: strict, model: m, endpoints: {static: ["http://127.0.0.1:1"]}, on_backend_error: fail_closed}
models:
  - {name: gpu, route: {pool: gpu}}
  - {name: hosted, route: {pool: hosted}}
  - {name: strict, route: {pool: strict}}
limits: {backend: redis}
"""


async def test_the_gateway_applies_each_pools_failure_mode_when_redis_fails() -> None:
    """Built as the gateway builds it: Redis is down from the start (nothing listens); the gateway still
    starts, counts the error, and each pool gets its own mode (litellm: fail_closed)."""
    components = build(
        parse_policy(POLICY, "<test>"), Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0")
    )
    await components.start()
    assert components.failover is not None and components.failover.errors == {("load", "connection"): 1}
    tenant = Tenant("k", "app", "org", "standard")
    admissions = components.admissions
    ticket = await admissions.admit("r1", tenant, "gpu", 10, 10, False)  # fail_open (the default)
    admissions.settle(ticket, 10, 10)
    for i, pool in enumerate(("hosted", "strict")):
        with pytest.raises(UpstreamUnavailableError) as info:
            await admissions.admit(f"r{i + 2}", tenant, pool, 10, 10, False)
        assert info.value.status == 503 and info.value.code == "rate_limiter_unavailable"
    await components.close()


async def test_the_gateway_refuses_a_wrong_password_at_start(server: RedisServer) -> None:
    redis.Redis(port=server.port).config_set("requirepass", "right")
    components = build(parse_policy(POLICY, "<test>"), Settings(redis_url=url_with(server, ":wrong")))
    with pytest.raises(ConfigError) as info:
        await components.start()
    message = str(info.value)
    assert "LLMGW_REDIS_PASSWORD" in message and "authentication failed" in message
    assert "wrong" not in message.replace("WRONGPASS", "")  # the setting is named, its value never
    await components.close()


async def test_the_gateway_refuses_to_start_on_a_cluster_node_in_standalone_mode(
    cluster: tuple[int, int],
) -> None:
    settings = Settings(redis_url=f"redis://127.0.0.1:{cluster[0]}/0")
    components = build(parse_policy(POLICY, "<test>"), settings)
    with pytest.raises(ConfigError) as info:
        await components.start()
    assert "cluster_enabled:1" in str(info.value) and "LLMGW_REDIS_MODE=cluster" in str(info.value)
    await components.close()


async def test_the_gateway_admits_on_a_cluster_in_cluster_mode(cluster: tuple[int, int]) -> None:
    """Seeded with the node that serves no slot: the cluster client learns the map and follows it."""
    settings = Settings(redis_mode="cluster", redis_url=f"redis://127.0.0.1:{cluster[0]}")
    components = build(parse_policy(POLICY, "<test>"), settings)
    await components.start()
    assert components.failover is not None and components.failover.errors == {}
    tenant = Tenant("k", "app", "org", "standard")
    ticket = await components.admissions.admit("c1", tenant, "strict", 10, 10, False)  # fail_closed pool
    components.admissions.settle(ticket, 10, 10)
    await components.close()
