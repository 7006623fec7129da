"""In-process limiter (one process, asyncio): the embedded default, same contract as the Redis backend.

Same semantics as `ratelimit.redis_backend` (see its docstring and docs/design/004-rate-limiting.md):
- a reservation is a *lease* per rule (request id -> (amount, expiry)), counted while unexpired and never
  written to the window counters; renew pushes the expiry, an expired lease simply stops counting;
- settlement drops the lease and adds the real usage to the sub-window (minute rules) or period (quota
  rules) of the settlement time, only if the lease was still live (exactly once; a lease that expired
  already stopped counting, charging it late could exceed the limit);
- top_up grows every lease all-or-nothing, after checking the rules whose dimension grows.

Every method runs without awaiting, so each call is atomic with respect to other asyncio tasks: that
is what makes concurrent admissions exact here, as the Lua scripts do in Redis.

Time comes from an injected clock (seconds; `time.monotonic` by default, so a wall-clock step cannot
shrink or stretch windows) plus a fixed offset to the Unix epoch taken at construction, which quota
periods (UTC calendar) need. Tests inject a fake clock and advance it.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ratelimit.model import SUB_WINDOWS, Admission, Decision, Dimension, Level, Reservation, Rule
from ratelimit.windows import (
    DEFAULT_SUB_WINDOW_MS,
    QUOTA_KINDS,
    Check,
    QuotaZone,
    build_decision,
    choose_refusal,
    kind_of,
    period,
)

RuleId = tuple[Level, str, Dimension]


@dataclass(slots=True)
class _Book:
    """One rule's counters and leases."""

    windows: dict[int, int] = field(default_factory=dict)  # sub-window -> settled usage
    quotas: dict[str, int] = field(default_factory=dict)  # period id -> settled usage
    leases: dict[str, tuple[int, int]] = field(default_factory=dict)  # request id -> (amount, expiry ms)
    expiries: list[tuple[int, str]] = field(default_factory=list)  # heap; stale entries skipped lazily
    leased: int = 0

    def purge(self, t_ms: int) -> None:
        while self.expiries and self.expiries[0][0] <= t_ms:
            expiry, rid = heapq.heappop(self.expiries)
            lease = self.leases.get(rid)
            if lease is not None and lease[1] == expiry:  # else renewed or settled since: stale entry
                del self.leases[rid]
                self.leased -= lease[0]

    def earliest(self) -> int | None:
        while self.expiries:
            expiry, rid = self.expiries[0]
            lease = self.leases.get(rid)
            if lease is not None and lease[1] == expiry:
                return expiry
            heapq.heappop(self.expiries)
        return None

    def lease(self, rid: str, amount: int, expiry: int) -> None:
        old = self.leases.get(rid)
        self.leased += amount - (old[0] if old else 0)
        self.leases[rid] = (amount, expiry)
        heapq.heappush(self.expiries, (expiry, rid))

    def is_empty(self) -> bool:
        return not (self.windows or self.quotas or self.leases)


class MemoryBackend:
    def __init__(
        self,
        *,
        lease_s: float,
        sub_window_s: float = DEFAULT_SUB_WINDOW_MS / 1000,
        sub_windows: int = SUB_WINDOWS,
        clock: Callable[[], float] = time.monotonic,
        epoch_offset_s: float | None = None,
        timezone: str = "UTC",
    ) -> None:
        self._lease_ms = max(1, round(lease_s * 1000))
        self._sub_ms = max(1, round(sub_window_s * 1000))
        self._n = sub_windows
        self._clock = clock
        self._offset = time.time() - clock() if epoch_offset_s is None else epoch_offset_s
        self._books: dict[RuleId, _Book] = {}
        self._zone = QuotaZone(timezone)

    def _now_ms(self) -> int:
        return int((self._clock() + self._offset) * 1000)

    def _book(self, rule: Rule) -> _Book:
        rid = (rule.level, rule.scope, rule.dimension)  # the members themselves: `.value` is a slow property
        book = self._books.get(rid)
        if book is None:
            book = self._books[rid] = _Book()
        return book

    def _check(self, rule: Rule, limit: int, cost: int, t_ms: int, cur: int) -> Check:
        book = self._book(rule)
        book.purge(t_ms)
        kind = kind_of(rule)
        counts: list[int] = []
        quota_used, period_end = 0, 0
        if kind == "m":
            counts = [book.windows.get(j, 0) for j in range(cur - self._n + 1, cur + 1)]
        elif kind in QUOTA_KINDS:
            pid, period_end = period(kind, t_ms, self._zone.offset(t_ms))
            quota_used = book.quotas.get(pid, 0)
        return Check(kind, limit, cost, book.leased, counts, quota_used, period_end, book.earliest())

    async def admit(self, admission: Admission) -> Decision:
        t = self._now_ms()
        cur = t // self._sub_ms
        checks = [
            self._check(r, r.effective_limit(admission.priority), admission.cost.get(r.dimension, 0), t, cur)
            for r in admission.rules
        ]
        retry = [None if c.fits else c.retry_ms(t, cur, self._sub_ms) for c in checks]
        refused, retry_ms = choose_refusal(admission, retry)
        if refused < 0:
            for rule, check in zip(admission.rules, checks, strict=True):
                self._book(rule).lease(admission.request_id, check.cost, t + self._lease_ms)
        remaining: list[int] = []
        reset: list[int] = []
        shadow: list[bool] = []
        for rule, check in zip(admission.rules, checks, strict=True):
            left, reset_ms = check.state(check.cost if refused < 0 else 0, t, cur, self._sub_ms)
            remaining.append(left)
            reset.append(reset_ms)
            shadow.append(rule.shadow and not check.fits)
        return build_decision(admission, refused, retry_ms, remaining, reset, shadow)

    def adopt(self, reservation: Reservation) -> None:
        """Hold a reservation another backend admitted (Redis, before it failed) as if admitted here, at
        what it holds now and without a check (it was admitted): from then on it counts here, and
        `top_up` grows it against this limiter's view (`ratelimit.failover` under fail_open)."""
        t = self._now_ms()
        for rule in reservation.rules:
            amount = reservation.reserved.get(rule.dimension, 0)
            self._book(rule).lease(reservation.request_id, amount, t + self._lease_ms)

    async def top_up(self, reservation: Reservation, extra: Mapping[Dimension, int]) -> bool:
        t = self._now_ms()
        cur = t // self._sub_ms
        rid = reservation.request_id
        for rule in reservation.rules:
            lease = self._book(rule).leases.get(rid)
            if lease is None or lease[1] <= t:
                return False  # the lease expired: the reservation is gone, nothing to grow
        for rule in reservation.rules:
            more = extra.get(rule.dimension, 0)
            if more > 0 and not rule.shadow:
                limit = rule.effective_limit(reservation.priority)
                if not self._check(rule, limit, more, t, cur).fits:
                    return False
        for rule in reservation.rules:
            book = self._book(rule)
            amount = book.leases[rid][0] + extra.get(rule.dimension, 0)
            book.lease(rid, amount, t + self._lease_ms)
        for dim, more in extra.items():
            reservation.reserved[dim] = reservation.reserved.get(dim, 0) + more
        return True

    async def settle(self, reservation: Reservation, used: Mapping[Dimension, int]) -> None:
        self.settle_soon(reservation, used)

    async def flush(self) -> None:
        return None  # nothing is ever queued

    def settle_soon(self, reservation: Reservation, used: Mapping[Dimension, int]) -> None:
        """In process, settling now costs less than queueing it."""
        t = self._now_ms()
        cur = t // self._sub_ms
        rid = reservation.request_id
        for rule in reservation.rules:
            book = self._book(rule)
            lease = book.leases.pop(rid, None)
            if lease is None:
                continue
            book.leased -= lease[0]
            amount = used.get(rule.dimension, 0)
            if lease[1] <= t or amount <= 0:
                continue
            kind = kind_of(rule)
            if kind == "m":
                book.windows[cur] = book.windows.get(cur, 0) + amount
                for old in [j for j in book.windows if j <= cur - self._n]:
                    del book.windows[old]
            elif kind in QUOTA_KINDS:
                pid, _ = period(kind, t, self._zone.offset(t))
                if pid not in book.quotas:
                    book.quotas = {p: v for p, v in book.quotas.items() if p[0] != pid[0]} | {pid: 0}
                book.quotas[pid] += amount

    async def settle_many(self, items: Sequence[tuple[Reservation, Mapping[Dimension, int]]]) -> None:
        for reservation, used in items:
            await self.settle(reservation, used)

    async def renew(self, reservations: Sequence[Reservation]) -> None:
        t = self._now_ms()
        for reservation in reservations:
            for rule in reservation.rules:
                book = self._book(rule)
                lease = book.leases.get(reservation.request_id)
                # An expired lease already stopped counting; reviving it would count it again retroactively.
                if lease is not None and lease[1] > t:
                    book.lease(reservation.request_id, lease[0], t + self._lease_ms)

    async def close(self) -> None:
        self._books.clear()
