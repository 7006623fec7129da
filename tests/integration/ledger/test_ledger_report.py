"""Spend reports over a seeded month of rows equal independent Python sums over the same rows, through the API
and through `llmgw spend` (a subprocess with LLMGW_DATABASE_URL set)."""

from __future__ import annotations

import csv
import io
import json
import os
import random
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone

import pytest
from ledger_rows import day, expected_report, make_row, tags_of

from gateway.ledger.model import SpendRow
from gateway.ledger.report import spend_report
from gateway.ledger.store import SpendStore

START = datetime(2026, 11, 1, tzinfo=UTC)
END = datetime(2026, 12, 1, tzinfo=UTC)


def _month() -> list[SpendRow]:
    """3,000 rows over November 2026 (UTC), and rows just outside it on both sides."""
    rng = random.Random(31)
    span = (END - START).total_seconds()
    rows = [make_row(i, START.timestamp() + rng.random() * span, rng, prefix="nov") for i in range(3_000)]
    rows.append(make_row(0, START.timestamp(), rng, prefix="first"))  # the first instant: in
    rows.append(make_row(0, START.timestamp() - 0.001, rng, prefix="before"))  # out
    rows.append(make_row(0, END.timestamp(), rng, prefix="end"))  # the end is exclusive: out
    rows.append(make_row(0, END.timestamp() - 0.001, rng, prefix="last"))  # in
    return rows


@pytest.fixture
async def seeded(store: SpendStore) -> list[SpendRow]:
    rows = _month()
    for i in range(0, len(rows), 500):
        await store.write(rows[i : i + 500])
    return rows


def _by(report: list[dict[str, object]], keys: list[str]) -> dict[tuple[str, ...], dict[str, object]]:
    out: dict[tuple[str, ...], dict[str, object]] = {}
    for r in report:
        k = tuple(str(r[name]) for name in keys)
        assert k not in out, f"group {k} twice"
        out[k] = {m: r[m] for m in ("requests", "tokens_in", "tokens_out", "cost_usd")}
    return out


async def test_totals_by_org_tag_and_day_equal_python_sums(store: SpendStore, seeded: list[SpendRow]) -> None:
    report = await spend_report(store, ["org", "tag"], START, END, "day")
    expected = expected_report(seeded, START, END, lambda r: [(day(r), r.org, t) for t in tags_of(r)])
    assert _by(report, ["period", "org", "tag"]) == expected
    assert list(report[0]) == ["period", "org", "tag", "requests", "tokens_in", "tokens_out", "cost_usd"]
    assert report == sorted(report, key=lambda r: (r["period"], r["org"], r["tag"]))
    assert {k[2] for k in expected} == {"", "prod", "eu", "batch"}  # untagged rows under ""
    assert len({k[0] for k in expected}) == 30  # every day of November


async def test_totals_by_org_equal_python_sums(store: SpendStore, seeded: list[SpendRow]) -> None:
    report = await spend_report(store, ["org"], START, END, None)
    assert _by(report, ["org"]) == expected_report(seeded, START, END, lambda r: [(r.org,)])
    inside = [r for r in seeded if START.timestamp() <= r.at < END.timestamp()]
    assert sum(int(str(r["requests"])) for r in report) == len(inside) == 3_002


@pytest.mark.parametrize(
    ("group_by", "interval"),
    [
        (["tag"], "month"),
        (["key", "user"], None),
        (["alias", "pool", "app"], "day"),
        ([], "month"),
        ([], None),
    ],
)
async def test_other_groupings_equal_python_sums(
    store: SpendStore, seeded: list[SpendRow], group_by: list[str], interval: str | None
) -> None:
    def keys(r: SpendRow) -> list[tuple[str, ...]]:
        fields = {
            "key": [r.key_id],
            "user": [r.end_user or ""],
            "alias": [r.alias],
            "pool": [r.pool],
            "app": [r.app],
            "tag": tags_of(r),
        }
        combos: list[tuple[str, ...]] = [(day(r)[:7] + "-01",) if interval == "month" else (day(r),)]
        if interval is None:
            combos = [()]
        for g in group_by:
            combos = [c + (v,) for c in combos for v in fields[g]]
        return combos

    report = await spend_report(store, group_by, START, END, interval)  # type: ignore[arg-type]
    names = (["period"] if interval else []) + group_by
    assert _by(report, names) == expected_report(seeded, START, END, keys)


async def test_a_range_without_requests(store: SpendStore, seeded: list[SpendRow]) -> None:
    empty = (datetime(2025, 1, 1, tzinfo=UTC), datetime(2025, 2, 1, tzinfo=UTC))
    assert await spend_report(store, ["org"], *empty, "day") == []
    assert await spend_report(store, [], *empty, None) == [
        {"requests": 0, "tokens_in": 0, "tokens_out": 0, "cost_usd": "0.000000"}
    ]


async def test_a_range_in_another_timezone_is_the_same_instants(
    store: SpendStore, seeded: list[SpendRow]
) -> None:
    plus2 = START.astimezone(timezone(timedelta(hours=2)))
    assert await spend_report(store, ["org"], plus2, END, None) == await spend_report(
        store, ["org"], START, END, None
    )


def _cli(database_url: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", "spend", *args],
        env={**os.environ, "LLMGW_DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


async def test_the_spend_command_prints_the_same_totals(seeded: list[SpendRow], database_url: str) -> None:
    window = ["--from", "2026-11-01", "--to", "2026-12-01"]
    expected = expected_report(seeded, START, END, lambda r: [(day(r), r.org, t) for t in tags_of(r)])

    as_json = json.loads(
        _cli(database_url, "--group-by", "org,tag", *window, "--interval", "day", "--format", "json")
    )
    assert _by(as_json, ["period", "org", "tag"]) == expected

    text = _cli(database_url, "--group-by", "org,tag", *window, "--interval", "day", "--format", "csv")
    as_csv = list(csv.DictReader(io.StringIO(text)))
    got = {
        (r["period"], r["org"], r["tag"]): {
            "requests": int(r["requests"]),
            "tokens_in": int(r["tokens_in"]),
            "tokens_out": int(r["tokens_out"]),
            "cost_usd": r["cost_usd"],
        }
        for r in as_csv
    }
    assert got == expected

    by_org = expected_report(seeded, START, END, lambda r: [(r.org,)])
    table = _cli(database_url, "--group-by", "org", *window).splitlines()
    assert table[0].split() == ["org", "requests", "tokens_in", "tokens_out", "cost_usd"]
    body = {line.split()[0]: line.split()[1:] for line in table[2:]}
    assert body == {
        org: [str(v["requests"]), str(v["tokens_in"]), str(v["tokens_out"]), str(v["cost_usd"])]
        for (org,), v in by_org.items()
    }


async def test_the_spend_command_refuses_bad_arguments(database_url: str) -> None:
    env = {**os.environ, "LLMGW_DATABASE_URL": database_url}
    for args, message in (
        (
            ["--group-by", "org,colour", "--from", "2026-11-01", "--to", "2026-12-01"],
            "cannot group by 'colour'",
        ),
        (["--from", "2026-12-01", "--to", "2026-11-01"], "must be before end"),
        (["--from", "November", "--to", "2026-12-01"], "is not a date"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "gateway", "spend", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr)
