"""One Redis connection factory for every Redis user of the gateway (issue 41; docs/design/004,
"Deployments").

The `LLMGW_REDIS_*` settings become one frozen, validated `RedisTarget` (`target_of`), and every client
is built from it, so the limiter, key store, response cache, feedback, outcome memory, calibration
sharing and revocations agree on the mode, the credentials, TLS and the timeouts:

    redis_client(target)     redis-py asyncio client for general use (one retry: its users' commands are
                             idempotent reads and overwrites, and a retry hides a connection that went
                             stale while Redis restarted)
    script_client(target)    the limiter's `ScriptClient`: `ratelimit.resp.RedisPyClient` over a client
                             with NO retries (a retried EVALSHA could apply twice), or the lean
                             `RespClient` (`LLMGW_REDIS_LIMITER_CLIENT=resp`, standalone only)
    commands_client(target)  the response cache's `execute` client (an error is a miss: no retries on
                             a standalone server, one after a failover elsewhere)
    check_server(target, c)  start-up: the server fits the settings, else `RedisConfigError` naming the
                             setting; an outage propagates (the failure mode decides, not a crash)
    preflight(target)        `check_server` on a client of its own (`llmgw serve`, before uvicorn)

Modes:
- standalone: `redis.asyncio.Redis` on the server of `LLMGW_REDIS_URL`;
- sentinel: `Sentinel.master_for`: every new connection asks the sentinels (`LLMGW_REDIS_SENTINELS`) for
  the primary of `LLMGW_REDIS_SENTINEL_MASTER`, a READONLY from a demoted primary drops the connection,
  and Sentinel kills the old primary's client connections when it demotes it, so pooled connections
  reconnect to the new one by themselves (no restart). Calls caught by the switch fail: the limiter's
  as `BackendUnavailable` (its failure mode), the others as their callers handle Redis errors;
- cluster: `redis.asyncio.RedisCluster` from the seed nodes of `LLMGW_REDIS_URL`: it learns the slot map,
  follows MOVED / ASK, re-reads the map after a failover; pub/sub is `RedisCluster.pubsub()` (a
  PUBLISH reaches every node). Every key of one multi-key command must share a slot there: the
  limiter's and key store's keys share one hash tag each, the cache's commands are single-key; feedback
  lookups (MGET of two keys) and outcome sharing (one XREAD over several streams) do not yet (docs/
  design/004, "Deployments").

TLS: one `ssl.SSLContext` per client (`tls_context`) for standalone, sentinel (the sentinels too) and
the RESP client; `RedisCluster` takes redis-py's own `ssl_*` options, which mean the same. The CA file
is trusted in addition to the system's CAs (as redis-py does). `LLMGW_REDIS_TLS_SERVER_NAME` (SNI and
the name checked) needs a connection class of our own (`_TlsConnection`); RedisCluster takes none, so
it is refused in cluster mode.

`RedisConfigError` is a `ConfigError`: `llmgw serve` prints it ("cannot start") instead of a traceback.
Messages name the setting and the server (`host:port`), never a password.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import unquote, urlsplit

import redis.asyncio as aioredis
import redis.exceptions as rexc
from pydantic import SecretStr
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import Connection, ConnectionPool
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool, SentinelManagedConnection
from redis.backoff import NoBackoff
from redis.connection import HiredisRespSerializer

from gateway.config import ConfigError
from gateway.settings import Settings
from ratelimit.resp import CLIENT_ERRORS, RedisPyClient, RespClient

Mode = Literal["standalone", "sentinel", "cluster"]
Verify = Literal["full", "ca", "none"]
LimiterClient = Literal["redis-py", "resp"]

REDIS_PORT = 6379
SENTINEL_PORT = 26379
# Connections per client (standalone, sentinel): redis-py sends one command per connection at a time,
# so a client holds as many as it has commands in flight, up to this; more wait (`_WaitingPool`). The
# lean RESP client pipelines everything over one.
MAX_CONNECTIONS = 64
# The async cluster client raises MaxConnectionsError instead of waiting when a node's pool is full; the
# limiter sends every admission to one node (one hash tag), so its pool must outgrow peak concurrency.
CLUSTER_MAX_CONNECTIONS = 4096
_AUTH_SETTINGS = "LLMGW_REDIS_PASSWORD / LLMGW_REDIS_USERNAME"
_SENTINEL_AUTH_SETTINGS = "LLMGW_REDIS_SENTINEL_PASSWORD / LLMGW_REDIS_SENTINEL_USERNAME"

log = logging.getLogger("llmgw.redis")


class RedisConfigError(ConfigError):
    """Redis settings that cannot work: the message names the setting (`LLMGW_REDIS_...`)."""


@dataclass(frozen=True, slots=True)
class Tls:
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: Verify = "full"
    server_name: str | None = None


@dataclass(frozen=True, slots=True)
class RedisTarget:
    """Where Redis is and how to talk to it: plain data, validated by `target_of`.

    `nodes`: standalone the server, cluster the seed nodes, sentinel the sentinels."""

    mode: Mode
    nodes: tuple[tuple[str, int], ...]
    master: str | None = None  # sentinel: the monitored name
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    sentinel_username: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)
    tls: Tls | None = None
    timeout_s: float = 0.25
    limiter_client: LimiterClient = "redis-py"

    @property
    def where(self) -> str:
        """The servers, for messages (no credentials)."""
        hosts = ",".join(f"{h}:{p}" for h, p in self.nodes)
        if self.mode == "sentinel":
            return f"the primary '{self.master}' of the sentinels {hosts}"
        return hosts


# --- settings -> target -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Url:
    host: str
    port: int
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool | None = None  # None: host:port, no scheme to say


def _parse_node(setting: str, item: str, default_port: int) -> _Url:
    """`redis[s]://[user:password@]host[:port][/db]` or `host[:port]`."""
    text = item.strip()
    bare = "://" not in text
    if bare:
        text = f"redis://{text}"
    try:
        u = urlsplit(text)
        port = u.port or default_port
    except ValueError as e:
        raise RedisConfigError(
            f"{setting}: {_safe(item)!r} is not host:port or a redis:// URL ({e})"
        ) from None
    if u.scheme not in ("redis", "rediss"):
        raise RedisConfigError(f"{setting}: scheme '{u.scheme}' is not redis:// or rediss://")
    if not u.hostname:
        raise RedisConfigError(f"{setting}: {_safe(item)!r} names no host")
    path = u.path.strip("/")
    if not path.isdigit() and path:
        raise RedisConfigError(f"{setting}: the database in {_safe(item)!r} is not a number")
    return _Url(
        host=u.hostname,
        port=port,
        db=int(path or 0),
        username=unquote(u.username) if u.username else None,
        password=unquote(u.password) if u.password else None,
        tls=None if bare else u.scheme == "rediss",
    )


def _safe(item: str) -> str:
    """A URL as it may appear in a message: the password replaced."""
    u = urlsplit(item.strip() if "://" in item else f"redis://{item.strip()}")
    if u.password is None:
        return item.strip()
    netloc = u.netloc.replace(f":{u.password}@", ":***@", 1)
    return u._replace(netloc=netloc).geturl()


def _nodes(setting: str, value: str, default_port: int) -> list[_Url]:
    items = [i for i in value.split(",") if i.strip()]
    if not items:
        raise RedisConfigError(f"{setting} is empty")
    return [_parse_node(setting, i, default_port) for i in items]


def _password(settings: Settings, from_url: str | None) -> str | None:
    """The servers' password: LLMGW_REDIS_PASSWORD, its file, else the URL's."""
    given = settings.redis_password
    secret = _secret("LLMGW_REDIS_PASSWORD", given, settings.redis_password_file)
    return from_url if secret is None else secret


def _secret(setting: str, value: SecretStr | None, file: str | None) -> str | None:
    """A password given as `setting` or as `setting`_FILE (a mounted Secret); None: neither."""
    if value is not None and file:
        raise RedisConfigError(f"{setting} and {setting}_FILE are both set: keep one")
    if value is not None:
        return value.get_secret_value()
    if not file:
        return None
    path = Path(file)
    try:
        text = path.read_text()
    except OSError as e:
        raise RedisConfigError(f"{setting}_FILE: cannot read {path}: {e.strerror}") from None
    # A Secret written with `echo` ends in a newline that is no part of the password.
    secret = text[:-1] if text.endswith("\n") else text
    secret = secret[:-1] if secret.endswith("\r") else secret
    if not secret:
        raise RedisConfigError(f"{setting}_FILE: {path} is empty")
    return secret


def _tls(settings: Settings, on: bool, mode: Mode) -> Tls | None:
    files = {
        "LLMGW_REDIS_TLS_CA_FILE": settings.redis_tls_ca_file,
        "LLMGW_REDIS_TLS_CERT_FILE": settings.redis_tls_cert_file,
        "LLMGW_REDIS_TLS_KEY_FILE": settings.redis_tls_key_file,
    }
    if not on:
        named = [k for k, v in files.items() if v] + (
            ["LLMGW_REDIS_TLS_SERVER_NAME"] if settings.redis_tls_server_name else []
        )
        if named:
            raise RedisConfigError(
                f"{', '.join(named)} set but TLS is off: set LLMGW_REDIS_TLS=true (or use rediss://)"
            )
        return None
    for name, value in files.items():
        if value and not Path(value).is_file():
            raise RedisConfigError(f"{name}: {value} does not exist or is not a file")
    if bool(settings.redis_tls_cert_file) != bool(settings.redis_tls_key_file):
        raise RedisConfigError(
            "LLMGW_REDIS_TLS_CERT_FILE and LLMGW_REDIS_TLS_KEY_FILE go together: a client certificate "
            "needs its key"
        )
    if settings.redis_tls_server_name and mode == "cluster":
        raise RedisConfigError(
            "LLMGW_REDIS_TLS_SERVER_NAME is not supported with LLMGW_REDIS_MODE=cluster (the cluster "
            "client checks each node's own host name): unset it, or use LLMGW_REDIS_TLS_VERIFY=ca"
        )
    tls = Tls(
        ca_file=settings.redis_tls_ca_file,
        cert_file=settings.redis_tls_cert_file,
        key_file=settings.redis_tls_key_file,
        verify=settings.redis_tls_verify,
        server_name=settings.redis_tls_server_name,
    )
    tls_context(tls)  # unreadable PEM files fail here, named, not at the first connection
    return tls


def target_of(settings: Settings) -> RedisTarget | None:
    """The settings as a `RedisTarget`; None when no Redis is configured (standalone or cluster without
    `LLMGW_REDIS_URL`). Raises `RedisConfigError` for settings that cannot work together."""
    mode: Mode = settings.redis_mode
    # auto: the lean client where it can go (standalone), redis-py where redirects and sentinels are needed
    limiter: LimiterClient = (
        ("resp" if mode == "standalone" else "redis-py")
        if settings.redis_limiter_client == "auto"
        else settings.redis_limiter_client
    )
    if settings.redis_limiter_client == "resp" and mode != "standalone":
        raise RedisConfigError(
            f"LLMGW_REDIS_LIMITER_CLIENT=resp works with LLMGW_REDIS_MODE=standalone only (it follows no "
            f"cluster redirects and asks no sentinels), not {mode}: use redis-py"
        )
    sentinel_settings = settings.redis_sentinels or settings.redis_sentinel_master
    if mode != "sentinel" and sentinel_settings:
        raise RedisConfigError(
            "LLMGW_REDIS_SENTINELS / LLMGW_REDIS_SENTINEL_MASTER are set but LLMGW_REDIS_MODE is "
            f"{mode}: set LLMGW_REDIS_MODE=sentinel (or unset them)"
        )
    if mode == "sentinel":
        if settings.redis_url:
            raise RedisConfigError(
                "LLMGW_REDIS_URL is not used with LLMGW_REDIS_MODE=sentinel (the sentinels name the "
                "primary): unset it; the servers' user and password go in LLMGW_REDIS_USERNAME / "
                "LLMGW_REDIS_PASSWORD, TLS in LLMGW_REDIS_TLS"
            )
        if not settings.redis_sentinels or not settings.redis_sentinel_master:
            raise RedisConfigError(
                "LLMGW_REDIS_MODE=sentinel needs LLMGW_REDIS_SENTINELS (host:port,...) and "
                "LLMGW_REDIS_SENTINEL_MASTER (the name the sentinels monitor)"
            )
        sentinels = _nodes("LLMGW_REDIS_SENTINELS", settings.redis_sentinels, SENTINEL_PORT)
        if any(s.username or s.password or s.db or s.tls for s in sentinels):
            raise RedisConfigError(
                "LLMGW_REDIS_SENTINELS: host:port only (their credentials go in "
                "LLMGW_REDIS_SENTINEL_USERNAME / LLMGW_REDIS_SENTINEL_PASSWORD, TLS in LLMGW_REDIS_TLS)"
            )
        sentinel_password = _secret(
            "LLMGW_REDIS_SENTINEL_PASSWORD",
            settings.redis_sentinel_password,
            settings.redis_sentinel_password_file,
        )
        return RedisTarget(
            mode=mode,
            nodes=tuple((s.host, s.port) for s in sentinels),
            master=settings.redis_sentinel_master,
            username=settings.redis_username,
            password=_password(settings, None),
            sentinel_username=settings.redis_sentinel_username,
            sentinel_password=sentinel_password,
            tls=_tls(settings, settings.redis_tls, mode),
            timeout_s=settings.redis_timeout_s,
            limiter_client=limiter,
        )
    if not settings.redis_url:
        if settings.redis_mode == "cluster":
            raise RedisConfigError("LLMGW_REDIS_MODE=cluster needs LLMGW_REDIS_URL (one or more seed nodes)")
        return None
    urls = _nodes("LLMGW_REDIS_URL", settings.redis_url, REDIS_PORT)
    if mode == "standalone" and len(urls) > 1:
        raise RedisConfigError(
            "LLMGW_REDIS_URL lists several servers but LLMGW_REDIS_MODE is standalone: for a Redis "
            "Cluster's seed nodes set LLMGW_REDIS_MODE=cluster"
        )
    if len({u.tls for u in urls if u.tls is not None}) > 1:
        raise RedisConfigError("LLMGW_REDIS_URL mixes redis:// and rediss:// nodes: use one scheme")
    if len({(u.username, u.password) for u in urls if u.username or u.password}) > 1:
        raise RedisConfigError("LLMGW_REDIS_URL: the nodes carry different credentials: use one user")
    if mode == "cluster" and any(u.db for u in urls):
        raise RedisConfigError("LLMGW_REDIS_URL: a Redis Cluster has database 0 only")
    carried = next((u for u in urls if u.username or u.password), urls[0])
    return RedisTarget(
        mode=mode,
        nodes=tuple((u.host, u.port) for u in urls),
        db=urls[0].db,
        username=settings.redis_username or carried.username,
        password=_password(settings, carried.password),
        tls=_tls(settings, settings.redis_tls or any(u.tls for u in urls), mode),
        timeout_s=settings.redis_timeout_s,
        limiter_client=limiter,
    )


# --- clients ------------------------------------------------------------------------------------------


def tls_context(tls: Tls) -> ssl.SSLContext:
    """The context every TLS connection of a target uses (the verify modes as redis-py's options mean
    them). Raises `RedisConfigError` for a PEM file that cannot be loaded."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = tls.verify == "full"
    ctx.verify_mode = ssl.CERT_NONE if tls.verify == "none" else ssl.CERT_REQUIRED
    if tls.cert_file:
        try:
            ctx.load_cert_chain(tls.cert_file, tls.key_file)
        except (ssl.SSLError, OSError) as e:
            raise RedisConfigError(
                f"LLMGW_REDIS_TLS_CERT_FILE / LLMGW_REDIS_TLS_KEY_FILE: cannot load the client certificate "
                f"and key ({e})"
            ) from None
    if tls.ca_file:
        try:
            ctx.load_verify_locations(cafile=tls.ca_file)
        except (ssl.SSLError, OSError) as e:
            raise RedisConfigError(f"LLMGW_REDIS_TLS_CA_FILE: cannot load {tls.ca_file} ({e})") from None
    return ctx


_PACKER = HiredisRespSerializer()


class _Connection(Connection):
    """redis-py's asyncio connection, packing commands with hiredis (redis-py's own serializer, which
    its sync client uses): the asyncio client packs in Python, its largest Python cost per EVALSHA."""

    def pack_command(self, *args: Any) -> list[bytes]:
        return _PACKER.pack(*args)  # type: ignore[no-any-return]


class _TlsConnection(_Connection):
    """A connection over the factory's TLS context, sending `tls_server_name` as SNI and checking it when
    set (redis-py's `SSLConnection` checks the host it connects to, which behind a proxy or an IP
    address is not the certificate's name)."""

    def __init__(
        self, *, tls_context: ssl.SSLContext, tls_server_name: str | None = None, **kwargs: Any
    ) -> None:
        self._tls_context = tls_context
        self._tls_server_name = tls_server_name
        super().__init__(**kwargs)

    def _connection_arguments(self) -> Mapping[str, Any]:
        args = dict(super()._connection_arguments())
        args["ssl"] = self._tls_context
        if self._tls_server_name:
            args["server_hostname"] = self._tls_server_name
        return args


class _SentinelConnection(SentinelManagedConnection, _Connection):
    """The primary's connection in sentinel mode."""


class _SentinelTlsConnection(SentinelManagedConnection, _TlsConnection):
    """The primary's connection in sentinel mode, over TLS."""


class _WaitingPool(ConnectionPool):
    """A checkout that finds `max_connections` in use waits up to `wait_s` for one to come back, instead of
    failing at once with MaxConnectionsError (redis-py's `ConnectionPool`: a burst of admissions past
    the pool size would each be a limiter outage) or paying a lock and a timer on every checkout (its
    `BlockingConnectionPool`): the common path is the plain pool's."""

    def __init__(self, *args: Any, wait_s: float = 0.25, **kwargs: Any) -> None:
        self._wait_s = wait_s
        self._waiters: deque[asyncio.Future[None]] = deque()
        super().__init__(*args, **kwargs)

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait_s
        while True:
            try:
                return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
            except rexc.MaxConnectionsError:
                left = deadline - loop.time()
                if left <= 0:
                    raise
                freed = loop.create_future()
                self._waiters.append(freed)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(freed, left)

    async def release(self, connection: Any) -> None:
        await super().release(connection)
        while self._waiters:  # wake the oldest waiter still waiting (timed-out ones are done)
            freed = self._waiters.popleft()
            if not freed.done():
                freed.set_result(None)
                break


class _WaitingSentinelPool(_WaitingPool, SentinelConnectionPool):
    """The primary's pool in sentinel mode, waiting like `_WaitingPool`."""


class _SentinelPrimary(aioredis.Redis):
    """The client of a Sentinel-managed primary; closing it closes its sentinel connections too."""

    managed_by: Sentinel | None = None

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        if self.managed_by is not None:
            await self.managed_by.aclose()


def _common(target: RedisTarget, retries: int, protocol: int | None) -> dict[str, Any]:
    """The options every connection of a target shares (auth apart: sentinels have their own)."""
    common: dict[str, Any] = {
        "socket_connect_timeout": target.timeout_s,
        "socket_timeout": target.timeout_s,
        "retry": Retry(NoBackoff(), retries),
        "decode_responses": False,
    }
    if target.mode != "cluster":  # the cluster client builds its node pools itself
        common |= {"max_connections": MAX_CONNECTIONS, "wait_s": target.timeout_s}
    if protocol is not None:
        common["protocol"] = protocol
    return common


def _pool_kwargs(
    target: RedisTarget, connection: type[_Connection], tls_class: type[_Connection]
) -> dict[str, Any]:
    if target.tls is None:
        return {"connection_class": connection}
    return {
        "connection_class": tls_class,
        "tls_context": tls_context(target.tls),
        "tls_server_name": target.tls.server_name,
    }


def _node(host: str, port: int, common: Mapping[str, Any], **kwargs: Any) -> aioredis.Redis:
    pool = _WaitingPool(host=host, port=port, **common, **kwargs)
    return aioredis.Redis.from_pool(pool)


def _sentinel_primary(target: RedisTarget, common: dict[str, Any]) -> aioredis.Redis:
    assert target.master is not None
    sentinel = Sentinel([], sentinel_kwargs={})  # type: ignore[no-untyped-call]
    # Built here rather than by Sentinel so that they get the same TLS context and server name.
    sentinel.sentinels = [
        _node(
            host,
            port,
            {**common, "retry": Retry(NoBackoff(), 0), "protocol": 2},
            username=target.sentinel_username,
            password=target.sentinel_password,
            **_pool_kwargs(target, _Connection, _TlsConnection),
        )
        for host, port in target.nodes
    ]
    primary = sentinel.master_for(
        target.master,
        redis_class=_SentinelPrimary,
        connection_pool_class=_WaitingSentinelPool,
        username=target.username,
        password=target.password,
        db=target.db,
        **common,
        **_pool_kwargs(target, _SentinelConnection, _SentinelTlsConnection),
    )
    assert isinstance(primary, _SentinelPrimary)
    primary.managed_by = sentinel
    return primary


def _cluster(target: RedisTarget, common: dict[str, Any]) -> aioredis.RedisCluster:
    tls: dict[str, Any] = {}
    if target.tls is not None:
        tls = {
            "ssl": True,
            "ssl_ca_certs": target.tls.ca_file,
            "ssl_certfile": target.tls.cert_file,
            "ssl_keyfile": target.tls.key_file,
            "ssl_cert_reqs": "none" if target.tls.verify == "none" else "required",
            "ssl_check_hostname": target.tls.verify == "full",
        }
    return aioredis.RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in target.nodes],
        username=target.username,
        password=target.password,
        max_connections=CLUSTER_MAX_CONNECTIONS,
        **common,
        **tls,
    )


def _build(target: RedisTarget, retries: int, protocol: int | None) -> aioredis.Redis | aioredis.RedisCluster:
    common = _common(target, retries, protocol)
    if target.mode == "cluster":
        return _cluster(target, common)
    if target.mode == "sentinel":
        return _sentinel_primary(target, common)
    (host, port), *_ = target.nodes
    return _node(
        host,
        port,
        common,
        db=target.db,
        username=target.username,
        password=target.password,
        **_pool_kwargs(target, _Connection, _TlsConnection),
    )


def redis_client(target: RedisTarget) -> aioredis.Redis:
    """The general client (key store, feedback, outcome memory, calibration, revocations, the room
    gauge). No I/O until its first command.

    Typed as `redis.asyncio.Redis` for its users: in cluster mode it is a `RedisCluster`, which is no
    subclass but offers the same command methods and `pubsub()`; what each user's commands need on a
    cluster is in docs/design/004 ("Deployments")."""
    return cast(aioredis.Redis, _build(target, retries=1, protocol=None))


def script_client(target: RedisTarget) -> RedisPyClient | RespClient:
    """The limiter's client (`ratelimit.redis_backend.ScriptClient`): no retries, RESP2 replies."""
    if target.limiter_client == "resp":
        (host, port), *_ = target.nodes
        tls = target.tls
        return RespClient(
            host,
            port,
            db=target.db,
            username=target.username,
            password=target.password,
            ssl_context=tls_context(tls) if tls is not None else None,
            server_hostname=tls.server_name if tls is not None else None,
            connect_timeout_s=target.timeout_s,
            op_timeout_s=target.timeout_s,
        )
    return RedisPyClient(_build(target, retries=0, protocol=2))


def commands_client(target: RedisTarget) -> RedisPyClient:
    """The response cache's client (`cache.commands.Commands`): single-key commands, RESP2 replies (the
    semantic index parses FT.SEARCH's RESP2 shape). An error is a miss, so no retry on a standalone
    server (a retry would only double a timeout); on a cluster or a Sentinel primary one retry, since
    after a failover each pooled connection to the old primary fails once before the client learns
    the new topology (tests/integration/redis_topologies)."""
    return RedisPyClient(_build(target, retries=0 if target.mode == "standalone" else 1, protocol=2))


# --- start-up checks ----------------------------------------------------------------------------------


def _chain(error: BaseException) -> Iterator[BaseException]:
    """`error` and what caused it (redis-py wraps socket and TLS errors, RedisCluster its node's)."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


_AUTH_TEXT = ("WRONGPASS", "NOAUTH", "invalid username-password", "invalid password", "unauthenticated")
_CLIENT_CERT_TEXT = ("alert certificate required", "alert bad certificate", "alert unknown ca")
_NOT_TLS_TEXT = ("wrong version number", "record layer failure", "packet length too long", "unexpected eof")


def config_problem(target: RedisTarget, error: BaseException, *, sentinel: str | None = None) -> str | None:
    """What in the settings `error` (raised while connecting) points at, as a message naming the setting;
    None when it is no configuration problem (an outage, a timeout: the failure mode's business).
    `sentinel`: the error came from that sentinel (`host:port`), not from a Redis server."""
    where = f"sentinel {sentinel}" if sentinel else target.where
    for e in _chain(error):
        text = str(e)
        if isinstance(e, rexc.AuthenticationError | rexc.AuthenticationWrongNumberOfArgsError) or any(
            t in text for t in _AUTH_TEXT
        ):
            settings = _SENTINEL_AUTH_SETTINGS if sentinel else _AUTH_SETTINGS
            return f"{settings}: authentication failed at {where} ({text})"
        if isinstance(e, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in text:
            detail = getattr(e, "verify_message", None) or text
            if "mismatch" in str(detail):
                name = (target.tls and target.tls.server_name) or "the host connected to"
                return (
                    f"LLMGW_REDIS_TLS_SERVER_NAME / LLMGW_REDIS_TLS_VERIFY: the certificate of {where} does "
                    f"not name {name} ({detail}): set LLMGW_REDIS_TLS_SERVER_NAME to a name it carries, or "
                    "LLMGW_REDIS_TLS_VERIFY=ca"
                )
            cas = (target.tls and target.tls.ca_file) or "the system's CA bundle"
            return (
                f"LLMGW_REDIS_TLS_CA_FILE: the certificate of {where} is not signed by a CA in {cas} "
                f"({detail})"
            )
        if any(t in text for t in _CLIENT_CERT_TEXT):
            if target.tls is None or not target.tls.cert_file:
                return (
                    f"LLMGW_REDIS_TLS_CERT_FILE / LLMGW_REDIS_TLS_KEY_FILE: {where} requires a client "
                    f"certificate ({text})"
                )
            return f"LLMGW_REDIS_TLS_CERT_FILE: {where} refused the client certificate ({text})"
        if isinstance(e, ssl.SSLError) and any(t in text for t in _NOT_TLS_TEXT):
            return f"LLMGW_REDIS_TLS: {where} does not answer TLS on that port ({text})"
        if "Cluster mode is not enabled" in text:
            return (
                f"LLMGW_REDIS_MODE is cluster but the server at {target.where} is not a cluster node "
                "(cluster_enabled:0): set LLMGW_REDIS_MODE=standalone (or sentinel)"
            )
    return None


async def _ask_sentinel(client: aioredis.Redis, master: str) -> Any:
    return await client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", master)  # type: ignore[no-untyped-call]


async def _check_sentinels(target: RedisTarget, sentinels: list[aioredis.Redis]) -> None:
    assert target.master is not None
    replies = await asyncio.gather(
        *(_ask_sentinel(s, target.master) for s in sentinels), return_exceptions=True
    )
    failed: list[str] = []
    for (host, port), reply in zip(target.nodes, replies, strict=True):
        if not isinstance(reply, BaseException):
            if reply:
                return  # one sentinel names the primary: its checks follow on the primary itself
            continue
        if not isinstance(reply, CLIENT_ERRORS):
            raise reply
        problem = config_problem(target, reply, sentinel=f"{host}:{port}")
        if problem is not None:
            raise RedisConfigError(problem)
        failed.append(f"{host}:{port}: {reply}")
    hosts = ",".join(f"{h}:{p}" for h, p in target.nodes)
    if len(failed) == len(target.nodes):
        raise RedisConfigError(f"LLMGW_REDIS_SENTINELS: no sentinel answered ({'; '.join(failed)})")
    raise RedisConfigError(
        f"LLMGW_REDIS_SENTINEL_MASTER: no sentinel of {hosts} monitors a primary named '{target.master}'"
    )


def _sentinels_of(client: Any) -> list[aioredis.Redis]:
    primary = client if isinstance(client, _SentinelPrimary) else None
    sentinel = primary.managed_by if primary is not None else None
    return list(sentinel.sentinels) if sentinel is not None else []


async def check_server(target: RedisTarget, client: aioredis.Redis) -> None:
    """Start-up: raise `RedisConfigError` when the settings cannot work with what answers (a cluster node
    in standalone or sentinel mode, a server that is no cluster node in cluster mode, credentials or
    TLS refused, no sentinel answering or none knowing the primary). Any other error of the client
    (refused, timed out: an outage) propagates. A server that refuses INFO (an ACL) is not refused."""
    if target.mode == "sentinel":
        await _check_sentinels(target, _sentinels_of(client))
    try:
        info = await client.info("cluster")
    except rexc.NoPermissionError as e:
        log.warning("cannot check the Redis deployment (INFO cluster: %s); assuming it fits the settings", e)
        return
    except CLIENT_ERRORS as e:
        problem = config_problem(target, e)
        if problem is not None:
            raise RedisConfigError(problem) from None
        raise
    if target.mode != "cluster" and str(info.get("cluster_enabled", "0")) == "1":
        raise RedisConfigError(
            f"LLMGW_REDIS_MODE is {target.mode} but the server at {target.where} is a cluster node "
            "(cluster_enabled:1): set LLMGW_REDIS_MODE=cluster"
        )


PREFLIGHT_ATTEMPTS = 3


async def preflight(target: RedisTarget, attempts: int = PREFLIGHT_ATTEMPTS) -> None:
    """`check_server` on a client of its own, closed after. An outage is logged, not raised: serving
    starts and the failure mode decides until Redis answers. Asked `attempts` times before calling it
    an outage: under TLS 1.3 a server that wants a client certificate says so after the handshake, and
    the first read may see the reset instead of the alert."""
    client = redis_client(target)
    try:
        for attempt in range(1, attempts + 1):
            try:
                await check_server(target, client)
                return
            except CLIENT_ERRORS as e:
                if attempt == attempts:
                    log.warning("Redis (%s) did not answer at start-up: %s; starting anyway", target.where, e)
                else:
                    await asyncio.sleep(0.1)
    finally:
        await client.aclose()
