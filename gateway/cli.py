"""The `llmgw` command.

`gateway` owns `serve` and `config`; other packages contribute subcommands through the
`llmgw.commands` entry-point group, loaded only when that subcommand is asked for, so that
`llmgw serve` never imports evaluation code (design §2).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import EntryPoint, entry_points

Handler = Callable[[argparse.Namespace], int]


def _plugin_commands() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group="llmgw.commands")}


def _add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve", help="run the gateway")
    p.add_argument("--config", help="policy YAML (default: $LLMGW_CONFIG, else the embedded default)")
    p.add_argument("--host", help="bind address (default: $LLMGW_HOST or 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: $LLMGW_PORT or 8080)")
    p.add_argument("--workers", type=int, help="worker processes (default: $LLMGW_WORKERS or 1)")
    p.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    from gateway.server import serve

    return serve(config=args.config, host=args.host, port=args.port, workers=args.workers)


def _add_config(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("config", help="validate the policy file or print its JSON Schema")
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


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llmgw", description="Production LLM gateway")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_serve(sub)
    _add_config(sub)
    plugins = _plugin_commands()
    wanted = argv[0] if argv else None
    for name, ep in sorted(plugins.items()):
        p = sub.add_parser(name, help=f"({ep.value.split(':')[0]})")
        if name == wanted:  # import a plugin only when it is the command being run
            register: Callable[[argparse.ArgumentParser], None] = ep.load()
            register(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
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
