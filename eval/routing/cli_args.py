"""Command-line arguments the routing tools share.

argparse only: `llmgw` builds every sub-command's parser at start-up, so this module must not import
the training code (numpy, the encoder) just to describe an argument.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_pair_data(parser: argparse.ArgumentParser, help: str) -> None:
    """`--pair-data FILE STRONG WEAK`, repeatable: extra rows scored with their own strong/weak pair."""
    parser.add_argument(
        "--pair-data",
        nargs=3,
        action="append",
        default=[],
        metavar=("FILE", "STRONG", "WEAK"),
        help=help,
    )


def add_training_data(parser: argparse.ArgumentParser, pair_help: str) -> None:
    """The training rows of a cross-validated measurement: `--data`, `--exclude` and `--pair-data`."""
    parser.add_argument("--data", nargs="+", required=True, type=Path)
    parser.add_argument("--exclude", nargs="*", default=[], type=Path)
    add_pair_data(parser, pair_help)
