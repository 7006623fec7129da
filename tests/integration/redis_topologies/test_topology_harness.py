"""The harness of tests/support/redis_topologies.py on its own, before any gateway uses it: the cluster
forms and a replica takes a killed primary's slots over; the sentinels promote the replica when the
primary is killed; the TLS server refuses a client without a certificate, one that trusts another CA,
and a wrong password. Every process is gone and the directory removed after `stop()`."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode
from redis.cluster import RedisCluster as ClusterClient
from redis.retry import Retry
from redis.sentinel import Sentinel

from tests.support.redis_topologies import REDIS_SERVER, RedisCluster, SentinelGroup, TlsRedis, key_slot

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not on PATH")


def test_key_slot_matches_redis() -> None:
    # Known values (CLUSTER KEYSLOT): "foo" 12182, "{user1000}.following" = "user1000" 3443 (spec example).
    assert key_slot("foo") == 12182
    assert key_slot("{user1000}.following") == key_slot("{user1000}.followers") == 3443
    assert key_slot("{llmgw}:org:acme:tokens") == key_slot("llmgw")
    assert key_slot("{}x") == key_slot("{}x")  # an empty tag hashes the whole key


def test_cluster_forms_and_fails_over(tmp_path: Path) -> None:
    workdir = tmp_path / "cluster"
    cluster = RedisCluster(workdir, primaries=3, replicas_per_primary=1)
    with cluster:
        assert len(cluster.seeds) == 6
        nodes = [ClusterNode(*s.split(":")) for s in cluster.seeds]
        with ClusterClient(startup_nodes=nodes) as c:
            assert c.execute_command("CLUSTER KEYSLOT", "{llmgw}:x") == key_slot("{llmgw}")
            c.set("{llmgw}:probe", "1")
            for i in range(30):  # keys on every shard
                c.set(f"k{i}", i)
        old = cluster.kill_primary_of("{llmgw}")
        assert old in cluster.seeds
        new = cluster.wait_failover("{llmgw}", old)
        assert new != old
        with ClusterClient(startup_nodes=[n for n in nodes if f"{n.host}:{n.port}" != old]) as c:
            c.set("{llmgw}:after", "2")
            assert c.get("{llmgw}:after") == b"2"
        procs = [n.proc for n in cluster.nodes]
    assert all(p is not None and p.poll() is not None for p in procs)
    assert not workdir.exists()


def test_sentinel_group_fails_over(tmp_path: Path) -> None:
    with SentinelGroup(tmp_path / "sentinel") as group:
        assert group.sentinels.count(",") == 2
        primary = group.current_primary()
        sentinel = Sentinel(group.sentinel_addresses, socket_timeout=1.0)
        master = sentinel.master_for(group.master_name, socket_timeout=1.0)
        master.set("before", "1")
        assert group.kill_primary() == primary
        new = group.wait_failover(primary)
        assert new != primary
        assert group.current_primary() == new
        master = sentinel.master_for(group.master_name, socket_timeout=1.0)
        master.set("after", "2")
        assert master.get("after") == b"2"


def test_tls_server_refuses_what_it_must(tmp_path: Path) -> None:
    with TlsRedis(tmp_path / "tls") as tls:
        with tls.client() as c:
            assert c.ping()
        # No client certificate: the server ends the handshake.
        with pytest.raises(redis.ConnectionError), tls.client(cert=False) as c:
            c.ping()
        # Trusting only an unrelated CA: the client refuses the server's certificate.
        with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
            with tls.client(ca_file=tls.wrong_ca_file) as c:
                c.ping()
        # A client certificate the server's CA did not sign.
        wrong_cert: dict[str, Any] = {
            "ssl_certfile": str(tls.wrong_client_cert_file),
            "ssl_keyfile": str(tls.wrong_client_key_file),
        }
        with pytest.raises(redis.ConnectionError), tls.client(cert=False, **wrong_cert) as c:
            c.ping()
        # The right certificate, the wrong password.
        with pytest.raises(redis.AuthenticationError), tls.client(password="wrong") as c:
            c.ping()
        # Plain TCP on the TLS port: no answer a client could take for Redis.
        with (
            pytest.raises(redis.ConnectionError),
            redis.Redis("127.0.0.1", tls.port, socket_timeout=1, retry=Retry(NoBackoff(), 0)) as c,
        ):
            c.ping()
        # Host name verification: the server certificate names localhost and 127.0.0.1.
        with tls.client(ssl_check_hostname=True, ssl_cert_reqs=ssl.CERT_REQUIRED) as c:
            assert c.ping()
