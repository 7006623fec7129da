"""The ledger's settings: the policy section's bounds, the database URL from the environment or a mounted
Secret (never echoing the password), and the migrations shipped with the package."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.config import ConfigError
from gateway.ledger.config import LedgerConfig
from gateway.ledger.store import DatabaseConfigError, database_url, migrations, redacted

URL = "postgresql://llmgw:s3cret@db.example:5432/ledger?sslmode=require"


def test_defaults() -> None:
    c = LedgerConfig()
    assert (c.enabled, c.retention_days, c.batch_rows, c.flush_ms) == (False, 400, 500, 200)
    assert (c.memory_rows, c.spool_max_rows, c.migrate_on_start) == (50_000, 2_000_000, True)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"batch_size": 5}, "Extra inputs are not permitted"),
        ({"batch_rows": 0}, "greater than or equal to 1"),
        ({"flush_ms": 1}, "greater than or equal to 10"),
        ({"retention_days": 0}, "greater than or equal to 1"),
        ({"batch_rows": 600, "memory_rows": 500}, "batch_rows .600. must not exceed memory_rows"),
    ],
)
def test_bad_values_are_refused(values: dict[str, int], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        LedgerConfig.model_validate(values)


def test_the_config_is_frozen() -> None:
    with pytest.raises(ValidationError):
        LedgerConfig().enabled = True  # type: ignore[misc]


def test_url_from_the_environment_or_a_file(tmp_path: Path) -> None:
    assert database_url({}) is None
    assert database_url({"LLMGW_DATABASE_URL": ""}) is None
    assert database_url({"LLMGW_DATABASE_URL": URL}) == URL
    secret = tmp_path / "url"
    secret.write_text(URL + "\n")  # `echo` adds the newline
    assert database_url({"LLMGW_DATABASE_URL_FILE": str(secret)}) == URL
    several = "postgres://llmgw@db-a:5432,db-b:5432/ledger?target_session_attrs=read-write"
    assert database_url({"LLMGW_DATABASE_URL": several}) == several  # asyncpg's multi-host form


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LLMGW_DATABASE_URL": URL, "LLMGW_DATABASE_URL_FILE": "/x"}, "both set: keep one"),
        (
            {"LLMGW_DATABASE_URL_FILE": "/nonexistent/url"},
            "LLMGW_DATABASE_URL_FILE: cannot read /nonexistent/url",
        ),
        (
            {"LLMGW_DATABASE_URL": "mysql://llmgw:s3cret@db/x"},
            "LLMGW_DATABASE_URL: mysql://llmgw:\\*\\*\\*@db/x is not",
        ),
        ({"LLMGW_DATABASE_URL": "postgresql://u:s3cret@[::1/x"}, "LLMGW_DATABASE_URL: not a URL"),
    ],
)
def test_unusable_urls_are_config_errors_without_the_password(env: dict[str, str], message: str) -> None:
    with pytest.raises(DatabaseConfigError, match=message) as info:
        database_url(env)
    assert "s3cret" not in str(info.value)
    assert isinstance(info.value, ConfigError)  # `llmgw serve` prints it as "cannot start"


def test_an_empty_secret_file_is_an_error(tmp_path: Path) -> None:
    empty = tmp_path / "url"
    empty.write_text("\n")
    with pytest.raises(DatabaseConfigError, match="is empty"):
        database_url({"LLMGW_DATABASE_URL_FILE": str(empty)})


def test_redacted_hides_only_the_password() -> None:
    assert redacted(URL) == "postgresql://llmgw:***@db.example:5432/ledger?sslmode=require"
    assert redacted("postgresql://llmgw@db/x") == "postgresql://llmgw@db/x"
    assert redacted("postgresql://:p%40ss@db/x") == "postgresql://:***@db/x"


def test_migrations_are_numbered_in_order_and_shipped_with_the_package() -> None:
    found = migrations()
    assert [m.version for m in found] == sorted(m.version for m in found)
    assert found[0].version == "001" and found[0].name == "spend"
    assert "CREATE TABLE llmgw_spend" in found[0].sql
    assert any("CREATE TABLE llmgw_audit" in m.sql for m in found)
    # pip install . (the image) ships package data by pyproject's globs: the .sql files must be among them.
    import tomllib

    root = Path(__file__).resolve().parents[3]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["*"]
    assert "*.sql" in globs
