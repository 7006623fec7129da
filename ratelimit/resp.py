"""A lean Redis client for the limiter's script calls: one pipelined connection, hiredis parsing.

The limiter makes one EVALSHA per LLM request on the gateway's hot path. Profiling the general
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

We speak to one server: MOVED / ASK are not followed. `deployment_problem` reads `INFO` at start-up and
names what is supported (`SUPPORTED`); a redirect at run time is an error like any other.
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
import redis.exceptions as rexc

Arg = bytes | str | int


def pack(args: tuple[Arg, ...]) -> bytes:
    """RESP-encode one command (hiredis's C packer: 3x faster than building it in Python)."""
    return bytes(hiredis.pack_command(args))  # type: ignore[arg-type]  # its stub types a 1-tuple


SUPPORTED = (
    "a standalone Redis primary, a primary provided by Sentinel, or a cluster-aware proxy "
    "(the limiter does not follow Redis Cluster redirects)"
)
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


def parse_info(reply: bytes | str) -> dict[str, str]:
    """`INFO` text -> field -> value."""
    text = reply.decode() if isinstance(reply, bytes) else reply
    fields = (line.split(":", 1) for line in text.splitlines() if ":" in line and not line.startswith("#"))
    return {k: v.strip() for k, v in fields}


def deployment_problem(info: Mapping[str, str]) -> str | None:
    """Why the limiter cannot work with the server `INFO` describes (None: it can)."""
    if info.get("cluster_enabled") == "1":
        return f"LLMGW_REDIS_URL points at a Redis Cluster node (cluster_enabled:1); supported: {SUPPORTED}"
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
        connect_timeout_s: float = 0.25,
        op_timeout_s: float = 0.25,
    ) -> None:
        self._host, self._port, self._db = host, port, db
        self._username, self._password, self._tls = username, password, tls
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
                    ssl=ssl.create_default_context() if self._tls else None,
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
