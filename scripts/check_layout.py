"""Layout rules a reviewer would otherwise check by hand (issue 23, design §11).

- no module outside tests over 400 lines;
- on the request's hot path (the gateway's packages), no function over 60 lines and none with more
  than 6 parameters (`self`/`cls` not counted; keyword-only and *args/**kwargs counted).

Prints every violation with its file and line and exits 1 if there is any. `make lint` runs it.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
MAX_PARAMETERS = 6
PACKAGES = ("gateway", "router", "ratelimit", "cache", "pools", "eval", "scripts")
# The request path: every function in these packages is held to the function rules.
HOT_PATH = ("gateway",)


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    count = len(names) + (a.vararg is not None) + (a.kwarg is not None)
    if names and names[0].arg in ("self", "cls"):
        count -= 1
    return count


def check(root: Path) -> list[str]:
    problems: list[str] = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            text = path.read_text()
            lines = text.count("\n")
            if lines > MAX_MODULE_LINES:
                problems.append(f"{rel}: {lines} lines (max {MAX_MODULE_LINES})")
            if package not in HOT_PATH:
                continue
            for node in ast.walk(ast.parse(text, str(rel))):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                assert node.end_lineno is not None
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    problems.append(
                        f"{rel}:{node.lineno}: {node.name} is {length} lines (max {MAX_FUNCTION_LINES})"
                    )
                n = _parameters(node)
                if n > MAX_PARAMETERS:
                    problems.append(
                        f"{rel}:{node.lineno}: {node.name} takes {n} parameters (max {MAX_PARAMETERS})"
                    )
    return problems


def main() -> int:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
    problems = check(root)
    for p in problems:
        print(p)
    print(f"check_layout: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
