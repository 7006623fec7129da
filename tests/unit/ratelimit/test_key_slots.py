"""Every script call's keys hash to ONE Redis Cluster slot, whatever the scope names; keys never collide."""

from __future__ import annotations

import hashlib
from typing import Any, cast

import redis.asyncio as aioredis
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from ratelimit.keys import derived_keys, encode_scope, legacy_move, legacy_root, root, rule_key
from ratelimit.model import Admission, Dimension, Level, Reservation, Rule
from ratelimit.redis_backend import SCRIPTS, RedisBackend, load_script
from ratelimit.rules import request_cost, usage_cost

AWKWARD = ["acme", "a:b", "{acme}", "}{", "a}b{c", "%7B", "org/app:{x}", "*", "", "ünï cödé", "a b\n", "{"]


class RecordingRedis:
    """Stands in for redis.asyncio.Redis: records EVALSHA keys, answers like the scripts would."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.names: dict[str, str] = {}

    async def script_load(self, source: str) -> str:
        sha = hashlib.sha1(source.encode()).hexdigest()
        self.names[sha] = next(n.rsplit("_v", 1)[0] for n in SCRIPTS if load_script(n) == source)
        return sha

    async def evalsha(self, sha: str, numkeys: int, *args: Any) -> Any:
        keys = [str(k) for k in args[:numkeys]]
        name = self.names[sha]
        self.calls.append((name, keys))
        if name == "admit":
            return [1, 1_700_000_000_000, 0, 0] + [0, 0, 0] * numkeys
        if name == "top_up":
            return [1, 1_700_000_000_000]
        return 0


def all_level_rules(scope: str) -> tuple[Rule, ...]:
    levels = list(Level)
    return tuple(Rule(level, scope, dim, 1000) for level in levels for dim in Dimension)


async def test_every_script_call_uses_one_slot() -> None:
    fake = RecordingRedis()
    backend = RedisBackend(cast(aioredis.Redis, fake), lease_s=30, key_prefix="llmgw")
    await backend.load()
    reservations: list[Reservation] = []
    for i, scope in enumerate(AWKWARD):
        rules = all_level_rules(scope) + all_level_rules(AWKWARD[i - 1])
        decision = await backend.admit(Admission(f"r{i}", rules, request_cost(10, 20)))
        assert decision.reservation is not None
        reservations.append(decision.reservation)
        assert await backend.top_up(decision.reservation, {Dimension.OUTPUT_TOKENS: 5})
    await backend.renew(reservations)
    for reservation in reservations:
        await backend.settle(reservation, usage_cost(10, 15))
    assert {name for name, _ in fake.calls} == {"admit", "top_up", "settle", "renew"}
    slot = key_slot(b"{llmgw}")
    for name, keys in fake.calls:
        assert keys, name
        every = [k for base in keys for k in [base, *derived_keys(base, 141_666_666, "m202402")]]
        assert {key_slot(k.encode()) for k in every} == {slot}, (name, keys)


@given(st.text(), st.text())
def test_scope_encoding_is_injective_and_tag_safe(a: str, b: str) -> None:
    ra = Rule(Level.ORG, a, Dimension.TOKENS, 1)
    rb = Rule(Level.ORG, b, Dimension.TOKENS, 1)
    ka, kb = rule_key("llmgw", ra), rule_key("llmgw", rb)
    assert (ka == kb) == (a == b)
    for raw in ":{}":
        assert raw not in encode_scope(a)
    assert key_slot(ka.encode()) == key_slot(b"{llmgw}")


def test_levels_and_dimensions_get_distinct_keys() -> None:
    keys = {rule_key("p", r) for r in all_level_rules("x")}
    assert len(keys) == len(Level) * len(Dimension)


def test_every_limiter_key_is_under_the_one_prefix() -> None:
    base = rule_key("gw", Rule(Level.ORG, "a:{b}", Dimension.TOKENS_DAY, 1))
    for key in [base, *derived_keys(base, 7, "d1")]:
        assert key.startswith("gw:{gw}:"), key
        assert key_slot(key.encode()) == key_slot(b"{gw}")


def test_legacy_names_map_to_the_root_and_leases_stay() -> None:
    assert legacy_move("gw", "{gw}:org:a:tokens_day:q:d20000") == ("q", "gw:{gw}:org:a:tokens_day:q:d20000")
    assert legacy_move("gw", "{gw}:key:k%3A1:tokens:sw") == ("sw", "gw:{gw}:key:k%3A1:tokens:sw")
    for name in ("{gw}:leases", "{gw}:lh", "{gw}:keys", "{gw}:keyids", "{gw}:org:a:tokens", "{other}:x:q:d1"):
        assert legacy_move("gw", name) is None, name
    assert legacy_root("gw") == "{gw}" and root("gw") == "gw:{gw}"


def test_quota_periods_follow_the_configured_zone() -> None:
    """A day quota in New York resets at its midnight (05:00 UTC in winter, 04:00 in summer)."""
    from datetime import UTC, datetime

    from ratelimit.windows import QuotaZone, period

    ny = QuotaZone("America/New_York")
    winter = int(datetime(2026, 1, 15, 4, 59, tzinfo=UTC).timestamp() * 1000)
    summer = int(datetime(2026, 7, 15, 3, 59, tzinfo=UTC).timestamp() * 1000)
    assert (ny.offset(winter), ny.offset(summer)) == (-300, -240)
    for t in (winter, summer):
        before, end = period("d", t, ny.offset(t))
        after, _ = period("d", t + 60_000, ny.offset(t + 60_000))
        assert before != after and end == t + 60_000  # the period ends at local midnight, a minute later
    assert QuotaZone().offset(winter) == 0 and QuotaZone().now() == 0
