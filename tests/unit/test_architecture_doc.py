"""docs/architecture.md matches the code: every module it names exists, every gateway module is named,
and gateway's modules import only downwards through the layers the page lists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PATH = re.compile(
    r"(?<![\w/])((?:gateway|router|ratelimit|cache|pools|eval|helm|k8s|scripts|tests)/[\w./-]*)"
)
# The layers of docs/architecture.md ("Packages and the direction of imports"): a module may import
# from its own layer or a lower one.
LAYERS: list[tuple[str, ...]] = [
    (
        "gateway.errors",
        "gateway.config",
        "gateway.config_pool",
        "gateway.config_route",
        "gateway.config_lora",
        "gateway.config_guardrails",
        "gateway.config_refs",
        "gateway.config_drift",
        "gateway.settings",
        "gateway.sse",
    ),
    (
        "gateway.edge.exchange",
        "gateway.edge.openapi",
        "gateway.edge.protocol",
        "gateway.tenancy",
    ),
    ("gateway.observability",),
    ("gateway.upstream", "gateway.budget", "gateway.dialects", "gateway.guardrails"),
    ("gateway.routing",),
    ("gateway.relay",),
    (
        "gateway.app",
        "gateway.parts",
        "gateway.edge.api",
        "gateway.edge.drain",
        "gateway.edge.server",
        "gateway.edge._worker_protocol",
        "gateway.cli",
    ),
]


def _layer(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer): the longest matching prefix wins
    for i, names in enumerate(LAYERS):
        for name in names:
            if module == name or module.startswith(name + "."):
                if best is None or len(name) > best[0]:
                    best = (len(name), i)
    return best[1] if best else None


def _runtime_imports(tree: ast.Module) -> list[str]:
    """Modules imported at run time (imports under `if TYPE_CHECKING:` left out)."""
    out: list[str] = []
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            skip.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
    return out


def _gateway_modules() -> list[Path]:
    return sorted(p for p in (ROOT / "gateway").rglob("*.py") if p.name not in ("__init__.py", "__main__.py"))


def test_every_path_the_page_names_exists() -> None:
    named = set(PATH.findall(DOC.read_text()))
    assert named, "the page names no module"
    missing = sorted(p for p in named if not (ROOT / p.rstrip("/.")).exists())
    assert not missing, f"docs/architecture.md names what does not exist: {missing}"


def test_every_gateway_module_is_on_the_page() -> None:
    text = DOC.read_text()
    absent = []
    for path in _gateway_modules():
        rel = path.relative_to(ROOT).as_posix()
        if rel not in text and rel.rsplit("/", 1)[0] + "/`" not in text:
            absent.append(rel)
    assert not absent, f"gateway modules docs/architecture.md does not place: {absent}"


def test_gateway_imports_only_downwards() -> None:
    upward = []
    for path in _gateway_modules():
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        own = _layer(module)
        assert own is not None, f"{module} is in no layer of docs/architecture.md"
        for imported in _runtime_imports(ast.parse(path.read_text())):
            theirs = _layer(imported)
            if theirs is not None and theirs > own:
                upward.append(f"{module} (layer {own}) imports {imported} (layer {theirs})")
    assert not upward, "\n".join(upward)
