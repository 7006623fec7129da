"""The `llmgw` command.

`gateway` owns `serve`, `config`, `keys`, `db` and `spend` (the last two: the spend ledger,
gateway/ledger/cli.py); other packages contribute subcommands through the
`llmgw.commands` entry-point group, loaded only when that subcommand is asked for, so that
`llmgw serve` never imports evaluation code (design §2).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import EntryPoint, PackageNotFoundError, entry_points, version

Handler = Callable[[argparse.Namespace], int]


# What `llmgw --help` says about the plugin commands: written here, because describing a plugin from its
# own module would import it (and `eval` is absent from the runtime image).
PLUGIN_HELP = {
    "sim": "run a simulated vLLM replica (the OpenAI API, /metrics and /load, no GPU)",
    "bench": "load-test an OpenAI-compatible endpoint (TTFT, TPOT, goodput, knee) or size replicas",
    "router": "train, evaluate, score and replay the prompt difficulty router",
    "cascade": "replay a routing dataset through a routed alias, or train the cascade's answer scorer",
    "drift": "compare two pools serving the same weights on a greedy canary prompt set",
}


def _version() -> str:
    try:
        return version("llm-gateway")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _plugin_commands() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group="llmgw.commands")}


def _command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, about: str
) -> argparse.ArgumentParser:
    """A subcommand whose `llmgw NAME --help` opens with the sentence `llmgw --help` lists it by."""
    return sub.add_parser(name, help=about, description=about[0].upper() + about[1:] + ".")


def _add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _command(sub, "serve", "run the gateway")
    p.add_argument("--config", help="policy YAML (default: $LLMGW_CONFIG, else the embedded default)")
    p.add_argument("--host", help="bind address (default: $LLMGW_HOST or 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: $LLMGW_PORT or 8080)")
    p.add_argument("--workers", type=int, help="worker processes (default: $LLMGW_WORKERS or 1)")
    p.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    from gateway.edge.server import serve

    return serve(config=args.config, host=args.host, port=args.port, workers=args.workers)


def _add_config(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _command(sub, "config", "validate the policy file or print its JSON Schema")
    csub = p.add_subparsers(dest="config_command", required=True)
    check = csub.add_parser("check", help="validate a policy YAML file offline")
    check.add_argument("file")
    check.set_defaults(func=_config_check)
    schema = csub.add_parser("schema", help="print the policy JSON Schema")
    schema.set_defaults(func=_config_schema)


def _config_check(args: argparse.Namespace) -> int:
    from gateway.config import ConfigError, load_policy

    try:
        policy = load_policy(args.file)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(
        f"{args.file}: OK ({len(policy.pools)} pools, {len(policy.models)} models, "
        f"{len(policy.slo_classes)} SLO classes)"
    )
    return 0


def _config_schema(args: argparse.Namespace) -> int:
    import json

    from gateway.config import Policy

    print(json.dumps(Policy.model_json_schema(), indent=2))
    return 0


def _add_keys(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _command(sub, "keys", "manage tenant API keys (through a running gateway's admin API)")
    ksub = p.add_subparsers(dest="keys_command", required=True)
    remote = argparse.ArgumentParser(add_help=False)
    remote.add_argument("--url", help="gateway base URL (default: $LLMGW_URL or http://127.0.0.1:8080)")
    remote.add_argument("--admin-key", help="admin key (default: $LLMGW_ADMIN_KEY; prefer the env var)")
    create = ksub.add_parser("create", parents=[remote], help="create a key and print it (shown only once)")
    create.add_argument("--org", required=True)
    create.add_argument("--app", required=True)
    create.add_argument("--tier", default="standard", help="a tier of limits.tiers (default: standard)")
    create.add_argument("--models", help="comma-separated aliases the key may call (default: all)")
    create.add_argument(
        "--pools",
        help="comma-separated pools the key's requests may be served by; a routed alias's plan is cut "
        "to them (default: the tier's tenancy.tier_pools, else all)",
    )
    create.add_argument(
        "--limits",
        nargs="+",
        metavar="LIMIT",
        help="key-level overrides of the tier's limits, as a JSON object or key=value pairs, e.g. "
        "tokens_per_min=3000 concurrent=2 (names: limits.tiers.<tier>.key)",
    )
    create.add_argument("--id", help="key id (default: generated)")
    create.add_argument("--json", action="store_true", help="print the whole response as JSON")
    lst = ksub.add_parser("list", parents=[remote], help="list keys (never their plaintext)")
    lst.add_argument("--json", action="store_true")
    revoke = ksub.add_parser("revoke", parents=[remote], help="revoke a key by id")
    revoke.add_argument("id")
    hsh = ksub.add_parser("hash", help="print the SHA-256 of a key, for tenancy.keys (offline)")
    hsh.add_argument("key", nargs="?", help="the key; '-' or absent: read it from stdin")
    ksub.add_parser("generate", help="print a new key and its SHA-256 (offline)")
    p.set_defaults(func=_keys)


def _keys(args: argparse.Namespace) -> int:
    from gateway.tenancy.keys_cli import run

    return run(args)


def _add_db(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _command(sub, "db", "the spend ledger's PostgreSQL database ($LLMGW_DATABASE_URL)")
    dsub = p.add_subparsers(dest="db_command", required=True)
    migrate = dsub.add_parser("migrate", help="apply the schema migrations (safe to run concurrently)")
    migrate.add_argument(
        "--wait-s", type=float, default=30.0, help="wait this long for the database to answer (default: 30)"
    )
    p.set_defaults(func=_db)


def _db(args: argparse.Namespace) -> int:
    from gateway.ledger.cli import db

    return db(args)


def _add_spend(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _command(sub, "spend", "spend report from the ledger ($LLMGW_DATABASE_URL)")
    p.add_argument(
        "--group-by",
        default="org",
        help="comma-separated: org, app, key, tag, user, alias, pool (default: org); a request with two "
        'tags counts under each, an untagged one under ""',
    )
    p.add_argument("--from", dest="start", required=True, help="first day (2026-11-01, UTC) or an ISO time")
    p.add_argument("--to", dest="end", required=True, help="end, exclusive (2026-12-01, UTC) or an ISO time")
    p.add_argument("--interval", choices=["day", "month"], help="one row per UTC day or month as well")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    p.set_defaults(func=_spend)


def _spend(args: argparse.Namespace) -> int:
    from gateway.ledger.cli import spend

    return spend(args)


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llmgw", description="Production LLM gateway")
    parser.add_argument("--version", action="version", version=f"llmgw {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_serve(sub)
    _add_config(sub)
    _add_keys(sub)
    _add_db(sub)
    _add_spend(sub)
    plugins = _plugin_commands()
    wanted = argv[0] if argv else None
    for name, ep in sorted(plugins.items()):
        about = PLUGIN_HELP.get(name, f"a command from {ep.value.split(':')[0]} (llmgw {name} --help)")
        p = _command(sub, name, about)
        if name == wanted:  # import a plugin only when it is the command being run
            try:
                register: Callable[[argparse.ArgumentParser], None] = ep.load()
            except ImportError as exc:
                # The runtime image ships no `eval` package: its commands live in the sim image.
                parser.exit(2, f"llmgw {name}: not installed in this image or environment ({exc})\n")
            register(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The `llmgw` entry point: `_run`, quiet when a reader closes the pipe early (`llmgw ... | head`)."""
    try:
        try:
            code = _run(argv)
        finally:  # also after argparse's SystemExit (--help, --version): a closed pipe shows up here
            sys.stdout.flush()
    except BrokenPipeError:
        # The reader has what it wanted. Python's documented way: point stdout at /dev/null so the
        # interpreter's final flush cannot fail again (and print a traceback), then exit quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return code


def _run(argv: Sequence[str] | None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(args_list)
    args = parser.parse_args(args_list)
    func: Handler | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    return func(args)


if __name__ == "__main__":
    raise SystemExit(main())
