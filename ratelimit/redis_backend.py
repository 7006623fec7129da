"""Redis limiter backend: every operation is ONE script call (EVALSHA), all keys in one Cluster slot.

Key scheme (details in `ratelimit.keys`; `P` = `LimitsConfig.key_prefix`, scope percent-encoded):

    P:{P}:<level>:<scope>:<dimension>             rule base key, passed in KEYS
    P:{P}:<level>:<scope>:<dimension>:sw          minute rules: HASH sub-window n -> settled usage, t, h
    P:{P}:<level>:<scope>:<dimension>:q:<period>  quota rules: usage of UTC day `d<days>` / `mYYYYMM`
    P:{P}:leases                                  ZSET request id -> lease expiry (server ms)
    P:{P}:lh                                      HASH per request its rules' amounts, per rule the total

The single hash tag `{P}` puts every key in one slot, so an admission spanning key, app, org, global and
pool levels is one atomic script on Redis Cluster too: one slot is one shard, so that shard's primary
carries every admission of every tenant while the other shards hold the rest of the gateway's state
(decision and its ceiling: docs/design/004-rate-limiting.md, "Deployments").

Flows (scripts in `ratelimit/lua/`, each prefixed with `lib_v4.lua`, loaded by SCRIPT LOAD at start and
reloaded on NOSCRIPT, e.g. after a Redis restart; all time is the Redis server's `TIME`):
- admit (`admit_v5.lua`): first the settlements this gateway queued since its last script call
  (`settle_soon`, carried here so that a finished request costs no call of its own), then purge a
  bounded batch of expired leases, read every rule's leased total (one HMGET) and its window's sum
  and newest sub-window (one HMGET of two fields of its window hash) or period counter, and check
  used + cost <= effective limit at each. All fit -> one lease record (request id, cost per rule,
  now + lease) and the rules' totals grow. Reply: decision, refusing rule, Retry-After, per-rule
  remaining / reset, shadow refusals.
- top_up (`top_up_v5.lua`): the lease must be live; rules whose dimension grows are checked; all
  fit -> the lease record grows and is renewed.
- settle (`settle_v5.lua`): drop the lease record; if it was still live, add the real usage to the
  current sub-window / period counters (the concurrency slot is just the dropped lease). Queued
  settlements that no admission carried within `carry_s` go out this way, many per call.
- renew (`renew_v3.lua`): one call for a whole batch of reservations, extends live leases only.

Reservations are never written to the counters: a gateway killed mid-request leaves only leases, which
stop counting when they expire (at most `lease_s` later).

Every error of a script call but NOSCRIPT (reloaded once) raises `BackendUnavailable` with its reason
(`ratelimit.resp.reason_of`: timeout, connection, oom, auth, noperm, moved, readonly, busy, script,
other) and op: outage or not, the failure mode decides, never a 500; a refusal is a reply, not an
error. The client (`ratelimit.resp`: redis-py by default, for standalone, Sentinel and Cluster; the
lean RESP client as a standalone opt-in) is built with short timeouts and no retries, because a retried
script call could apply twice and a waiting request is worse than a fast fail_open / fail_closed
decision. A Sentinel failover or a cluster slot moving is such an error for the calls it catches; the
client finds the new primary for the next call by itself. `check` refuses at start-up a Redis too old
for the scripts (`ratelimit.resp.deployment_problem`); whether the server fits the configured mode is
the gateway's check (`gateway.redis_conn`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal, Protocol, TypeVar

import redis.asyncio as aioredis
import redis.exceptions as rexc
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from ratelimit.errors import BackendUnavailable, UnsupportedBackend
from ratelimit.keys import rule_key
from ratelimit.model import (
    SUB_WINDOWS,
    Admission,
    Decision,
    Dimension,
    Priority,
    Reservation,
    Rule,
    SettleFailed,
)
from ratelimit.resp import (
    CLIENT_ERRORS,
    SUPPORTED,
    RedisPyClient,
    RespClient,
    deployment_problem,
    parse_info,
    reason_of,
)
from ratelimit.windows import DEFAULT_SUB_WINDOW_MS, QuotaZone, build_decision, kind_of

SCRIPTS = ("admit_v5", "top_up_v5", "settle_v5", "renew_v3")
_OP = {name: name.rsplit("_v", 1)[0] for name in SCRIPTS}  # the `op` of a script's errors
# Reservations per renew call: keeps one script run short (other clients wait while it runs).
RENEW_BATCH = 200
SETTLE_BATCH = 200

T = TypeVar("T")
log = logging.getLogger("llmgw.ratelimit")

_Queued = tuple[Reservation, Mapping[Dimension, int], SettleFailed | None]


def _unavailable(e: BaseException, op: str) -> BackendUnavailable:
    """Any error of a Redis call, as the one exception the failure mode acts on."""
    reason = reason_of(e)
    hint = f" (supported: {SUPPORTED})" if reason == "moved" else ""
    return BackendUnavailable(f"redis {op}: {reason}: {type(e).__name__}: {e}{hint}", reason=reason, op=op)


def load_script(name: str) -> str:
    lua = resources.files("ratelimit").joinpath("lua")
    return lua.joinpath("lib_v4.lua").read_text() + "\n" + lua.joinpath(f"{name}.lua").read_text()


@dataclass(frozen=True, slots=True)
class _Compiled:
    """A rule set turned into script arguments: base keys and format templates.

    The templates hold everything but the amounts, which fill `{i}` slots by the rule's dimension
    (`dims[i]`): one `str.format` call per script argument, the cheapest way found to build it."""

    rules: tuple[Rule, ...]
    keys: list[str]
    dims: tuple[Dimension, ...]  # the rule set's distinct dimensions, in slot order
    spec_formats: dict[str, str]  # priority -> "kind,limit,{i},shadow;" per rule
    usage_format: str  # "kind,{i};" per rule
    offset: int  # the quota zone's offset (minutes) the quota kinds carry; 0: UTC, nothing carried

    @classmethod
    def of(cls, prefix: str, rules: tuple[Rule, ...], offset: int = 0) -> _Compiled:
        kinds = [kind_of(r) for r in rules]
        if offset:
            kinds = [f"{k}{offset:+d}" if k in ("d", "M") else k for k in kinds]
        dims = tuple(dict.fromkeys(r.dimension for r in rules))
        slot = [dims.index(r.dimension) for r in rules]
        return cls(
            rules=rules,
            keys=[rule_key(prefix, r) for r in rules],
            dims=dims,
            spec_formats={
                p: "".join(
                    f"{k},{r.effective_limit(p)},{{{i}}},{int(r.shadow)};"
                    for k, r, i in zip(kinds, rules, slot, strict=True)
                )
                for p in ("standard", "premium")
            },
            usage_format="".join(f"{k},{{{i}}};" for k, i in zip(kinds, slot, strict=True)),
            offset=offset,
        )

    def specs(self, amounts: Mapping[Dimension, int], priority: Priority) -> str:
        """`kind,limit,amount,shadow;` per rule, one argument for the whole set."""
        return self.spec_formats[priority].format(*[amounts.get(d, 0) for d in self.dims])

    def usage(self, used: Mapping[Dimension, int]) -> str:
        """`kind,used;` per rule (settlement)."""
        return self.usage_format.format(*[used.get(d, 0) for d in self.dims])


class ScriptClient(Protocol):
    """What the backend needs from a Redis client (`ratelimit.resp.RedisPyClient` or `RespClient`;
    tests use fakes)."""

    async def script_load(self, source: str) -> Any: ...

    def execute(self, *args: Any) -> Awaitable[Any]: ...

    def evalsha(self, sha: str, numkeys: int, *args: Any) -> Awaitable[Any]: ...

    async def aclose(self) -> None: ...


class RedisBackend:
    def __init__(
        self,
        client: ScriptClient,
        *,
        lease_s: float,
        key_prefix: str = "llmgw",
        sub_window_s: float = DEFAULT_SUB_WINDOW_MS / 1000,
        sub_windows: int = SUB_WINDOWS,
        purge_batch: int = 100,
        carry_s: float = 0.002,
        timezone: str = "UTC",
    ) -> None:
        """`sub_window_s` is configurable so tests can watch a window slide in about a second.
        `carry_s`: how long a `settle_soon` waits for an admission to carry it before it is sent on
        its own."""
        self._redis = client
        self._prefix = key_prefix
        self._zone = QuotaZone(timezone)
        self._lease_ms = max(1, round(lease_s * 1000))
        self._sub_ms = max(1, round(sub_window_s * 1000))
        self._n = sub_windows
        self._batch = purge_batch
        self._source = {name: load_script(name) for name in SCRIPTS}
        self._sha: dict[str, str] = {}
        self._by_rules: dict[int, _Compiled] = {}
        self._carry_s = carry_s
        self._queued: list[_Queued] = []
        self._carry_timer: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        lease_s: float,
        key_prefix: str = "llmgw",
        connect_timeout_s: float = 0.25,
        op_timeout_s: float = 0.25,
        client: Literal["redis-py", "resp"] = "redis-py",
        **kwargs: Any,
    ) -> RedisBackend:
        """A backend on one standalone server (tests, benchmarks; the gateway builds its client with
        `gateway.redis_conn` for every mode and option)."""
        # No client-side retries anywhere: a retried script call could apply twice.
        scripts: ScriptClient
        if client == "resp":
            scripts = RespClient.from_url(url, connect_timeout_s=connect_timeout_s, op_timeout_s=op_timeout_s)
        else:
            scripts = RedisPyClient(
                aioredis.Redis.from_url(
                    url,
                    socket_connect_timeout=connect_timeout_s,
                    socket_timeout=op_timeout_s,
                    retry=Retry(NoBackoff(), 0),
                    protocol=2,
                )
            )
        return cls(scripts, lease_s=lease_s, key_prefix=key_prefix, **kwargs)

    async def load(self) -> None:
        """SCRIPT LOAD every script (call at startup; NOSCRIPT later reloads by itself)."""
        for name, source in self._source.items():
            self._sha[name] = str(await self._guard(self._redis.script_load(source), "load"))

    async def check(self) -> None:
        """Start-up: raise `UnsupportedBackend` for a server the limiter cannot work with (too old),
        `BackendUnavailable` if it cannot be asked. A server or proxy that does not answer `INFO` is not
        refused (a cluster-aware proxy may not), only logged. On a cluster this asks one node (redis-py's
        default node)."""
        info: dict[str, str] = {}
        for section in ("server", "replication"):
            try:
                info |= parse_info(await self._guard(self._redis.execute("INFO", section), "load"))
            except BackendUnavailable as e:
                if e.reason not in ("noperm", "other"):
                    raise
                log.warning(
                    "cannot check the Redis deployment (INFO %s: %s); assuming it is supported", section, e
                )
        if (problem := deployment_problem(info)) is not None:
            raise UnsupportedBackend(problem)
        if info.get("role") == "slave":
            log.warning("the limiter's Redis is a replica (role:slave): writes fail until it is a primary")

    async def _guard(self, call: Awaitable[T], op: str) -> T:
        try:
            return await call
        except CLIENT_ERRORS as e:
            raise _unavailable(e, op) from e

    async def _run(self, name: str, keys: Sequence[str], args: Sequence[str | int]) -> Any:
        for attempt in (0, 1):
            sha = self._sha.get(name)
            if sha is None:
                load = self._redis.script_load(self._source[name])
                sha = self._sha[name] = str(await self._guard(load, _OP[name]))
            # `_guard` inlined: this runs twice per request, and every coroutine layer is paid twice
            # (on the way in and when the reply resumes the chain). Errors cost their work only then.
            try:
                return await self._redis.evalsha(sha, len(keys), *keys, *args)
            except rexc.NoScriptError as e:
                # Redis restarted or flushed its script cache: load again, once.
                self._sha.pop(name, None)
                if attempt:
                    raise _unavailable(e, _OP[name]) from e
            except CLIENT_ERRORS as e:
                raise _unavailable(e, _OP[name]) from e
        raise AssertionError("unreachable")

    def _compiled(self, rules: tuple[Rule, ...]) -> _Compiled:
        """Keys and spec fragments of a rule set, computed once per rule-set object.

        The gateway reuses one tuple per (key, pool), so looking it up by identity skips hashing
        every rule on every call (that hashing showed in profiles).
        """
        c = self._by_rules.get(id(rules))
        offset = self._zone.now()
        if c is None or c.rules is not rules or c.offset != offset:
            if len(self._by_rules) > 10_000:
                self._by_rules.clear()
            c = self._by_rules[id(rules)] = _Compiled.of(self._prefix, rules, offset)
        return c

    def _head(self, request_id: str) -> list[str | int]:
        return [request_id, self._lease_ms, self._sub_ms, self._n, self._batch]

    async def admit(self, admission: Admission) -> Decision:
        c = self._compiled(admission.rules)
        args = self._head(admission.request_id)
        args.append(c.specs(admission.cost, admission.priority))
        args.append(len(c.keys))
        keys = c.keys
        if not self._queued:
            reply = await self._run("admit_v5", keys, args)
        else:
            # Carry the queued settlements: applied before this admission, in the same script run.
            carried = self._queued[:SETTLE_BATCH]
            del self._queued[:SETTLE_BATCH]
            keys = self._settle_args(carried, args, c)
            try:
                reply = await self._run("admit_v5", keys, args)
            except BaseException as e:
                self._carry_failed(carried, e)
                raise
        # Integers as hiredis parsed them: allowed, t, refused, retry, then per rule remaining, reset, shadow.
        allowed, _, refused, retry_ms = reply[:4]
        return build_decision(
            admission, -1 if allowed else refused - 1, retry_ms, reply[4::3], reply[5::3], reply[6::3]
        )

    async def top_up(self, reservation: Reservation, extra: Mapping[Dimension, int]) -> bool:
        c = self._compiled(reservation.rules)
        args = self._head(reservation.request_id)
        args.append(c.specs(extra, reservation.priority))
        reply = await self._run("top_up_v5", c.keys, args)
        if not int(reply[0]):
            return False
        for dim, more in extra.items():
            reservation.reserved[dim] = reservation.reserved.get(dim, 0) + more
        return True

    async def settle(self, reservation: Reservation, used: Mapping[Dimension, int]) -> None:
        await self.settle_many(((reservation, used),))

    async def settle_many(self, items: Sequence[tuple[Reservation, Mapping[Dimension, int]]]) -> None:
        """One script call per `SETTLE_BATCH` settlements."""
        await self._settle_items(items)

    async def _settle_items(
        self, items: Sequence[tuple[Reservation, Mapping[Dimension, int]] | _Queued]
    ) -> None:
        for start in range(0, len(items), SETTLE_BATCH):
            args: list[str | int] = [self._sub_ms, self._n]
            keys = self._settle_args(items[start : start + SETTLE_BATCH], args, None)
            await self._run("settle_v5", keys, args)

    def _settle_args(
        self,
        items: Sequence[tuple[Reservation, Mapping[Dimension, int]] | _Queued],
        args: list[str | int],
        admitting: _Compiled | None,
    ) -> list[str]:
        """KEYS for settlements (after the admission's own, if `admitting`); per settlement its request
        id, the index of its first key, its rule count and usage are appended to `args`. A rule set's
        keys are sent once per call, however many settlements (and the admission) share them: under
        load most requests of a call are one tenant's."""
        keys: list[str] = []
        first: dict[int, int] = {}
        if admitting is not None:
            keys += admitting.keys
            first[id(admitting)] = 1
        for item in items:
            reservation, used = item[0], item[1]
            c = self._compiled(reservation.rules)
            k = first.get(id(c))
            if k is None:
                k = first[id(c)] = len(keys) + 1
                keys += c.keys
            args += [reservation.request_id, k, len(c.keys), c.usage(used)]
        return keys

    def settle_soon(
        self, reservation: Reservation, used: Mapping[Dimension, int], failed: SettleFailed | None = None
    ) -> None:
        """Queue a settlement: the next admission's script call carries it (no call of its own under
        load), or, if none comes within `carry_s`, it goes out in a `settle_v5` call with the others
        queued by then. Never raises; `failed` hears of a settlement Redis could not take."""
        self._queued.append((reservation, used, failed))
        if self._carry_timer is None:
            self._carry_timer = asyncio.get_running_loop().call_later(self._carry_s, self._send_queued)

    def _send_queued(self) -> None:
        self._carry_timer = None
        if not self._queued:
            return  # admissions carried them all
        batch, self._queued = self._queued, []
        task = asyncio.ensure_future(self._send(batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[_Queued]) -> None:
        try:
            await self._settle_items(batch)
        except Exception as e:
            self._carry_failed(batch, e)

    def _carry_failed(self, batch: Sequence[_Queued], error: BaseException) -> None:
        """Queued settlements whose script call failed. Redis down, or the call's fate unknown (its
        caller was cancelled): the callback retries, which is safe since a settle drops the lease
        first and so charges nothing twice. Anything else is a bug, logged; the leases expire."""
        if isinstance(error, BackendUnavailable | asyncio.CancelledError):
            down = (
                error
                if isinstance(error, BackendUnavailable)
                else BackendUnavailable("settle call cancelled", reason="other", op="settle")
            )
            for reservation, used, failed in batch:
                if failed is not None:
                    failed(reservation, used, down)
            return
        log.error("settling %d requests failed: %r (their leases expire)", len(batch), error)

    async def flush(self) -> None:
        """Send every queued settlement now and wait for all of them (shutdown)."""
        if self._carry_timer is not None:
            self._carry_timer.cancel()
        self._send_queued()
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)

    async def renew(self, reservations: Sequence[Reservation]) -> None:
        # Lease records are per request under the shared hash tag: any rule key names it.
        ids = [r.request_id for r in reservations if r.rules]
        if not ids:
            return
        tag_key = self._compiled(next(r.rules for r in reservations if r.rules)).keys[0]
        for start in range(0, len(ids), RENEW_BATCH):
            await self._run("renew_v3", [tag_key], [self._lease_ms, *ids[start : start + RENEW_BATCH]])

    async def close(self) -> None:
        if self._carry_timer is not None:
            self._carry_timer.cancel()
            self._carry_timer = None
        if self._queued:
            log.warning("closing with %d settlements unsent (their leases expire)", len(self._queued))
            self._queued.clear()
        await self._redis.aclose()
