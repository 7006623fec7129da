"""Spend reports over the ledger: requests, tokens and dollars per group and period.

    await spend_report(store, ["org", "tag"], start, end, "day")
    -> [{"period": "2026-11-01", "org": "acme", "tag": "prod", "requests": 3, "tokens_in": 120,
         "tokens_out": 300, "cost_usd": "0.004200"}, ...]

Groups: org, app, key (the key id), tag, user (the end user; "" when the request named none), alias,
pool. `tag` unnests the request's tags: a request with two tags counts under each (once per distinct
tag), an untagged one under "". `interval` adds `period`, the UTC day or month (its first day) as an ISO
date. The range is [start, end), timezone-aware. Rows come ordered by period, then the groups.

`cost_usd` is a decimal string with six places, from the sum of the integer micro-dollars (PostgreSQL
sums bigint exactly, as numeric): never a float.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from gateway.ledger.store import SpendStore

__all__ = ["GROUPS", "INTERVALS", "MEASURES", "columns", "spend_report", "to_csv", "usd"]

Interval = Literal["day", "month"]

# Group name -> the SQL expression (over `s`, the ledger; `t`, the unnested tags). Only these are ever
# put in the query: the names are checked against this table first.
GROUPS: dict[str, str] = {
    "org": "s.org",
    "app": "s.app",
    "key": "s.key_id",
    "tag": "t.tag",
    "user": "coalesce(s.end_user, '')",
    "alias": "s.alias",
    "pool": "s.pool",
}
INTERVALS: dict[str, str] = {
    "day": "date_trunc('day', s.at AT TIME ZONE 'UTC')::date",
    "month": "date_trunc('month', s.at AT TIME ZONE 'UTC')::date",
}
MEASURES = ("requests", "tokens_in", "tokens_out", "cost_usd")
TAG_JOIN = (
    "CROSS JOIN LATERAL unnest(CASE WHEN cardinality(s.tags) = 0 THEN ARRAY['']::text[] "
    "ELSE ARRAY(SELECT DISTINCT u FROM unnest(s.tags) AS u) END) AS t(tag)"
)
SELECT_MEASURES = (
    "count(*) AS requests, coalesce(sum(s.tokens_in), 0) AS tokens_in, "
    "coalesce(sum(s.tokens_out), 0) AS tokens_out, coalesce(sum(s.cost_micro_usd), 0) AS cost_micro_usd"
)


def _check(group_by: Sequence[str], start: datetime, end: datetime, interval: str | None) -> list[str]:
    if isinstance(group_by, str):
        raise ValueError(
            f"group_by is a list of group names, e.g. ['org', 'tag'], not the string {group_by!r}"
        )
    groups = list(group_by)
    for g in groups:
        if g not in GROUPS:
            raise ValueError(f"cannot group by {g!r}: choose from {', '.join(GROUPS)}")
    if len(set(groups)) != len(groups):
        raise ValueError(f"group_by names a group twice: {groups}")
    if interval is not None and interval not in INTERVALS:
        raise ValueError(f"interval {interval!r}: choose day, month or none")
    for name, value in (("start", start), ("end", end)):
        if not isinstance(value, datetime):
            raise ValueError(f"{name} must be a datetime, not {type(value).__name__}")
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"{name} ({value.isoformat()}) must be timezone-aware, e.g. in UTC")
    if start >= end:
        raise ValueError(f"start ({start.isoformat()}) must be before end ({end.isoformat()})")
    return groups


def columns(group_by: Sequence[str], interval: str | None) -> list[str]:
    """The keys of the report's rows, in order."""
    return [*(["period"] if interval else []), *group_by, *MEASURES]


def usd(micro: int) -> str:
    """Exact micro-dollars as dollars with six places: 1_234_567 -> "1.234567"."""
    sign = "-" if micro < 0 else ""
    whole, frac = divmod(abs(micro), 1_000_000)
    return f"{sign}{whole}.{frac:06d}"


async def spend_report(
    store: SpendStore,
    group_by: Sequence[str],
    start: datetime,
    end: datetime,
    interval: Literal["day", "month"] | None,
) -> list[dict[str, Any]]:
    """Totals per group (and period) of the requests that finished in [start, end)."""
    groups = _check(group_by, start, end, interval)
    keys = (["period"] if interval else []) + groups
    exprs = ([INTERVALS[interval]] if interval else []) + [GROUPS[g] for g in groups]
    # Aliases are quoted: `user` and `key` are SQL keywords. Group and order by position.
    select = [f'{e} AS "{k}"' for e, k in zip(exprs, keys, strict=True)]
    positions = ", ".join(str(i + 1) for i in range(len(keys)))
    sql = (
        f"SELECT {', '.join([*select, SELECT_MEASURES])} FROM llmgw_spend s"
        f"{' ' + TAG_JOIN if 'tag' in groups else ''} WHERE s.at >= $1 AND s.at < $2"
        f"{f' GROUP BY {positions} ORDER BY {positions}' if keys else ''}"
    )
    out: list[dict[str, Any]] = []
    for r in await store.fetch(sql, start, end):
        row: dict[str, Any] = {}
        for k in keys:
            row[k] = r[k].isoformat() if k == "period" else r[k]
        row["requests"] = int(r["requests"])
        row["tokens_in"] = int(r["tokens_in"])
        row["tokens_out"] = int(r["tokens_out"])
        row["cost_usd"] = usd(int(r["cost_micro_usd"]))
        out.append(row)
    return out


def to_csv(rows: Sequence[Mapping[str, Any]], header: Sequence[str] | None = None) -> str:
    """The rows as CSV with a header line (`header`, else the first row's keys; no rows, no header: "")."""
    names = list(header) if header is not None else (list(rows[0]) if rows else [])
    if not names:
        return ""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=names, lineterminator="\n", extrasaction="raise")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()
