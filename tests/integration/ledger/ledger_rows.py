"""Spend rows made to order for the ledger's integration tests, and the independent sums they are checked
against (plain Python over the rows, no SQL)."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from gateway.ledger.model import SpendRow

ORGS = ("acme", "globex", "initech")
TAG_SETS: tuple[tuple[str, ...], ...] = ((), ("prod",), ("prod", "eu"), ("batch",), ("eu", "eu"))


def make_row(i: int, at: float, rng: random.Random, prefix: str = "r") -> SpendRow:
    """A plausible row; costs are odd micro-dollar amounts, so a float sum would show."""
    return SpendRow(
        request_id=f"{prefix}-{i}",
        at=at,
        org=rng.choice(ORGS),
        app=rng.choice(("web", "batch")),
        key_id=f"k{rng.randrange(5)}",
        tags=rng.choice(TAG_SETS),
        end_user=rng.choice((None, "u1", "u2")),
        alias=rng.choice(("small", "auto")),
        pool=rng.choice(("small", "large")),
        adapter=rng.choice((None, "support-v2")),
        tier=rng.choice((None, "small", "large")),
        tokens_in=rng.randrange(1, 5000),
        tokens_out=rng.randrange(0, 2000),
        tokens_cached=rng.randrange(0, 100),
        cost_micro_usd=rng.randrange(0, 3_000_000) * 7 + 3,
        status=rng.choice((200, 200, 200, 429, 500)),
        cache_hit=rng.random() < 0.1,
    )


def usd(micro: int) -> str:
    """Written again here, not imported: the report's formatting is what is being checked."""
    return f"{micro // 1_000_000}.{micro % 1_000_000:06d}"


def expected_report(
    rows: Iterable[SpendRow],
    start: datetime,
    end: datetime,
    keys: Callable[[SpendRow], Iterable[tuple[str, ...]]],
) -> dict[tuple[str, ...], dict[str, object]]:
    """Totals per group key over the rows in [start, end); `keys(row)` gives the groups a row counts in."""
    acc: dict[tuple[str, ...], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for r in rows:
        if not start.timestamp() <= r.at < end.timestamp():
            continue
        for k in keys(r):
            a = acc[k]
            a[0] += 1
            a[1] += r.tokens_in
            a[2] += r.tokens_out
            a[3] += r.cost_micro_usd
    return {
        k: {"requests": a[0], "tokens_in": a[1], "tokens_out": a[2], "cost_usd": usd(a[3])}
        for k, a in acc.items()
    }


def day(r: SpendRow) -> str:
    return datetime.fromtimestamp(r.at, UTC).date().isoformat()


def tags_of(r: SpendRow) -> list[str]:
    """The tags a row is reported under: each distinct tag once, "" when it has none."""
    return sorted(set(r.tags)) or [""]
