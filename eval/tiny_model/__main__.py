"""`python -m eval.tiny_model --out DIR`: build the tiny model into DIR unless DIR already holds this recipe.

DIR/recipe.sha256 is written last, so an interrupted build is redone; the build goes to a sibling temporary
directory that replaces DIR in one rename. `--check` only reports (exit 1 when a build is needed).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shutil
import sys
import time
from pathlib import Path

from eval.tiny_model import recipe

STAMP = "recipe.sha256"
LIBS = ("torch", "transformers", "tokenizers", "peft")


def current_digest() -> str:
    versions = {}
    for lib in LIBS:
        try:
            versions[lib] = importlib.metadata.version(lib)
        except importlib.metadata.PackageNotFoundError:
            versions[lib] = "missing"
    return recipe.digest(versions)


def is_built(out: Path, digest: str) -> bool:
    stamp = out / STAMP
    return stamp.is_file() and stamp.read_text().strip() == digest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.tiny_model", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path(".tools/tiny-model"))
    parser.add_argument("--check", action="store_true", help="exit 1 if a build is needed, build nothing")
    args = parser.parse_args(argv)
    out: Path = args.out
    digest = current_digest()
    if is_built(out, digest):
        print(f"tiny model up to date in {out} ({digest[:12]})")
        return 0
    if args.check:
        print(f"tiny model in {out} is missing or stale", file=sys.stderr)
        return 1
    from eval.tiny_model.build import build  # torch & co. only when building

    started = time.monotonic()
    tmp = out.with_name(out.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    build(tmp)
    (tmp / STAMP).write_text(digest + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(f"tiny model built in {out} ({digest[:12]}) in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
