"""Every Redis error of a limiter call is one decision: `BackendUnavailable(reason, op)`, counted per
(op, reason), then the call's failure mode (per pool) applies. Fakes stand in for Redis here; the real
faults (OOM, passwords, ACLs, replicas, a cluster) are in
tests/integration/ratelimit/test_backend_faults.py."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any, cast

import hiredis
import pytest
import redis.exceptions as rexc
from prometheus_client import CollectorRegistry, generate_latest

from gateway.config_pool import Pool
from gateway.observability.collectors import FailoverCollector
from ratelimit.errors import REASONS, BackendUnavailable, EveryMinute
from ratelimit.failover import FailoverLimiter
from ratelimit.memory_backend import MemoryBackend
from ratelimit.model import Admission, Decision, Dimension, Level, Reservation, Rule
from ratelimit.redis_backend import RedisBackend, ScriptClient
from ratelimit.resp import SUPPORTED, _error, deployment_problem, parse_info, reason_of
from ratelimit.rules import request_cost, usage_cost

REPLIES = [
    ("OOM command not allowed when used memory > 'maxmemory'.", "oom"),
    ("ERR Error running script (call to f_1): @user_script:3: -OOM command not allowed when used", "oom"),
    ("NOAUTH Authentication required.", "auth"),
    ("ERR Protocol error: unauthenticated bulk length", "auth"),
    ("WRONGPASS invalid username-password pair or user is disabled.", "auth"),
    ("NOPERM User gw has no permissions to run the 'evalsha' command", "noperm"),
    ("MOVED 3999 127.0.0.1:6381", "moved"),
    ("ASK 3999 127.0.0.1:6381", "moved"),
    ("CROSSSLOT Keys in request don't hash to the same slot", "moved"),
    ("CLUSTERDOWN Hash slot not served", "moved"),
    ("READONLY You can't write against a read only replica.", "readonly"),
    ("LOADING Redis is loading the dataset in memory", "busy"),
    ("BUSY Redis is busy running a script.", "busy"),
    ("MASTERDOWN Link with MASTER is down", "busy"),
    ("ERR value is not an integer or out of range script: abc, on @user_script:12.", "script"),
    ("ERR user_script:1: Script attempted to access nonexistent global variable 'x'", "script"),
    ("ERR unknown command 'FOO'", "other"),
]


@pytest.mark.parametrize(("reply", "reason"), REPLIES)
def test_every_error_reply_has_a_reason(reply: str, reason: str) -> None:
    assert reason_of(_error(hiredis.ReplyError(reply))) == reason
    assert reason in REASONS


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        # redis-py strips the code off the errors it has a class for: the class names them.
        (rexc.AuthenticationError("invalid username-password pair"), "auth"),
        (rexc.NoPermissionError("no permissions"), "noperm"),
        (rexc.OutOfMemoryError("command not allowed when used memory > 'maxmemory'"), "oom"),
        (rexc.TimeoutError("Timeout reading from socket"), "timeout"),
        (TimeoutError(), "timeout"),
        (rexc.ConnectionError("Error 111 connecting to localhost:6379. Connection refused."), "connection"),
        (ConnectionResetError(104, "Connection reset by peer"), "connection"),
        (rexc.MovedError("3999 127.0.0.1:6381"), "moved"),
        (rexc.NoScriptError("No matching script."), "script"),
    ],
)
def test_client_exceptions_have_a_reason(error: Exception, reason: str) -> None:
    assert reason_of(error) == reason


def test_deployments_the_limiter_cannot_work_with() -> None:
    info = parse_info(
        b"# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n# Cluster\r\ncluster_enabled:0\r\n"
    )
    assert info["redis_version"] == "7.0.15" and deployment_problem(info) is None
    # A cluster node is no problem of the limiter's (issue 41): whether it fits LLMGW_REDIS_MODE is
    # gateway.redis_conn's check.
    assert deployment_problem({**info, "cluster_enabled": "1"}) is None
    old = deployment_problem({"redis_version": "4.0.14"})
    assert old is not None and ">= 5.0" in old
    assert deployment_problem({"redis_version": "5.0.0"}) is None
    assert deployment_problem({}) is None  # a proxy that says nothing is not refused


class Failing:
    """A ScriptClient whose script calls all fail with `error` (after SCRIPT LOAD worked)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def script_load(self, source: str) -> str:
        return hashlib.sha1(source.encode()).hexdigest()

    async def evalsha(self, sha: str, numkeys: int, *args: Any) -> Any:
        raise self.error

    async def execute(self, *args: Any) -> Any:
        raise self.error

    async def aclose(self) -> None:
        return None


RULES = (Rule(Level.KEY, "k", Dimension.TOKENS, 100),)


def adm(rid: str, tokens: int = 10, mode: Any = None) -> Admission:
    return Admission(rid, RULES, request_cost(tokens, 0), on_backend_error=mode)


@pytest.mark.parametrize(("reply", "reason"), REPLIES)
async def test_backend_turns_every_script_error_into_backend_unavailable(reply: str, reason: str) -> None:
    backend = RedisBackend(cast(ScriptClient, Failing(_error(hiredis.ReplyError(reply)))), lease_s=30)
    await backend.load()
    with pytest.raises(BackendUnavailable) as info:
        await backend.admit(adm("r1"))
    assert (info.value.reason, info.value.op) == (reason, "admit")
    reservation = Reservation("r1", RULES, {Dimension.TOKENS: 10}, "standard")
    with pytest.raises(BackendUnavailable) as info:
        await backend.renew([reservation])
    assert (info.value.reason, info.value.op) == (reason, "renew")
    if reason == "moved":
        assert SUPPORTED in str(info.value)  # says what is supported, in the log line it becomes


async def test_a_second_noscript_after_reloading_is_backend_unavailable() -> None:
    backend = RedisBackend(
        cast(ScriptClient, Failing(rexc.NoScriptError("NOSCRIPT No matching"))), lease_s=30
    )
    await backend.load()
    with pytest.raises(BackendUnavailable) as info:
        await backend.top_up(Reservation("r", RULES, {}, "standard"), {Dimension.TOKENS: 1})
    assert (info.value.reason, info.value.op) == ("script", "top_up")


class Scripted:
    """A shared backend that fails while `error` is set, else delegates to an exact MemoryBackend."""

    def __init__(self) -> None:
        self.error: Exception | None = None
        self.exact = MemoryBackend(lease_s=30)
        self.renewed = 0

    def _check(self) -> None:
        if self.error is not None:
            raise self.error

    async def admit(self, admission: Admission) -> Decision:
        self._check()
        return await self.exact.admit(admission)

    async def top_up(self, reservation: Reservation, extra: Mapping[Dimension, int]) -> bool:
        self._check()
        return await self.exact.top_up(reservation, extra)

    async def settle(self, reservation: Reservation, used: Mapping[Dimension, int]) -> None:
        await self.settle_many(((reservation, used),))

    async def settle_many(self, items: Sequence[tuple[Reservation, Mapping[Dimension, int]]]) -> None:
        self._check()
        await self.exact.settle_many(items)

    def settle_soon(
        self, reservation: Reservation, used: Mapping[Dimension, int], failed: Any = None
    ) -> None:
        self.exact.settle_soon(reservation, used)

    async def flush(self) -> None:
        return None

    async def renew(self, reservations: Sequence[Reservation]) -> None:
        self._check()
        self.renewed += 1
        await self.exact.renew(reservations)

    async def close(self) -> None:
        return None


def down(reason: str = "oom") -> BackendUnavailable:
    return BackendUnavailable(f"redis: {reason}", reason=reason)


async def test_each_admission_gets_its_own_pools_failure_mode() -> None:
    primary = Scripted()
    limiter = FailoverLimiter(primary, MemoryBackend(lease_s=30), "fail_open", probe_interval_s=3600)
    primary.error = down("auth")
    with pytest.raises(BackendUnavailable):
        await limiter.admit(adm("billed", mode="fail_closed"))
    opened = await limiter.admit(adm("self-hosted", mode="fail_open"))
    assert opened.allowed and opened.degraded
    default = await limiter.admit(adm("cache-hit"))  # no mode of its own: the limiter's
    assert default.allowed and default.degraded
    with pytest.raises(BackendUnavailable):  # known down: refused without asking the primary
        await limiter.admit(adm("billed-2", mode="fail_closed"))
    assert limiter.stats.errors == {("admit", "auth"): 1}
    strict = FailoverLimiter(primary, MemoryBackend(lease_s=30), "fail_closed", probe_interval_s=3600)
    assert (await strict.admit(adm("self-hosted", mode="fail_open"))).degraded
    with pytest.raises(BackendUnavailable):
        await strict.admit(adm("cache-hit"))


async def test_fail_open_top_ups_are_bounded_by_the_local_limiter_and_settle_in_both() -> None:
    primary = Scripted()
    local = MemoryBackend(lease_s=30)
    limiter = FailoverLimiter(primary, local, "fail_open", probe_interval_s=3600)
    decision = await limiter.admit(adm("stream", tokens=30))
    assert decision.reservation is not None and not decision.degraded
    reservation = decision.reservation
    primary.error = down("timeout")
    grants = [await limiter.top_up(reservation, {Dimension.TOKENS: 20}) for _ in range(5)]
    # 30 held (adopted from Redis) + 20 + 20 + 20 = 90 <= 100; a fourth chunk would pass the limit.
    assert grants == [True, True, True, False, False]
    assert reservation.reserved[Dimension.TOKENS] == 90
    assert limiter.stats.errors == {("top_up", "timeout"): 1} and limiter.stats.degraded_decisions == 5
    other = await limiter.admit(adm("other", tokens=20))  # the local view counts the stream's 90
    assert not other.allowed and other.degraded
    primary.error = None
    limiter.settle_soon(reservation, usage_cost(85, 0))
    # Settled in both: the local limiter's lease is gone (the whole limit is free there again, the
    # usage counted), and Redis charged the real usage.
    assert (await local.admit(adm("after", tokens=15))).allowed
    assert not (await local.admit(adm("after-2", tokens=1))).allowed
    assert not (await primary.exact.admit(adm("exact", tokens=16))).allowed
    assert (await primary.exact.admit(adm("exact-2", tokens=15))).allowed


async def test_fail_closed_top_ups_raise() -> None:
    primary = Scripted()
    limiter = FailoverLimiter(primary, MemoryBackend(lease_s=30), "fail_open", probe_interval_s=3600)
    decision = await limiter.admit(adm("billed", mode="fail_closed"))
    assert decision.reservation is not None and decision.reservation.on_backend_error == "fail_closed"
    primary.error = down("readonly")
    with pytest.raises(BackendUnavailable):
        await limiter.top_up(decision.reservation, {Dimension.TOKENS: 1})


@pytest.mark.parametrize(
    "error", [down("oom"), rexc.ResponseError("ERR something new"), RuntimeError("a bug")], ids=repr
)
async def test_renew_never_raises_and_counts(error: Exception, caplog: pytest.LogCaptureFixture) -> None:
    primary = Scripted()
    limiter = FailoverLimiter(primary, MemoryBackend(lease_s=30), "fail_open", probe_interval_s=0)
    decision = await limiter.admit(adm("long"))
    assert decision.reservation is not None
    primary.error = error
    with caplog.at_level(logging.WARNING, logger="llmgw.ratelimit"):
        for _ in range(5):
            await limiter.renew([decision.reservation])
    assert limiter.stats.renew_failures == 5 and limiter.stats.backend_errors == 5
    reason = error.reason if isinstance(error, BackendUnavailable) else "other"
    assert limiter.stats.errors == {("renew", reason): 5}
    assert len(caplog.records) == 1  # once per reason per minute, not once per round
    primary.error = None
    await limiter.renew([decision.reservation])
    assert primary.renewed == 1


def test_every_minute_drops_repeats_and_counts_them(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    report = EveryMinute(logging.getLogger("t"), 60, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="t"):
        assert report("a", logging.INFO, "x %s", 1)
        assert not report("a", logging.INFO, "x %s", 2)
        assert report("b", logging.INFO, "y")
        now[0] = 61
        assert report("a", logging.INFO, "x %s", 3)
    assert [r.getMessage() for r in caplog.records] == [
        "x 1",
        "y",
        "x 3 (1 more like it since the last report)",
    ]


async def test_collector_exports_errors_by_op_and_reason() -> None:
    primary = Scripted()
    limiter = FailoverLimiter(primary, MemoryBackend(lease_s=30), "fail_open", probe_interval_s=0)
    primary.error = down("oom")
    await limiter.admit(adm("a"))
    await limiter.renew([Reservation("admitted-by-redis", RULES, {}, "standard")])
    limiter.stats.count("load", "auth")
    registry = CollectorRegistry()
    registry.register(FailoverCollector(limiter.stats))
    text = generate_latest(registry).decode()
    assert 'llmgw_ratelimit_backend_errors_total{op="admit",reason="oom"} 1.0' in text
    assert 'llmgw_ratelimit_backend_errors_total{op="renew",reason="oom"} 1.0' in text
    assert 'llmgw_ratelimit_backend_errors_total{op="load",reason="auth"} 1.0' in text
    assert "llmgw_ratelimit_degraded 1.0" in text and "llmgw_ratelimit_recoveries_total 0.0" in text


@pytest.mark.parametrize(
    ("engine", "own", "default", "want"),
    [
        ("litellm", None, "fail_open", "fail_closed"),  # billed: closed unless the pool says otherwise
        ("litellm", "fail_open", "fail_closed", "fail_open"),
        ("vllm", None, "fail_open", "fail_open"),
        ("vllm", None, "fail_closed", "fail_closed"),
        ("openai", None, "fail_open", "fail_open"),
        ("openai", "fail_closed", "fail_open", "fail_closed"),
    ],
)
def test_pool_failure_mode(engine: str, own: str | None, default: Any, want: str) -> None:
    data: dict[str, Any] = {"name": "p", "engine": engine, "model": "m"}
    if engine != "litellm":
        data["endpoints"] = {"static": ["http://127.0.0.1:1"]}
    if own is not None:
        data["on_backend_error"] = own
    assert Pool.model_validate(data).backend_error_mode(default) == want
