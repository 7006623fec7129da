"""The limiter's Redis clients: `RedisPyClient` over redis-py (the default, every deployment) and
`RespClient`, a lean pipelined client (opt-in, standalone only); both give the backend
`script_load` / `evalsha` / `execute` and raise redis-py's exception classes.

`RedisPyClient` adapts a redis-py asyncio client as `gateway.redis_conn` builds it: `Redis` for a
standalone server, a Sentinel `master_for` client (it asks the sentinels for the primary on every new
connection and turns READONLY from a demoted primary into a reconnect), or `RedisCluster` (follows
MOVED / ASK, routes EVALSHA by its keys' slot, sends SCRIPT LOAD to every primary). That client must
have no retries: a retried EVALSHA whose first attempt reached Redis would apply twice.

`RespClient`: the limiter makes one EVALSHA per LLM request on the gateway's hot path. Profiling the general
client (redis-py) showed its per-command machinery (pool checkout, argument encoding, stream
reader) costing more CPU than the rest of admission together. Redis answers in order on a
connection, so every coroutine can share ONE connection: a call packs its command, writes it, and
waits on a future that `data_received` resolves as replies arrive (hiredis parses them).

Timeouts without a timer per call: the oldest pending call has the earliest deadline (FIFO), so
one timer per connection watches it; when it is overdue the connection is dropped and every
pending call fails (a connection that stopped answering serves nobody). Errors are redis-py's
exception classes, so callers handle both clients alike, and `reason_of` names any of them in one word
(`ratelimit.errors.REASONS`). The next call reconnects; a connection whose AUTH or SELECT fails is
closed at once (a rotated password would otherwise leak one socket per call until descriptors run out).

`RespClient` speaks to one server: MOVED / ASK are not followed, no sentinel is asked, so the gateway
offers it in standalone mode only (`LLMGW_REDIS_LIMITER_CLIENT=resp`); a redirect reaching it is an
error like any other. `deployment_problem` reads `INFO` at start-up and refuses a Redis too old for the
scripts.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections import deque
from collections.abc import Awaitable, Mapping
from typing import Any
from urllib.parse import unquote, urlparse

import hiredis
import redis.asyncio as aioredis
import redis.exceptions as rexc

Arg = bytes | str | int


def pack(args: tuple[Arg, ...]) -> bytes:
    """RESP-encode one command (hiredis's C packer: 3x faster than building it in Python)."""
    return bytes(hiredis.pack_command(args))  # type: ignore[arg-type]  # its stub types a 1-tuple


SUPPORTED = (
    "a standalone primary or one provided by Sentinel (either client), a Redis Cluster with "
    "LLMGW_REDIS_MODE=cluster (redis-py client), or a cluster-aware proxy"
)
# Every error a call of either client can raise: redis-py's, the socket's, and RedisCluster's own
# (`RedisClusterException` is no `RedisError`: no reachable seed node, slots not covered).
CLIENT_ERRORS: tuple[type[BaseException], ...] = (rexc.RedisError, rexc.RedisClusterException, OSError)
# The scripts call TIME before writing, which needs effects replication: the default from Redis 5.0
# (multi-field HSET needs 4.0, ZADD XX 3.0.2; nothing newer is used).
MIN_VERSION = (5, 0)


def _error(reply: hiredis.ReplyError) -> Exception:
    """An error reply as redis-py's parser would raise it (the message is kept whole)."""
    msg = str(reply)
    if msg.startswith("NOSCRIPT"):
        return rexc.NoScriptError(msg)
    if msg.startswith("READONLY"):
        return rexc.ReadOnlyError(msg)
    if msg.startswith(("NOAUTH", "WRONGPASS")):
        return rexc.AuthenticationError(msg)
    if msg.startswith("NOPERM"):
        return rexc.NoPermissionError(msg)
    if msg.startswith("OOM"):
        return rexc.OutOfMemoryError(msg)
    if msg.startswith(("LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN")):
        return rexc.ConnectionError(msg)
    return rexc.ResponseError(msg)


# redis-py strips the code off the messages of the errors it has a class for: the class names them.
_BY_CLASS: tuple[tuple[type[Exception], str], ...] = (
    (rexc.TimeoutError, "timeout"),
    (TimeoutError, "timeout"),
    (rexc.AuthenticationError, "auth"),
    (rexc.AuthenticationWrongNumberOfArgsError, "auth"),
    (rexc.NoPermissionError, "noperm"),
    (rexc.OutOfMemoryError, "oom"),
    (rexc.ReadOnlyError, "readonly"),
    (rexc.BusyLoadingError, "busy"),
    (rexc.TryAgainError, "busy"),
    (rexc.MasterDownError, "busy"),
    (rexc.AskError, "moved"),
    (rexc.ClusterDownError, "moved"),
    (rexc.ClusterError, "moved"),
)
# Error codes, at the start of a reply or inside a script's error ("... @user_script:3: -OOM ...").
_CODE = re.compile(
    r"(?:^|-)(OOM|NOAUTH|WRONGPASS|NOPERM|MOVED|ASK|CROSSSLOT|CLUSTERDOWN|READONLY|LOADING|BUSY|"
    r"MASTERDOWN|TRYAGAIN)\b"
)
_CODE_REASON = {
    "OOM": "oom",
    "NOAUTH": "auth",
    "WRONGPASS": "auth",
    "NOPERM": "noperm",
    "MOVED": "moved",
    "ASK": "moved",
    "CROSSSLOT": "moved",
    "CLUSTERDOWN": "moved",
    "READONLY": "readonly",
}


def reason_of(error: BaseException) -> str:
    """What went wrong, in one word of `ratelimit.errors.REASONS`, for any error of either client."""
    if isinstance(error, rexc.RedisClusterException):
        # RedisCluster wraps what stopped it (a refused connection, a wrong password) as its cause.
        cause = error.__cause__
        return reason_of(cause) if cause is not None and cause is not error else "moved"
    for cls, reason in _BY_CLASS:
        if isinstance(error, cls):
            return reason
    text = str(error)
    if (m := _CODE.search(text)) is not None:
        return _CODE_REASON.get(m.group(1), "busy")
    if "unauthenticated" in text:  # "ERR Protocol error: unauthenticated bulk length" (a big command)
        return "auth"
    if isinstance(error, rexc.ConnectionError | OSError):
        return "connection"
    if isinstance(error, rexc.NoScriptError) or "user_script" in text or "Error running script" in text:
        return "script"
    return "other"


def parse_info(reply: bytes | str | Mapping[str, Any]) -> dict[str, str]:
    """`INFO` text (RespClient) or redis-py's parsed reply -> field -> value (as text)."""
    if isinstance(reply, Mapping):
        return {str(k): str(v) for k, v in reply.items()}
    text = reply.decode() if isinstance(reply, bytes) else reply
    fields = (line.split(":", 1) for line in text.splitlines() if ":" in line and not line.startswith("#"))
    return {k: v.strip() for k, v in fields}


def deployment_problem(info: Mapping[str, str]) -> str | None:
    """Why the limiter cannot work with the server `INFO` describes (None: it can). Whether a cluster
    node fits the configured mode is the gateway's check (`gateway.redis_conn`)."""
    version = info.get("redis_version")
    if version:
        parts = tuple(int(p) for p in re.findall(r"\d+", version)[:2])
        if parts < MIN_VERSION:
            return (
                f"Redis {version} is too old: the limiter's scripts need Redis >= "
                f"{'.'.join(map(str, MIN_VERSION))}"
            )
    return None


class _Conn(asyncio.Protocol):
    def __init__(self, op_timeout_s: float) -> None:
        self._reader = hiredis.Reader()
        self._waiters: deque[tuple[asyncio.Future[Any], float]] = deque()
        self._timeout = op_timeout_s
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's are no asyncio.Transport

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        while (reply := self._reader.gets()) is not False:
            if not self._waiters:
                break
            fut, _ = self._waiters.popleft()
            if fut.done():
                continue
            if isinstance(reply, hiredis.ReplyError):
                fut.set_exception(_error(reply))
            else:
                fut.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(rexc.ConnectionError(f"connection to Redis lost: {exc or 'closed'}"))

    def _fail(self, error: Exception) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
        while self._waiters:
            fut, _ = self._waiters.popleft()
            if not fut.done():
                fut.set_exception(error)
        if self._transport is not None:
            self._transport.abort()

    def _watch(self) -> None:
        self._timer = None
        if not self._waiters:
            return
        _, deadline = self._waiters[0]
        now = time.monotonic()
        if now >= deadline:
            self._fail(rexc.TimeoutError(f"Redis did not answer within {self._timeout}s"))
        else:
            self._timer = asyncio.get_running_loop().call_later(deadline - now, self._watch)

    def send(self, payload: bytes) -> asyncio.Future[Any]:
        assert self._transport is not None
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters.append((fut, time.monotonic() + self._timeout))
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._timeout, self._watch)
        self._transport.write(payload)
        return fut

    def close(self) -> None:
        self._fail(rexc.ConnectionError("client closed"))


class RespClient:
    """`script_load` / `evalsha` / `execute` over one shared, pipelined connection."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 6379,
        *,
        db: int = 0,
        username: str | None = None,
        password: str | None = None,
        tls: bool = False,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        connect_timeout_s: float = 0.25,
        op_timeout_s: float = 0.25,
    ) -> None:
        """TLS when `tls` or `ssl_context` (`tls` alone: the system's CAs, full verification);
        `server_hostname`: the name sent as SNI and checked, when it is not `host`."""
        self._host, self._port, self._db = host, port, db
        self._username, self._password = username, password
        self._ssl = ssl_context if ssl_context is not None or not tls else ssl.create_default_context()
        self._server_hostname = server_hostname if self._ssl is not None else None
        self._connect_timeout, self._op_timeout = connect_timeout_s, op_timeout_s
        self._conn: _Conn | None = None
        self._connecting: asyncio.Future[_Conn] | None = None

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RespClient:
        u = urlparse(url)
        if u.scheme not in ("redis", "rediss"):
            raise ValueError(f"unsupported Redis URL scheme '{u.scheme}' (redis:// or rediss://)")
        db = int(u.path.lstrip("/") or 0)
        return cls(
            u.hostname or "127.0.0.1",
            u.port or 6379,
            db=db,
            username=unquote(u.username) if u.username else None,
            password=unquote(u.password) if u.password else None,
            tls=u.scheme == "rediss",
            **kwargs,
        )

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        try:
            transport, conn = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Conn(self._op_timeout),
                    self._host,
                    self._port,
                    ssl=self._ssl,
                    server_hostname=self._server_hostname,
                ),
                self._connect_timeout,
            )
        except (OSError, TimeoutError) as e:
            raise rexc.ConnectionError(f"cannot connect to Redis at {self._host}:{self._port}: {e}") from e
        conn.connection_made(transport)  # uvloop may call it only after create_connection returns
        setup: list[tuple[Arg, ...]] = []
        if self._password is not None:
            setup.append(
                ("AUTH", self._username, self._password) if self._username else ("AUTH", self._password)
            )
        if self._db:
            setup.append(("SELECT", self._db))
        try:
            for cmd in setup:
                await conn.send(pack(cmd))
        except BaseException:
            conn.close()  # and its socket: every call would leave one behind (a wrong password)
            raise
        return conn

    async def _connection(self) -> _Conn:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        if self._connecting is None:
            # One connect for all callers that find the connection down at the same moment.
            self._connecting = asyncio.ensure_future(self._connect())
        try:
            conn = await asyncio.shield(self._connecting)
        finally:
            if self._connecting is not None and self._connecting.done():
                self._connecting = None
        self._conn = conn
        return conn

    def execute(self, *args: Arg) -> Awaitable[Any]:
        """The reply to one command. On a live connection this is the reply's future itself, with no
        coroutine around it: the limiter awaits two of these per request on the gateway's hot path."""
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn.send(pack(args))
        return self._reconnect_then(pack(args))

    async def _reconnect_then(self, payload: bytes) -> Any:
        conn = await self._connection()
        return await conn.send(payload)

    async def script_load(self, source: str) -> str:
        sha = await self.execute("SCRIPT", "LOAD", source)
        return sha.decode() if isinstance(sha, bytes) else str(sha)

    def evalsha(self, sha: str, numkeys: int, *args: Arg) -> Awaitable[Any]:
        return self.execute("EVALSHA", sha, numkeys, *args)

    async def aclose(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class RedisPyClient:
    """`RespClient`'s three calls over a redis-py asyncio client (see the module docstring): EVALSHA and
    `execute` go straight to `execute_command`, so a call adds no coroutine layer of its own. Replies
    are redis-py's: raw for EVALSHA / EVAL / GET, parsed where redis-py has a callback (INFO: a dict,
    which `parse_info` takes too)."""

    __slots__ = ("_client", "_execute")

    def __init__(self, client: aioredis.Redis | aioredis.RedisCluster) -> None:
        self._client = client
        self._execute = client.execute_command

    def execute(self, *args: Arg) -> Awaitable[Any]:
        name = args[0]
        if isinstance(name, bytes):  # RespClient's callers may name a command in bytes; RedisCluster
            args = (name.decode(), *args[1:])  # routes by the name as text (it fails on bytes)
        return self._execute(*args)

    async def script_load(self, source: str) -> str:
        # Through redis-py's own command: RedisCluster sends it to every primary (EVALSHA may land on
        # any of them as slots move; a failover's new primary may still lack it: NOSCRIPT reloads).
        sha = await self._client.script_load(source)
        return sha.decode() if isinstance(sha, bytes) else str(sha)

    def evalsha(self, sha: str, numkeys: int, *args: Arg) -> Awaitable[Any]:
        return self._execute("EVALSHA", sha, numkeys, *args)

    async def aclose(self) -> None:
        await self._client.aclose()
