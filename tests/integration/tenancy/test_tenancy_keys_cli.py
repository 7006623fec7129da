"""`llmgw keys ...` against a real HTTP server (uvicorn in a thread) serving the admin router."""

from __future__ import annotations

import asyncio
import io
import json
import socket
from collections.abc import Iterator

import pytest
import uvicorn

from gateway.cli import build_parser, main
from gateway.config import Tenancy
from gateway.tenancy.auth import Authenticator
from gateway.tenancy.keys import KeyRecord, MemoryKeyStore, hash_key
from gateway.tenancy.keys_cli import CliError, parse_limits
from ratelimit.model import LevelLimits, LimitsConfig
from tests.integration.tenancy.admin_app import ADMIN, make_app
from tests.support.thread_server import uvicorn_in_thread


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, MemoryKeyStore]]:
    store = MemoryKeyStore()
    port = _free_port()
    with uvicorn_in_thread(uvicorn.Config(make_app(store), host="127.0.0.1", port=port, log_level="warning")):
        yield f"http://127.0.0.1:{port}", store


@pytest.fixture
def env(served: tuple[str, MemoryKeyStore], monkeypatch: pytest.MonkeyPatch) -> MemoryKeyStore:
    monkeypatch.setenv("LLMGW_URL", served[0])
    monkeypatch.setenv("LLMGW_ADMIN_KEY", ADMIN)
    return served[1]


def test_parser() -> None:
    args = build_parser(["keys"]).parse_args(
        [
            "keys",
            "create",
            "--org",
            "o",
            "--app",
            "a",
            "--tier",
            "premium",
            "--models",
            "small,large",
            "--id",
            "x",
        ]
    )
    assert (args.keys_command, args.org, args.app, args.tier, args.models, args.id) == (
        "create",
        "o",
        "a",
        "premium",
        "small,large",
        "x",
    )
    assert args.url is None and args.admin_key is None
    args = build_parser(["keys"]).parse_args(["keys", "revoke", "k1", "--url", "http://h:1"])
    assert (args.keys_command, args.id, args.url) == ("revoke", "k1", "http://h:1")
    with pytest.raises(SystemExit):
        build_parser(["keys"]).parse_args(["keys", "create", "--org", "o"])  # --app is required


def test_create_list_revoke(env: MemoryKeyStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["keys", "create", "--org", "acme", "--app", "chat", "--models", "small", "--id", "cli-1"]) == 0
    )
    out = capsys.readouterr()
    key, details = out.out.splitlines()
    assert key.startswith("sk-") and "id=cli-1" in details and "cannot show it again" in out.err
    auth = Authenticator(Tenancy(), LimitsConfig(), env)
    principal = asyncio.run(auth.authenticate(f"Bearer {key}".encode(), "small"))
    assert principal.key_id == "cli-1"

    assert main(["keys", "list"]) == 0
    table = capsys.readouterr().out
    assert "cli-1" in table and "acme" in table and key not in table and "active" in table
    assert main(["keys", "list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "cli-1" in [k["id"] for k in data]
    assert all("sha256" not in k for k in data)

    assert main(["keys", "revoke", "cli-1"]) == 0
    assert "revoked cli-1" in capsys.readouterr().out
    assert main(["keys", "revoke", "cli-1-missing"]) == 1
    assert "no API key with id" in capsys.readouterr().err
    assert main(["keys", "revoke", "ops"]) == 1
    assert "policy file" in capsys.readouterr().err


def test_create_json(env: MemoryKeyStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "create", "--org", "acme", "--app", "chat", "--json"]) == 0
    created = json.loads(capsys.readouterr().out)
    assert created["key"].startswith("sk-") and created["id"].startswith("key_")


def test_bad_tier_is_reported(env: MemoryKeyStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "create", "--org", "acme", "--app", "chat", "--tier", "gold"]) == 1
    assert "unknown tier 'gold'" in capsys.readouterr().err


def test_wrong_admin_key(env: MemoryKeyStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "list", "--admin-key", "wrong"]) == 1
    err = capsys.readouterr().err
    assert "HTTP 401" in err and "LLMGW_ADMIN_KEY" in err


def test_missing_admin_key(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("LLMGW_ADMIN_KEY", raising=False)
    assert main(["keys", "list"]) == 1
    assert "no admin key" in capsys.readouterr().err


def test_unreachable_gateway(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LLMGW_ADMIN_KEY", ADMIN)
    assert main(["keys", "list", "--url", f"http://127.0.0.1:{_free_port()}"]) == 1
    assert "cannot reach the gateway" in capsys.readouterr().err


def test_offline_hash_and_generate(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keys", "generate"]) == 0
    key, sha = capsys.readouterr().out.splitlines()
    assert key.startswith("sk-") and sha == hash_key(key)
    assert main(["keys", "hash", key]) == 0
    assert capsys.readouterr().out.strip() == sha
    monkeypatch.setattr("sys.stdin", io.StringIO(key + "\n"))
    assert main(["keys", "hash"]) == 0
    assert capsys.readouterr().out.strip() == sha


def _record(store: MemoryKeyStore, key_id: str) -> KeyRecord:
    return next(r for r in asyncio.run(store.list()) if r.key_id == key_id)


def test_create_with_pools_and_limits(env: MemoryKeyStore, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["keys", "create", "--org", "acme", "--app", "chat", "--id", "cli-lim", "--models", "small"]
    args += ["--pools", "small", "--limits", "tokens_per_min=3000", "concurrent=2"]
    assert main(args) == 0, capsys.readouterr().err
    record = _record(env, "cli-lim")
    assert record.pools == frozenset({"small"})
    assert record.limits == LevelLimits(tokens_per_min=3000, concurrent=2)
    assert main(["keys", "list"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("cli-lim"))
    assert row.split()[5] == "small"  # the POOLS column
    json_args = ["keys", "create", "--org", "acme", "--app", "chat", "--id", "cli-json"]
    assert main([*json_args, "--limits", '{"requests_per_min": 5, "shadow": ["requests_per_min"]}']) == 0
    limits = _record(env, "cli-json").limits
    assert limits.requests_per_min == 5 and limits.shadow == frozenset({"requests_per_min"})


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--limits", "tokens_per_hour=5"], "limits.tokens_per_hour"),
        (["--limits", "concurrent=-1"], "limits.concurrent"),
        (["--pools", "huge"], "unknown pool(s) ['huge']"),
    ],
)
def test_bad_pools_and_limits_are_reported_by_name(
    env: MemoryKeyStore, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert main(["keys", "create", "--org", "acme", "--app", "chat", *extra]) == 1
    assert message in capsys.readouterr().err


def test_parse_limits_forms() -> None:
    assert parse_limits(["tokens_per_min=10", '{"concurrent": 1}', 'shadow=["concurrent"]']) == {
        "tokens_per_min": 10,
        "concurrent": 1,
        "shadow": ["concurrent"],
    }
    for bad in (["tokens_per_min"], ["{not json"], ["[1]"], ["=3"]):
        with pytest.raises(CliError):
            parse_limits(bad)
