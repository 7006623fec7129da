"""`llmgw db migrate` and `llmgw spend`: the ledger's commands (the parsers are in gateway/cli.py).

    llmgw db migrate --wait-s 60       # e.g. a Kubernetes Job before a rollout; exit 0 when up to date
    llmgw spend --group-by org,tag --from 2026-11-01 --to 2026-12-01 --interval day --format csv

Both read LLMGW_DATABASE_URL or LLMGW_DATABASE_URL_FILE. `--from` / `--to` are dates (UTC midnight) or
ISO times (UTC unless they carry an offset); the range is [from, to). Exit codes: 0 done, 1 the database
failed (unreachable past the wait, a failing migration, a query error), 2 a usage error (no URL, bad
arguments). Messages show the URL without its password.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC, date, datetime
from typing import Any, Literal, cast

import asyncpg  # type: ignore[import-untyped]  # asyncpg ships no type information

from gateway.ledger.report import MEASURES, columns, spend_report, to_csv
from gateway.ledger.store import DatabaseConfigError, MigrationError, SpendStore, database_url, redacted

__all__ = ["db", "parse_time", "spend"]

# Errors that mean "not reachable yet": worth waiting for (the server starting, a Service not yet routed).
_TRANSIENT = (OSError, TimeoutError, asyncpg.CannotConnectNowError, asyncpg.TooManyConnectionsError)
_RETRY_S = 1.0


def _err(command: str, message: str) -> None:
    print(f"llmgw {command}: {message}", file=sys.stderr)


def _url(command: str) -> str | None:
    try:
        url = database_url(os.environ)
    except DatabaseConfigError as e:
        _err(command, str(e))
        return None
    if url is None:
        _err(command, "set LLMGW_DATABASE_URL (or LLMGW_DATABASE_URL_FILE, a file holding it)")
    return url


def db(args: argparse.Namespace) -> int:
    if args.db_command == "migrate":
        return _migrate(args)
    raise AssertionError(args.db_command)  # argparse allows only the commands above


def _migrate(args: argparse.Namespace) -> int:
    url = _url("db migrate")
    if url is None:
        return 2
    return asyncio.run(_migrate_async(url, max(float(args.wait_s), 0.0)))


async def _migrate_async(url: str, wait_s: float) -> int:
    where = redacted(url)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            store = await SpendStore.connect(url, min_size=1, max_size=1)
            break
        except _TRANSIENT as e:
            if time.monotonic() + _RETRY_S > deadline:
                _err("db migrate", f"cannot reach {where} (waited {wait_s:g} s): {type(e).__name__}: {e}")
                return 1
            await asyncio.sleep(_RETRY_S)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, ValueError) as e:
            _err("db migrate", f"cannot connect to {where}: {type(e).__name__}: {e}")
            return 1
    try:
        applied = await store.migrate()
        now = await store.applied_migrations()
    except (MigrationError, asyncpg.PostgresError, asyncpg.InterfaceError, *_TRANSIENT) as e:
        _err("db migrate", f"{where}: {e}")
        return 1
    finally:
        await store.close()
    if applied:
        print(f"{where}: applied {', '.join(applied)}")
    else:
        print(f"{where}: up to date ({', '.join(now) or 'no migrations'})")
    return 0


def parse_time(text: str) -> datetime:
    """A date (its UTC midnight) or an ISO time (UTC unless it names an offset)."""
    try:
        if len(text) == 10:
            return datetime.combine(date.fromisoformat(text), datetime.min.time(), UTC)
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is not a date (2026-11-01) or an ISO time (2026-11-01T12:00:00Z)"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def spend(args: argparse.Namespace) -> int:
    groups = [g.strip() for g in args.group_by.split(",") if g.strip()]
    try:
        start, end = parse_time(args.start), parse_time(args.end)
    except ValueError as e:
        _err("spend", str(e))
        return 2
    url = _url("spend")
    if url is None:
        return 2
    interval = cast(Literal["day", "month"] | None, args.interval)
    try:
        rows = asyncio.run(_report(url, groups, start, end, interval))
    except ValueError as e:  # the report's own argument checks
        _err("spend", str(e))
        return 2
    except (asyncpg.PostgresError, asyncpg.InterfaceError, *_TRANSIENT) as e:
        _err("spend", f"{redacted(url)}: {type(e).__name__}: {e}")
        return 1
    header = columns(groups, interval)
    if args.format == "json":
        print(json.dumps(rows, indent=2))
    elif args.format == "csv":
        sys.stdout.write(to_csv(rows, header))
    else:
        print(table(rows, header))
    return 0


async def _report(
    url: str, groups: list[str], start: datetime, end: datetime, interval: Literal["day", "month"] | None
) -> list[dict[str, Any]]:
    store = await SpendStore.connect(url, min_size=1, max_size=1)
    try:
        return await spend_report(store, groups, start, end, interval)
    finally:
        await store.close()


def table(rows: Sequence[dict[str, Any]], header: Sequence[str]) -> str:
    """A plain text table: groups left-aligned, measures right-aligned."""
    if not rows:
        return "(no requests in that range)"
    cells = [[str(r[h]) for h in header] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(header)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if h in MEASURES else v.ljust(w)
            for v, w, h in zip(values, widths, header, strict=True)
        ).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(c) for c in cells)])
