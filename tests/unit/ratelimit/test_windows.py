"""Quota periods (UTC calendar) and the per-rule check's Retry-After / reset arithmetic."""

from __future__ import annotations

import datetime as dt

import pytest

from ratelimit.windows import Check, period


def ms(*args: int) -> int:
    return int(dt.datetime(*args, tzinfo=dt.UTC).timestamp() * 1000)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("t", "month", "month_end"),
    [
        (ms(2024, 2, 29, 23, 59, 59), "m202402", ms(2024, 3, 1)),
        (ms(2023, 12, 31, 12), "m202312", ms(2024, 1, 1)),
        (ms(2025, 1, 1), "m202501", ms(2025, 2, 1)),
        (ms(2100, 2, 28), "m210002", ms(2100, 3, 1)),
    ],
)
def test_periods(t: int, month: str, month_end: int) -> None:
    assert period("M", t) == (month, month_end)
    day_id, day_end = period("d", t)
    start = dt.datetime.fromtimestamp(t / 1000, dt.UTC).date()
    assert day_end == ms(start.year, start.month, start.day) + 86_400_000
    assert day_id == f"d{t // 86_400_000}"


def minute(counts: list[int], leased: int = 0, cost: int = 10, limit: int = 100) -> Check:
    return Check("m", limit, cost, leased, counts, 0, 0, None if not leased else 5_000)


def test_minute_retry_waits_for_enough_sub_windows_to_leave() -> None:
    counts = [30, 0, 0, 40, 0, 0, 0, 0, 0, 0, 0, 30]  # used 100, oldest first
    cur, sub = 100, 1000
    t = cur * sub + 250
    assert minute(counts, cost=20).retry_ms(t, cur, sub) == (cur + 1) * sub - t  # the oldest 30 suffice
    assert minute(counts, cost=50).retry_ms(t, cur, sub) == (cur + 4) * sub - t  # needs the 40 as well
    assert minute(counts, cost=101).retry_ms(t, cur, sub) == 12 * sub  # never fits: a whole window


def test_reset_is_when_the_newest_usage_leaves() -> None:
    counts = [0] * 12
    counts[3] = 10
    cur, sub = 100, 1000
    t = cur * sub
    check = minute(counts, cost=0)
    assert check.state(0, t, cur, sub) == (90, (cur - 8 + 12) * sub - t)
    assert minute([0] * 12, cost=0).state(0, t, cur, sub) == (100, 0)
    assert minute([0] * 12, cost=5).state(5, t, cur, sub) == (95, 12 * sub)
