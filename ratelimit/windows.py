"""Time math shared by the backends: rule kinds, UTC quota periods, and the per-rule check.

All times are integer milliseconds of the deciding clock (the Redis server's `TIME` for the Redis
backend, the injected clock for the memory backend). `ratelimit/lua/lib_v3.lua` implements the same
functions in Lua; the contract tests run both backends through the same cases, keeping them in step.

A rule's *used* amount at time t is
- minute rules: settled usage of the current and previous `n - 1` sub-windows + live leases;
- quota rules: settled usage of the current UTC day / month + live leases;
- concurrency rules: live leases (each holds 1).
A request fits a rule when used + cost <= the rule's effective limit for its priority.
"""

from __future__ import annotations

import calendar
import datetime as dt
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import compress
from zoneinfo import ZoneInfo

from ratelimit.model import (
    SUB_WINDOWS,
    WINDOW_OF,
    WINDOW_S,
    Admission,
    Decision,
    Reservation,
    Rule,
    RuleState,
    Window,
)

DEFAULT_SUB_WINDOW_MS = WINDOW_S * 1000 // SUB_WINDOWS
DAY_MS = 86_400_000
# Concurrency slots free up when some other request settles, which nobody can predict.
CONCURRENCY_RETRY_MS = 1000
# A quota whose settled usage leaves room, refused for running requests' reservations.
SETTLE_RETRY_MS = 1000

KIND_OF_WINDOW: dict[Window, str] = {
    Window.MINUTE: "m", Window.DAY: "d", Window.MONTH: "M", Window.TOTAL: "T", Window.NONE: "c",
}  # fmt: skip
QUOTA_KINDS = ("d", "M", "T")  # settled per period: day, month, or one period that never ends
TOTAL_PERIOD = "all"


def kind_of(rule: Rule) -> str:
    return KIND_OF_WINDOW[WINDOW_OF[rule.dimension]]


def period(kind: str, t_ms: int, offset_min: int = 0) -> tuple[str, int]:
    """(period id, period end in ms) of a quota kind (`d` day, `M` month) at t, on the calendar of the
    zone `offset_min` minutes east of UTC (0: UTC); the total kind `T` has one period that never ends
    (end 0)."""
    if kind == "T":
        return TOTAL_PERIOD, 0
    shift = offset_min * 60_000
    pid, end = _period_of_day(kind, (t_ms + shift) // DAY_MS)
    return pid, end - shift


@lru_cache(maxsize=128)
def _period_of_day(kind: str, days: int) -> tuple[str, int]:
    """(period id, end in ms of the zone's clock) of day number `days`: cached, every admission of a
    quota rule asks for today's (the month's takes dates and a calendar lookup)."""
    if kind == "d":
        return f"d{days}", (days + 1) * DAY_MS
    day = dt.date(1970, 1, 1) + dt.timedelta(days=days)
    first_next = day.replace(day=1) + dt.timedelta(days=calendar.monthrange(day.year, day.month)[1])
    return f"m{day.year:04d}{day.month:02d}", (first_next - dt.date(1970, 1, 1)).days * DAY_MS


class QuotaZone:
    """The time zone whose calendar days and months the quotas follow (`limits.quota_timezone`), as
    its offset from UTC in minutes at a time. UTC (the default) is always 0 and costs nothing; another
    zone's offset is looked up once a minute (it changes only at daylight-saving switches)."""

    def __init__(self, name: str = "UTC", clock: Callable[[], float] = time.time) -> None:
        self.name = name
        self._zone = None if name == "UTC" else ZoneInfo(name)
        self._clock = clock
        self._until = 0.0
        self._now = 0

    def offset(self, t_ms: int) -> int:
        """Minutes east of UTC at `t_ms`."""
        if self._zone is None:
            return 0
        delta = dt.datetime.fromtimestamp(t_ms / 1000, self._zone).utcoffset()
        return int(delta.total_seconds()) // 60 if delta is not None else 0

    def now(self) -> int:
        """The offset now, from the cached minute."""
        if self._zone is None:
            return 0
        t = self._clock()
        if t >= self._until:
            self._now = self.offset(int(t * 1000))
            self._until = t + 60.0
        return self._now


@dataclass(frozen=True, slots=True)
class Check:
    """One rule's situation at decision time (everything needed for fit, Retry-After and headers)."""

    kind: str
    limit: int
    cost: int
    leased: int  # live lease amounts (this request excluded)
    counts: Sequence[int]  # minute rules: sub-window usage, oldest first, current last; else empty
    quota_used: int  # quota rules: settled usage of the period
    period_end_ms: int  # quota rules
    earliest_lease_ms: int | None  # expiry of the first lease to expire, if any

    @property
    def used(self) -> int:
        return self.leased + sum(self.counts) + self.quota_used

    @property
    def fits(self) -> bool:
        return self.used + self.cost <= self.limit

    def retry_ms(self, t_ms: int, cur: int, sub_ms: int) -> int:
        """When the request could fit, if nothing else arrives (>= 1 ms)."""
        if self.kind == "c":
            return CONCURRENCY_RETRY_MS
        if self.kind in QUOTA_KINDS:
            # If what is settled leaves room, running requests settling below their reservations (a
            # dollar budget reserves the worst price) will make it: soon, not at the period's end.
            if self.leased > 0 and self.used - self.leased + self.cost <= self.limit:
                return SETTLE_RETRY_MS
            return DAY_MS if self.kind == "T" else max(1, self.period_end_ms - t_ms)
        need = self.used + self.cost - self.limit
        freed = 0
        # Sub-window cur - n + 1 + k leaves the window at (cur + 1 + k) * sub_ms.
        for k, count in enumerate(self.counts):
            freed += count
            if freed >= need:
                return max(1, (cur + 1 + k) * sub_ms - t_ms)
        if self.earliest_lease_ms is not None and self.cost <= self.limit:
            # Live leases will settle (usage <= reservation) or expire; the first one is the next chance.
            return max(1, self.earliest_lease_ms - t_ms)
        return len(self.counts) * sub_ms

    def state(self, charged: int, t_ms: int, cur: int, sub_ms: int) -> tuple[int, int]:
        """(remaining, reset_ms) after the decision; `charged` is the cost if admitted, else 0."""
        total = self.used + charged
        remaining = max(0, self.limit - total)
        if self.kind in ("d", "M"):
            return remaining, self.period_end_ms - t_ms
        if self.kind in ("c", "T") or total == 0:
            return remaining, 0
        if self.leased + charged > 0:
            newest = cur  # a lease settles into the current (or a later) sub-window
        else:
            newest = cur - len(self.counts) + 1 + max(k for k, c in enumerate(self.counts) if c)
        return remaining, (newest + len(self.counts)) * sub_ms - t_ms


def choose_refusal(admission: Admission, retry_ms: Sequence[int | None]) -> tuple[int, int]:
    """(index, retry ms) of the refusing non-shadow rule that binds longest (ties: the first), or (-1, 0).

    `retry_ms[i]` is None when rule i fits. Retry-After must cover the slowest refusing rule (retrying
    earlier is refused again), and naming that same rule keeps the 429 message and header consistent.
    """
    best, best_ms = -1, 0
    for i, (rule, ms) in enumerate(zip(admission.rules, retry_ms, strict=True)):
        if ms is not None and not rule.shadow and ms > best_ms:
            best, best_ms = i, ms
    return best, best_ms


def build_decision(
    admission: Admission,
    refused: int,
    retry_ms: int,
    remaining: Sequence[int],
    reset_ms: Sequence[int],
    shadow_refused: Sequence[int],
) -> Decision:
    """A decision from both backends' per-rule outcomes, given as parallel sequences in rule order
    (the Redis backend slices them straight out of the script's flat reply): what remains at each
    rule, when it is back to its full allowance, and whether a shadow rule would have refused."""
    rules = admission.rules
    states = tuple(map(RuleState, rules, remaining, [ms / 1000 for ms in reset_ms]))
    shadow = tuple(compress(rules, shadow_refused)) if any(shadow_refused) else ()
    if refused >= 0:
        return Decision(False, None, states, rules[refused], max(retry_ms, 1) / 1000, shadow_refusals=shadow)
    reservation = Reservation(admission.request_id, rules, dict(admission.cost), admission.priority)
    return Decision(True, reservation, states, shadow_refusals=shadow)
