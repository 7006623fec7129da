"""The images, built from exactly what Docker would send them, without a Docker engine.

The emulation follows Docker's rules, not our reading of the Dockerfile:
- The build context is the work tree filtered by `.dockerignore` with moby/patternmatcher's semantics:
  patterns are cleaned paths relative to the context root, `*` and `?` never cross `/`, `**` spans any
  number of directories, a pattern matching a parent directory matches everything under it, and the
  last matching pattern decides (`!` re-includes).
- Each stage's filesystem is a directory. FROM another stage copies it, COPY takes from the context or
  `--from` a stage (a directory's contents go into the destination), WORKDIR moves, and RUN lines are
  interpreted command by command: `python -m venv`, `pip install .`, `cp -r`, `rm -rf`, `python -c`. A
  command this interpreter does not know fails the test: teach it here rather than skip it.
- There is no network: `pip install --upgrade pip` is a no-op, the `encoder` stage (torch from the
  PyTorch index, a MiniLM export) is not run, so its COPY brings nothing; `pip install .` builds a
  wheel from the emulated /src with .venv's setuptools and installs it with --no-deps --no-index. The
  third-party dependencies come from .venv, but only the distributions pyproject's `dependencies`
  require (transitively), linked into one directory the new venv reads through a .pth line: never the
  project's own editable install or its dev tools.
Then, for the `runtime` and `sim` stages: the packages shipped are pyproject's packages (eval only in
sim), every module of every shipped package imports from inside the stage's venv (`python -I`, cwd a
temp dir: the work tree is not on the path), and ENTRYPOINT + CMD answer `--help`.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from functools import cached_property
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from tests.support.chart import ROOT

SITE = "lib/python3.11/site-packages"
NO_NETWORK_STAGES = {"encoder"}  # torch from download.pytorch.org and a model export: not emulated


# --- .dockerignore (moby/patternmatcher) ---------------------------------------------------------------


def _regex(pattern: str) -> re.Pattern[str]:
    """patternmatcher's translation of one cleaned pattern to an anchored regular expression."""
    out, i = ["^"], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*" and pattern[i + 1 : i + 2] == "*":
            i += 1
            if pattern[i + 1 : i + 2] == "/":
                i += 1
            out.append(".*" if i + 1 == len(pattern) else "(.*/)?")
        elif ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        elif ch in "[]":
            out.append(ch)
        else:
            out.append(re.escape(ch))
        i += 1
    return re.compile("".join(out) + "$", re.S)


@dataclass(frozen=True)
class Ignore:
    rules: tuple[tuple[bool, str, re.Pattern[str]], ...]  # (exception, cleaned pattern, regex)

    @classmethod
    def parse(cls, text: str) -> Ignore:
        rules = []
        for raw in text.removeprefix("\ufeff").splitlines():
            if raw.startswith("#") or not raw.strip():
                continue
            line = raw.strip()
            exception = line.startswith("!")
            pattern = line[1:].strip() if exception else line
            pattern = posixpath.normpath(pattern)
            if len(pattern) > 1 and pattern.startswith("/"):
                pattern = pattern.lstrip("/")
            rules.append((exception, pattern, _regex(pattern)))
        return cls(tuple(rules))

    def excluded(self, path: str) -> bool:
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts) - 1)]
        matched = False
        for exception, _, rx in self.rules:
            if rx.match(path) or any(rx.match(p) for p in prefixes):
                matched = not exception
        return matched

    def may_reinclude_under(self, directory: str) -> bool:
        """Whether an exception could match below an excluded `directory` (else the walk skips it).

        Only an exception with more segments than the directory, each leading one matching the
        directory's (or a `**`), can: a shorter one that matched would have kept the directory.
        """
        dsegs = directory.split("/")
        for exception, pattern, _ in self.rules:
            psegs = pattern.split("/")
            if not exception or len(psegs) <= len(dsegs) and "**" not in pattern:
                continue
            if "**" in pattern or all(_regex(p).match(d) for p, d in zip(psegs, dsegs, strict=False)):
                return True
        return False

    def files(self, root: Path) -> list[str]:
        out = []
        for here, dirs, names in os.walk(root):
            rel = Path(here).relative_to(root).as_posix()
            rel = "" if rel == "." else rel + "/"
            dirs[:] = [d for d in dirs if not self.excluded(rel + d) or self.may_reinclude_under(rel + d)]
            out += [rel + n for n in names if not self.excluded(rel + n)]
        return sorted(out)


# --- the Dockerfile, stage by stage -----------------------------------------------------------------------


def instructions(text: str) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", text)
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.partition(" ")[0].upper(), line.partition(" ")[2].strip())
        for line in lines
        if line and not line.startswith("#")
    ]


def _dependency_dir(pyproject: Path, into: Path) -> Path:
    """.venv's installed distributions that pyproject's runtime `dependencies` need, linked in one dir."""
    todo = [(r, "") for r in tomllib.loads(pyproject.read_text())["project"]["dependencies"]]
    seen: set[str] = set()
    into.mkdir()
    while todo:
        raw, extra = todo.pop()
        req = Requirement(raw)
        if req.marker and not req.marker.evaluate({"extra": extra}):
            continue
        key = f"{req.name.lower()}[{','.join(sorted(req.extras))}]"
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = distribution(req.name)
        except PackageNotFoundError:
            pytest.fail(f"{req.name} (a runtime dependency) is not installed in .venv: make install")
        todo += [(r, e) for r in dist.requires or [] for e in (sorted(req.extras) or [""])]
        for f in dist.files or []:
            top = f.parts[0]
            src = Path(str(dist.locate_file(top)))
            if top != ".." and top != "__pycache__" and not (into / top).exists() and src.exists():
                (into / top).symlink_to(src)
    return into


@dataclass
class Build:
    context: Path
    work: Path
    deps: Path
    ignore: Ignore
    roots: dict[str, Path] = field(default_factory=dict)
    config: dict[str, dict[str, str]] = field(default_factory=dict)  # stage -> ENTRYPOINT/CMD

    def path(self, stage: str, cwd: str, p: str) -> Path:
        return self.roots[stage] / posixpath.join(cwd, p).lstrip("/")

    def run_stages(self, dockerfile: str) -> None:
        stage, cwd = "", "/"
        for instr, args in instructions(dockerfile):
            if instr == "FROM":
                m = re.fullmatch(r"(\S+)(?:\s+as\s+(\S+))?", args, re.I)
                assert m, f"FROM {args}: not emulated"
                base, stage, cwd = m.group(1), m.group(2) or f"stage{len(self.roots)}", "/"
                self.roots[stage] = self.work / stage
                if base in self.roots and stage not in NO_NETWORK_STAGES:
                    shutil.copytree(self.roots[base], self.roots[stage], symlinks=True)
                self.roots[stage].mkdir(exist_ok=True)
                self.config[stage] = dict(self.config.get(base, {}))
            elif stage in NO_NETWORK_STAGES or instr in ("ARG", "ENV", "EXPOSE", "USER"):
                continue
            elif instr == "WORKDIR":
                cwd = posixpath.join(cwd, args)
                self.path(stage, "/", cwd).mkdir(parents=True, exist_ok=True)
            elif instr == "COPY":
                self.copy(stage, cwd, shlex.split(args))
            elif instr == "RUN":
                self.run(stage, cwd, args)
            elif instr in ("ENTRYPOINT", "CMD"):
                self.config[stage][instr] = args
                if instr == "ENTRYPOINT":
                    self.config[stage].pop("CMD", None)
            else:
                pytest.fail(f"the emulation does not know {instr}: teach tests/chart/test_image_context.py")

    def copy(self, stage: str, cwd: str, args: list[str]) -> None:
        flags = [a for a in args if a.startswith("--")]
        *sources, dest = [a for a in args if not a.startswith("--")]
        origin = next((f.split("=", 1)[1] for f in flags if f.startswith("--from=")), None)
        if origin in NO_NETWORK_STAGES:
            return
        for src in sources:
            if any(c in src for c in "*?["):
                pytest.fail(f"COPY wildcards are not emulated: {src}")
            if origin is None:
                self.copy_context(stage, cwd, src, dest, many=len(sources) > 1)
            else:
                from_path = self.path(origin, "/", src)
                assert from_path.is_dir(), f"COPY --from={origin} {src}: not in the emulated stage"
                shutil.copytree(from_path, self.path(stage, cwd, dest), symlinks=True, dirs_exist_ok=True)

    def copy_context(self, stage: str, cwd: str, src: str, dest: str, many: bool) -> None:
        """A directory's contents go into `dest`; a file into `dest/` or onto `dest` (Docker's COPY)."""
        prefix = posixpath.normpath(src).lstrip("/")
        prefix = "" if prefix == "." else prefix
        files = [f for f in self.context_files if not prefix or f == prefix or f.startswith(prefix + "/")]
        assert files, f"COPY {src}: not in the build context (.dockerignore leaves it out)"
        target = self.path(stage, cwd, dest)
        for f in files:
            if f == prefix:
                out = target / posixpath.basename(f) if many or dest.endswith("/") else target
            else:
                out = target / f[len(prefix) :].lstrip("/")
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(self.context / f, out)

    @cached_property
    def context_files(self) -> list[str]:
        return self.ignore.files(self.context)

    def run(self, stage: str, cwd: str, line: str) -> None:
        words = shlex.split(line)
        commands: list[list[str]] = [[]]
        for w in words:
            commands.append([]) if w == "&&" else commands[-1].append(w)
        for cmd in commands:
            self.command(stage, cwd, cmd)

    def command(self, stage: str, cwd: str, cmd: list[str]) -> None:
        exe = posixpath.basename(cmd[0])
        if exe == "python" and cmd[1:3] == ["-m", "venv"]:
            venv = self.path(stage, cwd, cmd[3])
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
            (venv / SITE / "image-deps.pth").write_text(f"{self.deps}\n")
        elif exe in ("groupadd", "useradd") or (exe == "pip" and cmd[1:] == ["install", "--upgrade", "pip"]):
            return  # users do not change what imports (test_dockerfile checks USER); pip's upgrade is network
        elif exe == "pip" and cmd[1:] == ["install", "."]:
            venv = self.path(stage, cwd, cmd[0]).parent.parent
            wheels = self.work / "wheels"
            pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
            src = str(self.path(stage, cwd, "."))
            subprocess.run(
                [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), src],
                check=True,
                cwd=self.work,
            )
            whl = [str(w) for w in wheels.glob("*.whl")]
            subprocess.run(
                [*pip, "--python", str(venv / "bin/python"), "install", "--no-deps", "--no-index", *whl],
                check=True,
                cwd=self.work,
            )
        elif exe == "cp" and cmd[1] == "-r":
            *srcs, dest = cmd[2:]
            for s in srcs:
                tree = self.path(stage, cwd, s)
                shutil.copytree(tree, self.path(stage, cwd, dest) / tree.name, dirs_exist_ok=True)
        elif exe == "rm" and cmd[1] == "-rf":
            for p in map(lambda q: self.path(stage, cwd, q), cmd[2:]):
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink(missing_ok=True)
        elif exe == "python" and cmd[1] == "-c":
            out = self.python(stage, cmd[0], "-c", cmd[2])
            assert out.returncode == 0, f"RUN {shlex.join(cmd)} fails in stage {stage}:\n{out.stderr}"
        else:
            pytest.fail(f"the emulation does not know `{shlex.join(cmd)}`: teach test_image_context.py")

    def python(self, stage: str, exe: str, *args: str) -> subprocess.CompletedProcess[str]:
        """The stage's interpreter, isolated (no PYTHON* variables, no user site, cwd outside the work
        tree) and writing no bytecode (as the image's PYTHONDONTWRITEBYTECODE)."""
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(self.work), "HF_HUB_OFFLINE": "1"}
        py = str(self.path(stage, "/", exe))
        return subprocess.run(
            [py, "-I", "-B", *args], cwd=self.work, env=env, capture_output=True, text=True, timeout=120
        )


IMPORT_ALL = """
import importlib, json, pkgutil, sys
site, packages = sys.argv[1], sys.argv[2:]
failed, outside, imported = {}, [], []
for name in packages:
    top = importlib.import_module(name)
    walk = pkgutil.walk_packages(top.__path__, name + ".")
    # __main__ modules are scripts (`python -m`): importing one runs it.
    mods = [name] + [m.name for m in walk if not m.name.endswith(".__main__")]
    for mod in mods:
        try:
            m = importlib.import_module(mod)
        except Exception as exc:
            failed[mod] = f"{type(exc).__name__}: {exc}"
            continue
        imported.append(mod)
        if not (getattr(m, "__file__", None) or "").startswith(site):
            outside.append(mod)
print(json.dumps({"failed": failed, "outside": outside, "imported": imported}))
"""


def _import_all(build: Build, stage: str, packages: list[str]) -> dict[str, Any]:
    site = str(build.path(stage, "/", "/opt/llmgw/" + SITE))
    out = build.python(stage, "/opt/llmgw/bin/python", "-c", IMPORT_ALL, site, *packages)
    assert out.returncode == 0, out.stderr
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def _repo_modules(package: str) -> set[str]:
    """The modules of one of the work tree's packages, by file (what the image must carry)."""
    base = ROOT / package.replace(".", "/")
    files = [p.relative_to(base.parent) for p in base.rglob("*.py") if p.stem != "__main__"]
    names = {".".join(p.with_suffix("").parts).removesuffix(".__init__") for p in files}
    prefix = package.rpartition(".")[0]
    return {f"{prefix}.{n}" if prefix else n for n in names}


def _repo_packages() -> set[str]:
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    tops = {p.rstrip("*") for p in include["include"]}
    return {d.name for d in ROOT.iterdir() if d.name in tops and (d / "__init__.py").is_file()}


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    work = tmp_path_factory.mktemp("image")
    b = Build(
        ROOT,
        work,
        _dependency_dir(ROOT / "pyproject.toml", work / "deps"),
        Ignore.parse((ROOT / ".dockerignore").read_text()),
    )
    b.run_stages((ROOT / "Dockerfile").read_text())
    return b


def _shipped(build: Build, stage: str) -> set[str]:
    site = build.path(stage, "/", "/opt/llmgw/" + SITE)
    return {p.parent.name for p in site.glob("*/__init__.py")}


def test_runtime_image_ships_every_package_but_eval_and_each_module_imports(build: Build) -> None:
    assert _shipped(build, "runtime") == _repo_packages() - {"eval"}
    packages = sorted(_repo_packages() - {"eval"})
    result = _import_all(build, "runtime", packages)
    print(f"runtime image: {len(result['imported'])} modules import")
    assert result["failed"] == {} and result["outside"] == []
    assert set(result["imported"]) == set().union(*map(_repo_modules, packages))
    assert build.python("runtime", "/opt/llmgw/bin/python", "-c", "import eval").returncode != 0


def test_sim_image_adds_eval_and_the_simulator_imports(build: Build) -> None:
    assert _shipped(build, "sim") == _repo_packages()
    result = _import_all(build, "sim", ["eval.sim"])
    print(f"sim image: {len(result['imported'])} eval.sim modules import")
    assert result["failed"] == {} and result["outside"] == []
    assert set(result["imported"]) == _repo_modules("eval.sim")


@pytest.mark.parametrize("stage", ["runtime", "sim"])
def test_entrypoint_and_cmd_answer_help(build: Build, stage: str) -> None:
    entry, cmd = (json.loads(build.config[stage].get(k, "[]")) for k in ("ENTRYPOINT", "CMD"))
    assert entry == ["llmgw"]
    out = build.python(
        stage, "/opt/llmgw/bin/python", str(build.path(stage, "/", "/opt/llmgw/bin/llmgw")), *cmd, "--help"
    )
    assert out.returncode == 0 and out.stdout.startswith("usage: llmgw"), out.stderr


def test_router_artifacts_ship_beside_the_router(build: Build) -> None:
    router = build.path("runtime", "/", f"/opt/llmgw/{SITE}/router")
    for name in ("artifacts", "scorer_artifacts"):
        shipped = sorted(
            p.relative_to(router).as_posix()
            for p in (router / name).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        )
        repo = sorted(
            p.relative_to(ROOT / "router").as_posix()
            for p in (ROOT / "router" / name).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        )
        assert shipped == repo and shipped


def test_context_is_what_dockerignore_allows() -> None:
    files = Ignore.parse((ROOT / ".dockerignore").read_text()).files(ROOT)
    tops = {f.split("/")[0] for f in files}
    assert tops == _repo_packages() | {"pyproject.toml", "README.md"}
    assert not [
        f for f in files if "__pycache__" in f or f.endswith(".pyc") or f.startswith("router/assets/")
    ]


@pytest.mark.parametrize(
    ("patterns", "path", "excluded"),
    [
        # Docker's `*` stays in the root directory (gitignore's would match at any depth).
        ("*.md", "README.md", True),
        ("*.md", "docs/a.md", False),
        ("*", "docs/a.md", True),  # through its parent
        ("*\n!gateway/", "gateway/app.py", False),
        ("*\n!gateway/", "gateway2/app.py", True),
        ("*\n!gateway/", "eval/gateway/x.py", True),
        ("*\n!gateway/\ngateway/secret", "gateway/secret/k.pem", True),  # the last match decides
        ("*\n!gateway/\n**/__pycache__/", "gateway/a/__pycache__/m.pyc", True),
        ("**/__pycache__/", "__pycache__/m.pyc", True),
        ("**/*.pyc", "m.pyc", True),
        ("router/assets/", "router/assets/m/model.onnx", True),
        ("router/assets/", "router/assetsx/model.onnx", False),
        ("a/**/b", "a/b", True),
        ("a/**/b", "a/x/y/b", True),
        ("a/**", "a/x/y", True),
        ("/a/b", "a/b", True),
        ("./a/../b", "b", True),
        ("a?c", "abc", True),
        ("a?c", "a/c", False),
        ("# *\n", "x", False),
        ("\\*", "*", True),
        ("\\*", "x", False),
        ("[ab]x", "bx", True),
    ],
)
def test_dockerignore_semantics(patterns: str, path: str, excluded: bool) -> None:
    assert Ignore.parse(patterns).excluded(path) is excluded


def test_dockerignore_walk_descends_only_where_an_exception_can_reach(tmp_path: Path) -> None:
    for f in ("a/b/c.txt", "a/b/d.txt", "a/x.txt", "e/f.txt", "g/h/i.txt", "top.txt"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("x")
    ignore = Ignore.parse("*\n!a/b/c.txt\n!**/i.txt")
    assert ignore.files(tmp_path) == ["a/b/c.txt", "g/h/i.txt"]
    assert Ignore.parse("*\n!a/b/c.txt").may_reinclude_under("e") is False
    assert Ignore.parse("*\n!a/b/c.txt").may_reinclude_under("a/b") is True
