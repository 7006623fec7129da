"""The spend report's arguments are checked before any query, with messages that say what is wrong; its
formatting (exact dollars, CSV, the CLI's times and table) without a database."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any, cast

import pytest

from gateway.ledger.cli import parse_time, table
from gateway.ledger.report import columns, spend_report, to_csv, usd
from gateway.ledger.store import SpendStore


class Unreachable:
    """Stands in for the store: the checks must refuse before it is used."""

    async def fetch(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        raise AssertionError("the store was queried")


STORE = cast(SpendStore, Unreachable())
START = datetime(2026, 11, 1, tzinfo=UTC)
END = datetime(2026, 12, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("group_by", "start", "end", "interval", "message"),
    [
        (
            ["org", "colour"],
            START,
            END,
            None,
            "cannot group by 'colour': choose from org, app, key, tag, user",
        ),
        (["key_id"], START, END, None, "cannot group by 'key_id'"),
        ("org", START, END, None, "group_by is a list of group names"),
        (["org", "org"], START, END, None, "names a group twice"),
        (["org"], START, END, "week", "interval 'week': choose day, month or none"),
        (["org"], datetime(2026, 11, 1), END, None, r"start \(2026-11-01T00:00:00\) must be timezone-aware"),
        (["org"], START, datetime(2026, 12, 1), "day", "end .* must be timezone-aware"),
        (["org"], date(2026, 11, 1), END, None, "start must be a datetime, not date"),
        (["org"], "2026-11-01", END, None, "start must be a datetime, not str"),
        (["org"], END, START, None, "must be before end"),
        (["org"], START, START, None, "must be before end"),
    ],
)
async def test_invalid_arguments_are_value_errors(
    group_by: Any, start: Any, end: Any, interval: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        await spend_report(STORE, group_by, start, end, interval)


def test_columns_put_the_period_first_and_the_measures_last() -> None:
    assert columns(["org", "tag"], "day") == [
        "period",
        "org",
        "tag",
        "requests",
        "tokens_in",
        "tokens_out",
        "cost_usd",
    ]
    assert columns([], None) == ["requests", "tokens_in", "tokens_out", "cost_usd"]


@pytest.mark.parametrize(
    ("micro", "text"),
    [
        (0, "0.000000"),
        (1, "0.000001"),
        (999_999, "0.999999"),
        (1_000_000, "1.000000"),
        (123_456_789_012, "123456.789012"),
        (-1_500_000, "-1.500000"),
        (10**20 + 7, "100000000000000.000007"),
    ],
)
def test_dollars_are_exact(micro: int, text: str) -> None:
    assert usd(micro) == text


def test_csv_has_a_header_and_quotes_what_needs_it() -> None:
    rows = [
        {"org": "acme", "tag": "", "requests": 2, "cost_usd": "0.100000"},
        {"org": 'a,"b"', "tag": "prod", "requests": 1, "cost_usd": "1.000000"},
    ]
    assert to_csv(rows) == 'org,tag,requests,cost_usd\nacme,,2,0.100000\n"a,""b""",prod,1,1.000000\n'
    assert to_csv([]) == ""
    assert to_csv([], ["org", "requests"]) == "org,requests\n"


def test_times_of_the_command_line() -> None:
    assert parse_time("2026-11-01") == START
    assert parse_time("2026-11-01T12:30:00") == START + timedelta(hours=12, minutes=30)
    assert parse_time("2026-11-01T12:30:00+02:00") == datetime(
        2026, 11, 1, 12, 30, tzinfo=timezone(timedelta(hours=2))
    )
    assert parse_time("2026-11-01T00:00:00Z") == START
    with pytest.raises(ValueError, match="is not a date"):
        parse_time("01/11/2026")


def test_table_aligns_groups_left_and_measures_right() -> None:
    rows = [
        {"org": "acme", "requests": 2, "cost_usd": "0.100000"},
        {"org": "globex-corp", "requests": 1234, "cost_usd": "12.000000"},
    ]
    assert table(rows, ["org", "requests", "cost_usd"]).splitlines() == [
        "org          requests   cost_usd",
        "-----------  --------  ---------",
        "acme                2   0.100000",
        "globex-corp      1234  12.000000",
    ]
    assert table([], ["org"]) == "(no requests in that range)"
