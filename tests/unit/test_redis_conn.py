"""gateway/redis_conn.py: the LLMGW_REDIS_* settings as one validated target, the clients built from it
(options every user shares, no retries for the limiter), the start-up check that names a wrong setting,
and `llmgw serve` printing it without a traceback. No Redis here: clients are built (no I/O until a
command) and the checks run against fakes; the real-process topologies are tests/integration."""

from __future__ import annotations

import ssl
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
import redis.exceptions as rexc
import uvicorn

from gateway.config import ConfigError
from gateway.edge.server import serve
from gateway.redis_conn import (
    RedisConfigError,
    RedisTarget,
    Tls,
    _Connection,
    _SentinelConnection,
    _SentinelPrimary,
    _SentinelTlsConnection,
    _TlsConnection,
    check_server,
    commands_client,
    config_problem,
    preflight,
    redis_client,
    script_client,
    target_of,
)
from gateway.settings import Settings
from ratelimit.resp import RedisPyClient, RespClient, parse_info, reason_of

SECRET = "s3cret-pw"


def settings(**kw: Any) -> Settings:
    # Every redis_ field given, so that an LLMGW_REDIS_* of the developer's environment cannot leak in.
    defaults = {k: f.default for k, f in Settings.model_fields.items() if k.startswith("redis_")}
    return Settings(**{**defaults, **kw})


def refused(**kw: Any) -> str:
    with pytest.raises(RedisConfigError) as info:
        target_of(settings(**kw))
    assert isinstance(info.value, ConfigError)  # what `llmgw serve` prints instead of a traceback
    return str(info.value)


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A self-signed CA and a client certificate + key signed by it (openssl, as the chart's users do)."""
    d = tmp_path_factory.mktemp("pem")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/CN=test-ca")  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "client.key", "-out", "client.csr",
        "-subj", "/CN=gateway")  # fmt: skip
    run("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "client.pem", "-days", "2")  # fmt: skip
    (d / "garbage.pem").write_text("not a certificate\n")
    return {
        "ca": d / "ca.pem",
        "cert": d / "client.pem",
        "key": d / "client.key",
        "garbage": d / "garbage.pem",
    }


# --- settings -> target -------------------------------------------------------------------------------


def test_no_url_no_redis() -> None:
    assert target_of(settings()) is None


def test_standalone_from_the_url() -> None:
    t = target_of(settings(redis_url=f"redis://gw:{SECRET}@redis.svc:6380/3"))
    want = RedisTarget("standalone", (("redis.svc", 6380),), db=3, username="gw", password=SECRET)
    assert t == replace(want, limiter_client="resp")  # auto: the lean client on standalone
    assert SECRET not in repr(t) and t.where == "redis.svc:6380"
    plain = target_of(settings(redis_url="redis.svc"))  # host alone: port 6379, database 0
    assert plain is not None and plain.nodes == (("redis.svc", 6379),) and plain.tls is None


def test_rediss_turns_tls_on_with_full_verification() -> None:
    t = target_of(settings(redis_url="rediss://redis.svc:6379"))
    assert t is not None and t.tls == Tls(verify="full")


def test_settings_override_the_urls_credentials() -> None:
    t = target_of(
        settings(redis_url="redis://old:oldpw@h:6379/0", redis_username="acl-user", redis_password="new")
    )
    assert t is not None and (t.username, t.password) == ("acl-user", "new")


def test_password_from_a_file(tmp_path: Path) -> None:
    f = tmp_path / "password"
    f.write_text(SECRET + "\n")  # as `echo` or a Secret written by hand leaves it
    t = target_of(settings(redis_url="redis://h", redis_password_file=str(f)))
    assert t is not None and t.password == SECRET
    f.write_text("")
    assert "LLMGW_REDIS_PASSWORD_FILE" in refused(redis_url="redis://h", redis_password_file=str(f))
    missing = refused(redis_url="redis://h", redis_password_file=str(tmp_path / "absent"))
    assert "LLMGW_REDIS_PASSWORD_FILE" in missing and "absent" in missing
    both = refused(redis_url="redis://h", redis_password="x", redis_password_file=str(f))
    assert "LLMGW_REDIS_PASSWORD and LLMGW_REDIS_PASSWORD_FILE" in both


def test_sentinel_password_from_a_file(tmp_path: Path) -> None:
    f = tmp_path / "sentinel-password"
    f.write_text("sentinel-pw\r\n")
    mode = {"redis_mode": "sentinel", "redis_sentinels": "s1", "redis_sentinel_master": "m"}
    t = target_of(settings(**mode, redis_sentinel_password_file=str(f)))
    assert t is not None and t.sentinel_password == "sentinel-pw" and t.password is None
    both = refused(**mode, redis_sentinel_password="x", redis_sentinel_password_file=str(f))
    assert "LLMGW_REDIS_SENTINEL_PASSWORD and LLMGW_REDIS_SENTINEL_PASSWORD_FILE" in both
    missing = refused(**mode, redis_sentinel_password_file=str(tmp_path / "absent"))
    assert "LLMGW_REDIS_SENTINEL_PASSWORD_FILE: cannot read" in missing


def test_several_servers_in_standalone_mode_point_at_cluster_mode() -> None:
    message = refused(redis_url="redis://a:7000,redis://b:7001")
    assert "LLMGW_REDIS_MODE=cluster" in message


def test_cluster_seeds_as_urls_or_host_port() -> None:
    t = target_of(settings(redis_mode="cluster", redis_url=f"rediss://u:{SECRET}@a:7000, b:7001,c"))
    assert t is not None and t.mode == "cluster"
    assert t.nodes == (("a", 7000), ("b", 7001), ("c", 6379))
    assert (t.username, t.password) == ("u", SECRET) and t.tls is not None
    assert "database 0" in refused(redis_mode="cluster", redis_url="redis://a:7000/2")
    assert "one scheme" in refused(redis_mode="cluster", redis_url="redis://a:7000,rediss://b:7001")
    assert "LLMGW_REDIS_URL" in refused(redis_mode="cluster")


def test_sentinel_mode_needs_sentinels_and_master_and_no_url() -> None:
    t = target_of(
        settings(
            redis_mode="sentinel",
            redis_sentinels="s1:26379,s2, s3:26400",
            redis_sentinel_master="mymaster",
            redis_password=SECRET,
            redis_sentinel_password="sentinel-pw",
        )
    )
    assert t is not None and t.master == "mymaster" and t.password == SECRET
    assert t.nodes == (("s1", 26379), ("s2", 26379), ("s3", 26400)) and t.sentinel_password == "sentinel-pw"
    assert "mymaster" in t.where and SECRET not in repr(t) and "sentinel-pw" not in repr(t)
    no_master = refused(redis_mode="sentinel", redis_sentinels="s1")
    assert "LLMGW_REDIS_SENTINEL_MASTER" in no_master
    assert "LLMGW_REDIS_SENTINELS" in refused(redis_mode="sentinel", redis_sentinel_master="m")
    with_url = refused(
        redis_mode="sentinel", redis_sentinels="s1", redis_sentinel_master="m", redis_url="redis://h"
    )
    assert "LLMGW_REDIS_URL is not used" in with_url
    wrong_mode = refused(redis_url="redis://h", redis_sentinels="s1", redis_sentinel_master="m")
    assert "LLMGW_REDIS_MODE=sentinel" in wrong_mode


def test_the_resp_client_is_standalone_only() -> None:
    assert "LLMGW_REDIS_LIMITER_CLIENT=resp" in refused(
        redis_mode="cluster", redis_url="redis://a:7000", redis_limiter_client="resp"
    )
    t = target_of(settings(redis_url="redis://h", redis_limiter_client="resp"))
    assert t is not None and t.limiter_client == "resp"


def test_malformed_urls_name_the_setting_but_not_the_password() -> None:
    bad_port = refused(redis_url=f"redis://u:{SECRET}@h:notaport/0")
    assert "LLMGW_REDIS_URL" in bad_port and SECRET not in bad_port
    assert "scheme" in refused(redis_url="http://h:6379")
    assert "database" in refused(redis_url="redis://h:6379/zero")


def test_tls_settings_are_checked_at_once(pem: dict[str, Path], tmp_path: Path) -> None:
    ok = target_of(
        settings(
            redis_url="redis://h",
            redis_tls=True,
            redis_tls_ca_file=str(pem["ca"]),
            redis_tls_cert_file=str(pem["cert"]),
            redis_tls_key_file=str(pem["key"]),
            redis_tls_verify="ca",
            redis_tls_server_name="redis.internal",
        )
    )
    assert ok is not None and ok.tls == Tls(
        str(pem["ca"]), str(pem["cert"]), str(pem["key"]), "ca", "redis.internal"
    )
    no_key = refused(redis_url="rediss://h", redis_tls_cert_file=str(pem["cert"]))
    assert "LLMGW_REDIS_TLS_KEY_FILE" in no_key
    absent = refused(redis_url="rediss://h", redis_tls_ca_file=str(tmp_path / "nope.pem"))
    assert absent.startswith("LLMGW_REDIS_TLS_CA_FILE") and "nope.pem" in absent
    garbage = refused(redis_url="rediss://h", redis_tls_ca_file=str(pem["garbage"]))
    assert garbage.startswith("LLMGW_REDIS_TLS_CA_FILE: cannot load")
    mismatched = refused(
        redis_url="rediss://h", redis_tls_cert_file=str(pem["cert"]), redis_tls_key_file=str(pem["ca"])
    )
    assert "LLMGW_REDIS_TLS_CERT_FILE / LLMGW_REDIS_TLS_KEY_FILE" in mismatched
    off = refused(redis_url="redis://h", redis_tls_ca_file=str(pem["ca"]))
    assert "TLS is off" in off and "LLMGW_REDIS_TLS=true" in off
    name = refused(redis_mode="cluster", redis_url="rediss://a:7000", redis_tls_server_name="x")
    assert "LLMGW_REDIS_TLS_SERVER_NAME" in name and "cluster" in name


# --- clients ------------------------------------------------------------------------------------------


STANDALONE = RedisTarget("standalone", (("h", 6379),), db=2, username="u", password="p", timeout_s=0.3)
CLUSTER = RedisTarget("cluster", (("a", 7000), ("b", 7001)), username="u", password="p", timeout_s=0.3)
SENTINEL = RedisTarget("sentinel", (("s1", 26379), ("s2", 26379)), master="m", password="p", timeout_s=0.3)


def pool_kwargs(client: Any) -> dict[str, Any]:
    return dict(client.connection_pool.connection_kwargs)


async def test_standalone_clients_share_the_options_and_only_the_general_one_retries() -> None:
    general = redis_client(STANDALONE)
    limiter = script_client(STANDALONE)
    cache = commands_client(STANDALONE)
    assert isinstance(general, aioredis.Redis)
    assert isinstance(limiter, RedisPyClient) and isinstance(cache, RedisPyClient)
    for client, retries in ((general, 1), (limiter._client, 0), (cache._client, 0)):
        kw = pool_kwargs(client)
        assert (kw["host"], kw["port"], kw["db"], kw["username"], kw["password"]) == ("h", 6379, 2, "u", "p")
        assert kw["socket_timeout"] == kw["socket_connect_timeout"] == 0.3
        assert kw["decode_responses"] is False
        # A retried EVALSHA whose first attempt reached Redis would apply twice.
        assert kw["retry"].get_retries() == retries
    assert pool_kwargs(limiter._client)["protocol"] == pool_kwargs(cache._client)["protocol"] == 2
    assert general.connection_pool.connection_class is _Connection  # hiredis packing
    for c in (general, limiter, cache):
        await c.aclose()


async def test_the_resp_client_is_an_opt_in() -> None:
    resp = script_client(RedisTarget("standalone", (("h", 6379),), limiter_client="resp"))
    assert isinstance(resp, RespClient)
    tls = RedisTarget(
        "standalone", (("h", 6379),), tls=Tls(server_name="redis.internal"), limiter_client="resp"
    )
    over_tls = script_client(tls)
    assert isinstance(over_tls, RespClient)
    assert isinstance(over_tls._ssl, ssl.SSLContext) and over_tls._server_hostname == "redis.internal"


async def test_tls_connections_use_the_factorys_context_and_server_name(pem: dict[str, Path]) -> None:
    tls = Tls(str(pem["ca"]), str(pem["cert"]), str(pem["key"]), "full", "redis.internal")
    client = redis_client(RedisTarget("standalone", (("10.0.0.5", 6380),), tls=tls))
    pool = client.connection_pool
    assert pool.connection_class is _TlsConnection
    conn = pool.make_connection()  # type: ignore[no-untyped-call]
    args = conn._connection_arguments()
    assert args["host"] == "10.0.0.5" and args["server_hostname"] == "redis.internal"
    ctx = args["ssl"]
    assert isinstance(ctx, ssl.SSLContext) and ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
    await client.aclose()
    for verify, hostname, mode in (("ca", False, ssl.CERT_REQUIRED), ("none", False, ssl.CERT_NONE)):
        other = redis_client(RedisTarget("standalone", (("h", 1),), tls=Tls(verify=verify)))  # type: ignore[arg-type]
        made = other.connection_pool.make_connection()  # type: ignore[no-untyped-call]
        ctx = made._connection_arguments()["ssl"]
        assert (ctx.check_hostname, ctx.verify_mode) == (hostname, mode)
        await other.aclose()


async def test_cluster_clients() -> None:
    general = redis_client(CLUSTER)
    assert isinstance(general, aioredis.RedisCluster)
    assert [(n.host, n.port) for n in general.startup_nodes] == [("a", 7000), ("b", 7001)]
    assert general.retry.get_retries() == 1
    limiter = script_client(CLUSTER)
    assert isinstance(limiter, RedisPyClient)
    inner = limiter._client
    assert isinstance(inner, aioredis.RedisCluster) and inner.retry.get_retries() == 0
    kw = inner.connection_kwargs
    assert (kw["username"], kw["password"], kw["socket_timeout"], kw["protocol"]) == ("u", "p", 0.3, 2)
    tls = redis_client(RedisTarget("cluster", (("a", 7000),), tls=Tls(ca_file="/ca.pem", verify="ca")))
    kw = tls.connection_kwargs
    assert (kw["ssl_ca_certs"], kw["ssl_cert_reqs"], kw["ssl_check_hostname"]) == (
        "/ca.pem",
        "required",
        False,
    )
    for c in (general, limiter, tls):
        await c.aclose()


async def test_sentinel_clients_ask_the_sentinels_with_their_own_credentials(pem: dict[str, Path]) -> None:
    target = RedisTarget(
        "sentinel",
        (("s1", 26379), ("s2", 26380)),
        master="m",
        username="u",
        password="p",
        sentinel_password="sp",
        tls=Tls(str(pem["ca"])),
    )
    client = redis_client(target)
    assert isinstance(client, _SentinelPrimary) and client.managed_by is not None
    pool = client.connection_pool
    assert pool.service_name == "m" and pool.connection_class is _SentinelTlsConnection  # type: ignore[attr-defined]
    plain = redis_client(SENTINEL)
    assert plain.connection_pool.connection_class is _SentinelConnection
    await plain.aclose()
    kw = pool.connection_kwargs
    assert (kw["username"], kw["password"], kw["retry"].get_retries()) == ("u", "p", 1)
    sentinels = client.managed_by.sentinels
    assert [(pool_kwargs(s)["host"], pool_kwargs(s)["port"]) for s in sentinels] == [
        ("s1", 26379),
        ("s2", 26380),
    ]
    assert {pool_kwargs(s)["password"] for s in sentinels} == {"sp"}
    assert all(s.connection_pool.connection_class is _TlsConnection for s in sentinels)
    limiter = script_client(target)
    assert isinstance(limiter, RedisPyClient) and isinstance(limiter._client, aioredis.Redis)
    assert limiter._client.connection_pool.connection_kwargs["retry"].get_retries() == 0
    await client.aclose()
    await limiter.aclose()


def test_commands_are_packed_as_redis_py_packs_them() -> None:
    from redis.asyncio.connection import Connection

    ours, theirs = _Connection(), Connection()
    for args in (
        ("EVALSHA", "abc", 2, "{P}:a", b"{P}:b", 17, "k,100,5,0;"),
        ("SCRIPT LOAD", "return 1"),  # a two-word command is split, as redis-py does
        (b"SET", b"k", memoryview(b"value"), b"PX", 1500),
        ("HSET", "h", "f", 1.5, "g", "\u00e9t\u00e9"),
    ):
        assert b"".join(ours.pack_command(*args)) == b"".join(theirs.pack_command(*args)), args
    with pytest.raises(rexc.DataError):
        ours.pack_command("SET", "k", None)


async def test_a_full_pool_waits_for_a_connection_then_gives_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """redis-py's own pool raises MaxConnectionsError at once: under a burst past the pool size every
    extra admission would be a limiter outage."""
    import asyncio

    from redis.asyncio.connection import ConnectionPool

    from gateway.redis_conn import _WaitingPool

    async def connected(self: ConnectionPool, connection: Any) -> None:  # no server in unit tests
        return None

    monkeypatch.setattr(ConnectionPool, "ensure_connection", connected)
    pool = _WaitingPool(host="h", port=1, max_connections=1, wait_s=0.3)
    held = await pool.get_connection()
    waiting = asyncio.ensure_future(pool.get_connection())
    await asyncio.sleep(0.05)
    assert not waiting.done()
    await pool.release(held)
    assert await asyncio.wait_for(waiting, 1) is held  # handed over, not refused
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(rexc.MaxConnectionsError):
        await pool.get_connection()  # nobody releases: refused after wait_s
    assert 0.25 <= loop.time() - started < 1.0
    client = redis_client(STANDALONE)
    assert isinstance(client.connection_pool, _WaitingPool) and client.connection_pool.max_connections == 64
    await client.aclose()


class FakeCommands:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def execute_command(self, *args: Any) -> Any:
        self.calls.append(args)
        return [1, 0]

    async def script_load(self, source: str) -> bytes:
        return b"abc123"

    async def aclose(self) -> None:
        self.calls.append(("closed",))


async def test_the_redis_py_adapter_is_the_resp_clients_interface() -> None:
    fake = FakeCommands()
    adapter = RedisPyClient(fake)  # type: ignore[arg-type]
    assert await adapter.script_load("return 1") == "abc123"
    assert await adapter.evalsha("abc123", 2, "{P}:a", "{P}:b", "x") == [1, 0]
    assert await adapter.execute("GET", "k") == [1, 0]
    assert await adapter.execute(b"SET", b"k", b"v") == [1, 0]  # the cache names commands in bytes
    await adapter.aclose()
    calls = [("EVALSHA", "abc123", 2, "{P}:a", "{P}:b", "x"), ("GET", "k"), ("SET", b"k", b"v"), ("closed",)]
    assert fake.calls == calls


def test_info_and_cluster_errors_read_the_same_from_both_clients() -> None:
    parsed = {"redis_version": "7.0.15", "cluster_enabled": 1, "role": "master"}  # redis-py's INFO reply
    assert parse_info(parsed) == {"redis_version": "7.0.15", "cluster_enabled": "1", "role": "master"}
    try:
        try:
            raise rexc.ConnectionError("Error 111 connecting to a:7000. Connection refused.")
        except rexc.ConnectionError as e:
            raise rexc.RedisClusterException("Redis Cluster cannot be connected") from e
    except rexc.RedisClusterException as e:
        assert reason_of(e) == "connection"
    assert reason_of(rexc.RedisClusterException("All slots are not covered")) == "moved"


# --- start-up checks ----------------------------------------------------------------------------------


def chained(outer: BaseException, inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as e:
            raise outer from e
    except BaseException as e:
        return e


def verify_error(message: str) -> ssl.SSLCertVerificationError:
    e = ssl.SSLCertVerificationError(
        1, f"[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: {message}"
    )
    e.verify_message = message
    return e


AUTH = "LLMGW_REDIS_PASSWORD / LLMGW_REDIS_USERNAME"
TLS_TARGET = RedisTarget("standalone", (("redis.svc", 6380),), tls=Tls(ca_file="/etc/redis/ca.pem"))


SELF_SIGNED = verify_error("self-signed certificate in certificate chain")
MISMATCH = verify_error("Hostname mismatch, certificate is not valid for 'redis.svc'.")
CERT_REQUIRED = ssl.SSLError(1, "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate required")
NOT_TLS = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")
NO_CLUSTER = rexc.RedisClusterException("Cluster mode is not enabled on this node")


@pytest.mark.parametrize(
    ("error", "setting"),
    [
        (rexc.AuthenticationError("invalid username-password pair or user is disabled."), AUTH),
        (rexc.ResponseError("WRONGPASS invalid username-password pair"), AUTH),
        (rexc.AuthenticationError("Authentication required."), AUTH),
        (
            chained(rexc.ConnectionError("Error 1 connecting to redis.svc:6380."), SELF_SIGNED),
            "LLMGW_REDIS_TLS_CA_FILE: the certificate of redis.svc:6380 is not signed by a CA in "
            "/etc/redis/ca.pem",
        ),
        (chained(rexc.ConnectionError("x"), MISMATCH), "LLMGW_REDIS_TLS_SERVER_NAME / LLMGW_REDIS_TLS_"),
        (
            chained(rexc.ConnectionError("x"), CERT_REQUIRED),
            "LLMGW_REDIS_TLS_CERT_FILE / LLMGW_REDIS_TLS_KEY_FILE: redis.svc:6380 requires a client "
            "certificate",
        ),
        (chained(rexc.ConnectionError("x"), NOT_TLS), "LLMGW_REDIS_TLS: redis.svc:6380 does not answer TLS"),
        (
            chained(rexc.RedisClusterException("Redis Cluster cannot be connected."), NO_CLUSTER),
            "LLMGW_REDIS_MODE is cluster",
        ),
    ],
)  # fmt: skip
def test_configuration_errors_name_the_setting(error: BaseException, setting: str) -> None:
    message = config_problem(TLS_TARGET, error)
    assert message is not None and message.startswith(setting.split(":")[0]) and setting in message


@pytest.mark.parametrize(
    "error",
    [
        rexc.ConnectionError("Error 111 connecting to h:6379. Connection refused."),
        rexc.TimeoutError("Timeout connecting to server"),
        rexc.NoPermissionError("this user has no permissions to run the 'info' command"),
        rexc.BusyLoadingError("Redis is loading the dataset in memory"),
    ],
)
def test_an_outage_is_no_configuration_error(error: BaseException) -> None:
    assert config_problem(STANDALONE, error) is None


class FakeServer:
    """The general client as `check_server` uses it: `info("cluster")` answers or raises."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    async def info(self, section: str) -> Any:
        assert section == "cluster"
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


async def check(target: RedisTarget, answer: Any) -> None:
    await check_server(target, FakeServer(answer))  # type: ignore[arg-type]


async def test_a_cluster_node_in_standalone_mode_is_refused_naming_the_mode() -> None:
    with pytest.raises(RedisConfigError) as info:
        await check(STANDALONE, {"cluster_enabled": 1})
    assert str(info.value) == (
        "LLMGW_REDIS_MODE is standalone but the server at h:6379 is a cluster node (cluster_enabled:1): "
        "set LLMGW_REDIS_MODE=cluster"
    )
    await check(STANDALONE, {"cluster_enabled": 0})
    await check(CLUSTER, {"cluster_enabled": 1})


async def test_check_server_refuses_bad_credentials_lets_an_outage_through_and_tolerates_acls() -> None:
    with pytest.raises(RedisConfigError, match="LLMGW_REDIS_PASSWORD"):
        await check(STANDALONE, rexc.AuthenticationError("invalid username-password pair"))
    with pytest.raises(rexc.ConnectionError):  # the failure mode's business, not a refusal
        await check(STANDALONE, rexc.ConnectionError("Connection refused."))
    await check(STANDALONE, rexc.NoPermissionError("no permissions to run the 'info' command"))


class FakeSentinel:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    async def execute_command(self, *args: Any) -> Any:
        assert args == ("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "m")
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


async def sentinel_check(*answers: Any) -> None:
    target = RedisTarget("sentinel", tuple(("s", 26379 + i) for i in range(len(answers))), master="m")
    primary = redis_client(target)
    assert isinstance(primary, _SentinelPrimary) and primary.managed_by is not None
    real = primary.managed_by.sentinels
    primary.managed_by.sentinels = [FakeSentinel(a) for a in answers]  # type: ignore[misc]
    try:
        primary.info = FakeServer({"cluster_enabled": 0}).info  # type: ignore[method-assign,assignment]
        await check_server(target, primary)
    finally:
        primary.managed_by.sentinels = real
        await primary.aclose()


async def test_sentinel_problems_name_the_sentinel_settings() -> None:
    down = rexc.ConnectionError("Error 111 connecting to s:26379. Connection refused.")
    with pytest.raises(RedisConfigError) as info:
        await sentinel_check(down, down)
    assert str(info.value).startswith("LLMGW_REDIS_SENTINELS: no sentinel answered")
    with pytest.raises(RedisConfigError) as info:
        await sentinel_check(down, None)
    assert str(info.value).startswith("LLMGW_REDIS_SENTINEL_MASTER") and "'m'" in str(info.value)
    with pytest.raises(RedisConfigError) as info:
        await sentinel_check(rexc.AuthenticationError("invalid password"), down)
    assert str(info.value).startswith("LLMGW_REDIS_SENTINEL_PASSWORD / LLMGW_REDIS_SENTINEL_USERNAME")
    await sentinel_check(down, [b"10.0.0.7", b"6379"])  # one sentinel that knows the primary is enough


async def test_preflight_lets_an_outage_through(caplog: pytest.LogCaptureFixture) -> None:
    port = _closed_port()
    await preflight(RedisTarget("standalone", (("127.0.0.1", port),), timeout_s=0.2))
    assert "did not answer at start-up" in caplog.text


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"LLMGW_REDIS_MODE": "clustr"}, "redis_mode"),
        ({"LLMGW_REDIS_MODE": "cluster"}, "LLMGW_REDIS_MODE=cluster needs LLMGW_REDIS_URL"),
        (
            {"LLMGW_REDIS_URL": "redis://127.0.0.1:1", "LLMGW_REDIS_TLS_CA_FILE": "/nonexistent/ca.pem"},
            "LLMGW_REDIS_TLS_CA_FILE",
        ),
    ],
)  # fmt: skip
def test_serve_prints_bad_redis_settings_without_a_traceback(
    env: dict[str, str], named: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in Settings.model_fields:
        monkeypatch.delenv(f"LLMGW_{name.upper()}", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: pytest.fail("uvicorn.run was called"))
    assert serve(None, None, None, None) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmgw: cannot start") and named in err and "Traceback" not in err


class Answers:
    """A general client whose `info` answers each call with the next of `answers`."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.closed = False

    async def info(self, section: str) -> Any:
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def aclose(self) -> None:
        self.closed = True


async def test_preflight_asks_again_before_calling_it_an_outage(monkeypatch: pytest.MonkeyPatch) -> None:
    """TLS 1.3: a server that wants a client certificate may show a reset on the first read, the alert
    on the next."""
    import gateway.redis_conn as redis_conn

    reset = rexc.ConnectionError("Error while reading from h:6379 : (104, 'Connection reset by peer')")
    alert = chained(rexc.ConnectionError("Error while reading"), CERT_REQUIRED)
    client = Answers(reset, alert)
    monkeypatch.setattr(redis_conn, "redis_client", lambda target: client)
    with pytest.raises(RedisConfigError, match="LLMGW_REDIS_TLS_CERT_FILE"):
        await preflight(STANDALONE)
    assert client.closed
    down = Answers(reset, reset, reset)
    monkeypatch.setattr(redis_conn, "redis_client", lambda target: down)
    await preflight(STANDALONE)  # three times down: an outage, serving starts
    assert down.closed and not down.answers


def test_a_config_error_of_the_lifespan_is_logged_without_its_traceback() -> None:
    import logging

    from gateway.edge.server import ConfigErrorsWithoutTraceback

    starlette = (
        "Traceback (most recent call last):\n"
        '  File "/work/main/gateway/parts.py", line 83, in _check_redis\n'
        "    await check_server(target, client)\n"
        "gateway.redis_conn.RedisConfigError: LLMGW_REDIS_PASSWORD / LLMGW_REDIS_USERNAME: authentication "
        "failed at h:6379 (WRONGPASS)\n"
    )
    record = logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, "%s", (starlette,), None)
    assert ConfigErrorsWithoutTraceback().filter(record)
    assert record.getMessage() == (
        "llmgw: cannot start:\nLLMGW_REDIS_PASSWORD / LLMGW_REDIS_USERNAME: authentication failed at h:6379 "
        "(WRONGPASS)"
    )
    bug = "Traceback (most recent call last):\n  ...\nKeyError: 'x'\n"
    other = logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, bug, (), None)
    assert ConfigErrorsWithoutTraceback().filter(other) and other.getMessage() == bug  # a bug keeps it


def test_the_limiter_client_is_resp_on_standalone_and_redis_py_elsewhere_by_default() -> None:
    """`auto` (the default): the hand-written client where it may go (redis-py measured +12 % latency
    per request on standalone, docs/design/004), redis-py where redirects and sentinels are needed."""
    standalone = target_of(settings(redis_url="redis://r:6379/0"))
    cluster = target_of(settings(redis_mode="cluster", redis_url="redis://a:7000,redis://b:7001"))
    sentinel = target_of(
        settings(redis_mode="sentinel", redis_sentinels="s1:26379", redis_sentinel_master="m")
    )
    assert standalone is not None and standalone.limiter_client == "resp"
    assert cluster is not None and cluster.limiter_client == "redis-py"
    assert sentinel is not None and sentinel.limiter_client == "redis-py"
    chosen = target_of(settings(redis_url="redis://r:6379/0", redis_limiter_client="redis-py"))
    assert chosen is not None and chosen.limiter_client == "redis-py"
