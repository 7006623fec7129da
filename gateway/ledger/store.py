"""PostgreSQL for the ledger: batch writes, schema migrations, retention, the audit log (asyncpg).

Where: `LLMGW_DATABASE_URL` (`postgresql://user:password@host:5432/db?sslmode=require`), or
`LLMGW_DATABASE_URL_FILE`, a file holding it (a mounted Kubernetes Secret): `database_url(env)`. Messages
name the server through `redacted(url)`, never with its password.

- `write(rows)`: one `INSERT ... SELECT FROM unnest(...) ON CONFLICT (request_id) DO NOTHING` per batch:
  writing a batch again (a retry after a lost acknowledgement, a row claimed from a
  replica that had already written it) changes nothing.
- `migrate()`: `migrations/NNN_name.sql` in order, each once, all in one transaction holding an advisory
  lock (`pg_advisory_xact_lock`): replicas starting together wait for each other, and a failed migration
  leaves nothing half-applied. `llmgw_schema_migrations` records each version with the file's SHA-256;
  a file changed after it was applied is an error, not a silent skip. (No `CREATE INDEX CONCURRENTLY` in a
  migration: it cannot run in a transaction.)
- `retention_turn(every_s)` + `delete_older_than(days, limit)`: one replica per period (a row of
  `llmgw_ledger_jobs` updated only when the period has passed) deletes at most `limit` of the oldest rows.
- `audit(...)` / `audit_entries(...)`: `llmgw_audit`.

The pool is created with no connection (`min_size=0`): a gateway starts while PostgreSQL is down, and the
ledger's drainer retries.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson

from gateway.config import ConfigError
from gateway.ledger.model import SpendRow

__all__ = [
    "DatabaseConfigError",
    "Migration",
    "MigrationError",
    "SpendStore",
    "database_url",
    "migrations",
    "redacted",
]

URL_SETTING = "LLMGW_DATABASE_URL"
# Any constant: advisory lock keys are per database; this one is "llmgw" + 1 in hex.
MIGRATION_LOCK = 0x6C6C6D6777000001

MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS llmgw_schema_migrations (
    version    text PRIMARY KEY,
    name       text NOT NULL,
    sha256     text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""
_APPLIED = "SELECT version, name, sha256 FROM llmgw_schema_migrations ORDER BY version"
_RECORD = "INSERT INTO llmgw_schema_migrations (version, name, sha256) VALUES ($1, $2, $3)"
# One statement per batch, its columns as arrays: asyncpg binds and PostgreSQL parses them once, where
# `executemany` sends and answers a Bind/Execute per row (client CPU per row, doc 029: 9-13 -> 7-9 us).
# Tags travel as a JSON array per row: a text[] column cannot be unnested from a ragged 2-D array.
INSERT_ROWS = """
INSERT INTO llmgw_spend (request_id, at, org, app, key_id, tags, end_user, alias, pool, adapter, tier,
                         tokens_in, tokens_out, tokens_cached, cost_micro_usd, status, cache_hit)
SELECT r, to_timestamp(a), o, ap, k, ARRAY(SELECT jsonb_array_elements_text(tg::jsonb)), e, al, p, ad, t,
       ti, tou, tc, c, s, h
FROM unnest($1::text[], $2::float8[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
            $8::text[], $9::text[], $10::text[], $11::text[], $12::bigint[], $13::bigint[], $14::bigint[],
            $15::bigint[], $16::int[], $17::bool[])
     AS u(r, a, o, ap, k, tg, e, al, p, ad, t, ti, tou, tc, c, s, h)
ON CONFLICT (request_id) DO NOTHING
"""
DELETE_OLDEST = """
DELETE FROM llmgw_spend WHERE request_id IN (
    SELECT request_id FROM llmgw_spend WHERE at < now() - make_interval(days => $1) ORDER BY at LIMIT $2
)
"""
# Returns a row only when the job's period has passed since it last ran anywhere (or it never ran).
TAKE_TURN = """
INSERT INTO llmgw_ledger_jobs (name, last_run) VALUES ($1, now())
ON CONFLICT (name) DO UPDATE SET last_run = now()
    WHERE llmgw_ledger_jobs.last_run <= now() - make_interval(secs => $2)
RETURNING name
"""
INSERT_AUDIT = """
INSERT INTO llmgw_audit (actor, action, target, before, after) VALUES ($1, $2, $3, $4::jsonb, $5::jsonb)
"""
SELECT_AUDIT = """
SELECT id, at, actor, action, target, before::text AS before, after::text AS after
FROM llmgw_audit ORDER BY id DESC LIMIT $1
"""

_MIGRATION_FILE = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")


class DatabaseConfigError(ConfigError):
    """LLMGW_DATABASE_URL / _FILE cannot be used; the message names the setting, never the password."""


class MigrationError(Exception):
    """The schema cannot be brought up to date (a changed migration file, a failing statement)."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: str  # "001"
    name: str  # "spend"
    sql: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def migrations() -> list[Migration]:
    """The shipped migrations, in order (package data: `gateway/ledger/migrations/*.sql`)."""
    found: list[Migration] = []
    for item in (resources.files("gateway.ledger") / "migrations").iterdir():
        if not item.name.endswith(".sql"):
            continue
        m = _MIGRATION_FILE.match(item.name)
        if m is None:
            raise MigrationError(f"migration file {item.name!r} is not named NNN_name.sql")
        found.append(Migration(m.group(1), m.group(2), item.read_text(encoding="utf-8")))
    found.sort(key=lambda mig: mig.version)
    versions = [mig.version for mig in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"two migration files share a version: {versions}")
    return found


def redacted(url: str) -> str:
    """`url` with its password replaced by `***` (for messages and logs)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.netloc.rsplit("@", 1)[1]
        return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))
    except ValueError:
        return "<an unparsable URL>"


def database_url(env: Mapping[str, str]) -> str | None:
    """The database URL from LLMGW_DATABASE_URL or LLMGW_DATABASE_URL_FILE; None when neither is set."""
    value = env.get(URL_SETTING) or None
    file = env.get(f"{URL_SETTING}_FILE") or None
    if value is not None and file is not None:
        raise DatabaseConfigError(f"{URL_SETTING} and {URL_SETTING}_FILE are both set: keep one")
    if file is not None:
        path = Path(file)
        try:
            text = path.read_text()
        except OSError as e:
            raise DatabaseConfigError(f"{URL_SETTING}_FILE: cannot read {path}: {e.strerror}") from None
        value = text.strip()  # a Secret written with `echo` ends in a newline that is no part of the URL
        if not value:
            raise DatabaseConfigError(f"{URL_SETTING}_FILE: {path} is empty")
    if value is None:
        return None
    setting = f"{URL_SETTING}_FILE" if file is not None else URL_SETTING
    try:
        # Only the scheme is checked: asyncpg reads the rest, multi-host lists (h1:5432,h2:5432) included.
        parts = urlsplit(value)
    except ValueError:
        raise DatabaseConfigError(f"{setting}: not a URL") from None
    if parts.scheme not in ("postgresql", "postgres"):
        raise DatabaseConfigError(
            f"{setting}: {redacted(value)} is not a postgresql:// URL (e.g. postgresql://user:pw@host:5432/db)"
        )
    return value


def _columns(rows: Sequence[SpendRow]) -> list[Any]:
    """INSERT_ROWS's 17 parameters: one list per column, the tags of each row as a JSON array."""
    cols: list[Any] = [list(c) for c in zip(*rows, strict=True)]
    cols[5] = [orjson.dumps(tags).decode() for tags in cols[5]]
    return cols


def _count(status: str) -> int:
    """The row count of a command tag ("DELETE 42")."""
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _json(value: dict[str, Any] | None) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


class SpendStore:
    """The ledger's tables on one asyncpg pool (`connect`), closed with `close`."""

    def __init__(self, pool: Any, url: str = "") -> None:
        self._pool = pool
        self.where = redacted(url)  # for messages

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        min_size: int = 0,
        max_size: int = 4,
        connect_timeout_s: float = 5.0,
        command_timeout_s: float = 30.0,
    ) -> SpendStore:
        # The drainer writes one batch at a time: a few connections serve it, the reports and the audit log.
        import asyncpg  # type: ignore[import-untyped]  # here, not at the top: only a gateway with a database pays for it

        pool = await asyncpg.create_pool(
            url,
            min_size=min_size,
            max_size=max_size,
            timeout=connect_timeout_s,
            command_timeout=command_timeout_s,
            server_settings={"application_name": "llmgw"},
        )
        return cls(pool, url)

    async def close(self) -> None:
        await self._pool.close()

    async def write(self, rows: Sequence[SpendRow]) -> None:
        if not rows:
            return
        # A request twice in one batch (appended again after a cut pipeline): DO NOTHING skips the second.
        async with self._pool.acquire() as conn:
            await conn.execute(INSERT_ROWS, *_columns(rows))

    async def migrate(self) -> list[str]:
        """Apply the migrations not yet applied; returns their `NNN_name`s (empty: up to date)."""
        todo = migrations()
        applied: list[str] = []
        async with self._pool.acquire() as conn, conn.transaction():
            # Before anything else: two sessions creating the table below at once can fail.
            await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
            await conn.execute(MIGRATIONS_TABLE)
            done = {r["version"]: r["sha256"] for r in await conn.fetch(_APPLIED)}
            for mig in todo:
                if mig.version in done:
                    if done[mig.version] != mig.sha256:
                        raise MigrationError(
                            f"migration {mig.version}_{mig.name}.sql changed after it was applied: "
                            "add a new migration instead"
                        )
                    continue
                try:
                    await conn.execute(mig.sql)
                except _postgres_error() as e:
                    raise MigrationError(f"migration {mig.version}_{mig.name}.sql failed: {e}") from e
                await conn.execute(_RECORD, mig.version, mig.name, mig.sha256)
                applied.append(f"{mig.version}_{mig.name}")
        return applied

    async def applied_migrations(self) -> list[str]:
        async with self._pool.acquire() as conn:
            exists = await conn.fetchval("SELECT to_regclass('llmgw_schema_migrations') IS NOT NULL")
            if not exists:
                return []
            return [f"{r['version']}_{r['name']}" for r in await conn.fetch(_APPLIED)]

    async def retention_turn(self, every_s: float, job: str = "retention") -> bool:
        """True for the one caller, across replicas, whose `job` is due (last run over `every_s` ago)."""
        async with self._pool.acquire() as conn:
            return await conn.fetchval(TAKE_TURN, job, float(every_s)) is not None

    async def delete_older_than(self, days: int, limit: int) -> int:
        """Delete at most `limit` of the oldest rows older than `days` days; returns how many."""
        async with self._pool.acquire() as conn:
            return _count(await conn.execute(DELETE_OLDEST, days, limit))

    async def audit(
        self,
        actor: str,
        action: str,
        target: str,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
    ) -> None:
        async with self._pool.acquire() as conn:
            await conn.execute(INSERT_AUDIT, actor, action, target, _json(before), _json(after))

    async def audit_entries(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest entries first: id, at (aware datetime), actor, action, target, before, after."""
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(SELECT_AUDIT, limit)
        return [
            {
                "id": r["id"],
                "at": r["at"],
                "actor": r["actor"],
                "action": r["action"],
                "target": r["target"],
                "before": None if r["before"] is None else orjson.loads(r["before"]),
                "after": None if r["after"] is None else orjson.loads(r["after"]),
            }
            for r in rows
        ]

    async def fetch(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        """Rows of a read-only query as dicts (the reports)."""
        async with self._pool.acquire() as conn:
            return [dict(r) for r in await conn.fetch(sql, *args)]


def _postgres_error() -> type[Exception]:
    import asyncpg  # already loaded by `SpendStore.connect`

    return asyncpg.PostgresError  # type: ignore[no-any-return]
