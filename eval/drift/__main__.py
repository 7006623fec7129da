"""`python -m eval.drift ...`: the same command as `llmgw drift ...` (for environments whose installed
entry points predate it, e.g. a source checkout run with PYTHONPATH)."""

from __future__ import annotations

import argparse
import sys

from eval.drift.cli import register


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llmgw drift")
    register(parser)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
