"""The import contracts `make lint` runs (`lint-imports`, `[tool.importlinter]` in pyproject.toml) hold
on the real tree, each of them fails on a copy of the packages with one wrong import added, their
layers are the ones docs/architecture.md lists, and no package `__init__` is a re-exporting facade
(docs/design/018-layout.md)."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gateway", "router", "ratelimit", "cache", "pools", "eval")
LINT = Path(sys.executable).with_name("lint-imports")


def _config() -> dict[str, Any]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert isinstance(config, dict)
    return config


CONTRACTS: dict[str, str] = {c["id"]: c["name"] for c in _config()["contracts"]}


def _lint(root: Path) -> tuple[int, str]:
    """`lint-imports` over the packages under `root` with `root`'s pyproject.toml."""
    proc = subprocess.run(
        [str(LINT), "--no-cache", "--config", str(root / "pyproject.toml")],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},  # before the editable install of the real tree
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, proc.stdout + proc.stderr


def _verdicts(output: str) -> dict[str, str]:
    return {
        name: verdict
        for name in CONTRACTS.values()
        for verdict in re.findall(rf"^{re.escape(name)} (KEPT|BROKEN)$", output, re.M)
    }


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The six root packages' Python files and pyproject.toml, in a directory of their own."""
    root = tmp_path_factory.mktemp("tree")

    def not_python(folder: str, names: list[str]) -> list[str]:
        return [
            n for n in names if n == "__pycache__" or (Path(folder, n).is_file() and not n.endswith(".py"))
        ]

    for package in PACKAGES:
        shutil.copytree(ROOT / package, root / package, ignore=not_python)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


@pytest.fixture
def module(copy: Path) -> Iterator[Any]:
    """Adds one module to the copy; removed after the test."""
    added: list[Path] = []

    def add(path: str, source: str) -> None:
        target = copy / path
        assert not target.exists() and target.parent.is_dir(), path
        target.write_text(source)
        added.append(target)

    yield add
    for path in added:
        path.unlink()


def test_the_real_tree_keeps_every_contract() -> None:
    code, output = _lint(ROOT)
    assert code == 0, output
    assert _verdicts(output) == dict.fromkeys(CONTRACTS.values(), "KEPT"), output


@pytest.mark.parametrize(
    ("contract", "path", "source", "chain"),
    [
        # A runtime module importing the evaluation tools.
        (
            "no-eval",
            "gateway/observability/_wrong.py",
            "import eval.sim.cli\n",
            "gateway.observability._wrong -> eval.sim.cli",
        ),
        (
            "no-eval",
            "router/_wrong.py",
            "from eval.routing import data\n",
            "router._wrong -> eval.routing.data",
        ),
        # The libraries beside the gateway importing it or its web stack.
        (
            "libraries-below-gateway",
            "pools/_wrong.py",
            "from gateway.errors import GatewayError\n",
            "pools._wrong -> gateway.errors",
        ),
        ("libraries-below-gateway", "cache/_wrong.py", "import fastapi\n", "cache._wrong -> fastapi"),
        # One library importing another.
        (
            "libraries-independent",
            "ratelimit/_wrong.py",
            "from pools.config import Retries\n",
            "ratelimit._wrong -> pools.config",
        ),
        # A stage importing a later one: route (gateway/routing) -> admit (gateway/relay/_admit.py), and
        # authenticate (gateway/tenancy) -> admit (gateway/budget).
        (
            "gateway-layers",
            "gateway/routing/_wrong.py",
            "from gateway.relay import _admit\n",
            "gateway.routing._wrong -> gateway.relay._admit",
        ),
        (
            "gateway-layers",
            "gateway/tenancy/_wrong.py",
            "import gateway.budget.admission\n",
            "gateway.tenancy._wrong -> gateway.budget.admission",
        ),
    ],
)
def test_a_wrong_import_breaks_its_contract(
    module: Any, copy: Path, contract: str, path: str, source: str, chain: str
) -> None:
    module(path, source)
    code, output = _lint(copy)
    assert code == 1, output
    expected = dict.fromkeys(CONTRACTS.values(), "KEPT") | {CONTRACTS[contract]: "BROKEN"}
    assert _verdicts(output) == expected, output
    assert chain in output, output  # the copy was analyzed, not the installed tree


def test_annotation_only_imports_are_not_held_to_the_layers(module: Any, copy: Path) -> None:
    # docs/architecture.md excepts imports under TYPE_CHECKING (for annotations only).
    source = "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
    source += "    from gateway.relay.pipeline import Relay\n"
    module("gateway/tenancy/_typed.py", source)
    code, output = _lint(copy)
    assert code == 0, output


def _doc_layers() -> list[set[str]]:
    """The layer table of docs/architecture.md, layer 0 first, as module names."""
    layers: list[set[str]] = []
    for number, cell in re.findall(
        r"^\s*\|\s*(\d+) [^|]*\|([^|]*)\|\s*$", (ROOT / "docs" / "architecture.md").read_text(), re.M
    ):
        assert int(number) == len(layers), f"layer {number} out of order"
        paths = re.findall(r"`(gateway/[\w/.]*)`", cell)
        layers.append({p.removesuffix(".py").rstrip("/").replace("/", ".") for p in paths})
    return layers


def test_the_layers_contract_is_the_documented_one() -> None:
    [contract] = [c for c in _config()["contracts"] if c["id"] == "gateway-layers"]
    declared = [{m.strip() for m in layer.split(":")} for layer in reversed(contract["layers"])]
    doc = _doc_layers()
    assert len(doc) == 7, doc
    assert declared == doc


def test_the_libraries_are_forbidden_what_the_page_says() -> None:
    contracts = {c["id"]: c for c in _config()["contracts"]}
    assert set(_config()["root_packages"]) == set(PACKAGES)
    assert set(contracts["no-eval"]["source_modules"]) == set(PACKAGES) - {"eval"}
    libraries = {"router", "ratelimit", "cache", "pools"}
    assert set(contracts["libraries-below-gateway"]["source_modules"]) == libraries
    assert {"gateway", "fastapi"} <= set(contracts["libraries-below-gateway"]["forbidden_modules"])
    assert set(contracts["libraries-independent"]["modules"]) == libraries


def _defined(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_package_inits_are_not_facades() -> None:
    """An `__init__` imports nothing from its own package, and has an `__all__` only for names it defines
    itself (code imports a name from the module that defines it)."""
    wrong = []
    for init in sorted(p for package in PACKAGES for p in (ROOT / package).rglob("__init__.py")):
        rel = init.relative_to(ROOT).as_posix()
        own = ".".join(init.relative_to(ROOT).parent.parts)
        tree = ast.parse(init.read_text())
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(own + ".")):
                wrong.append(f"{rel}:{node.lineno} re-exports from {node.module}")
        exported = {
            e.value
            for node in tree.body
            if isinstance(node, ast.Assign | ast.AnnAssign) and "__all__" in ast.unparse(node)
            for e in ast.walk(node)
            if isinstance(e, ast.Constant) and isinstance(e.value, str)
        }
        if (
            any(isinstance(n, ast.Assign | ast.AnnAssign) and "__all__" in ast.unparse(n) for n in tree.body)
            and not exported
        ):
            wrong.append(f"{rel}: an empty __all__")
        wrong += [
            f"{rel}: __all__ names {name}, which it does not define"
            for name in sorted(exported - _defined(tree))
        ]
    assert not wrong, "\n".join(wrong)
