"""docs/architecture.md matches the code: every module it names exists, every gateway module is named,
gateway's modules import only downwards through the layers the page lists, and its table of the
request record's parts is the record's (gateway/record.py): each part a field of the record of the
class the table names, with the fields it lists, and no class of the record over 15 fields."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
from collections.abc import Callable
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
        "gateway.redis_conn",
        "gateway.ledger",
    ),
    (
        "gateway.edge.exchange",
        "gateway.edge.openapi",
        "gateway.edge.protocol",
        "gateway.edge.small_body",
        "gateway.tenancy",
        "gateway.record",
    ),
    ("gateway.observability",),
    ("gateway.upstream", "gateway.budget", "gateway.dialects", "gateway.guardrails"),
    ("gateway.routing",),
    ("gateway.relay",),
    (
        "gateway.app",
        "gateway.parts",
        "gateway.edge.api",
        "gateway.edge.anthropic_models",
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


# "The request record": a row per part: | `part` | `module.Class` | `field` `field` ... or (frozen) | writer |
RECORD_SECTION = "## The request record"
MAX_FIELDS = 15  # no class in the request path holds more (issue 38)
# Request-path modules whose slotted classes and dataclasses are held to MAX_FIELDS besides the table's.
REQUEST_PATH = ("gateway.record", "gateway.edge.exchange", "gateway.relay.pipeline", "gateway.relay._admit")


def _fields(cls: type) -> tuple[str, ...]:
    """A class's fields: a dataclass's or NamedTuple's, else its slots (its bases' included)."""
    if dataclasses.is_dataclass(cls):
        return tuple(f.name for f in dataclasses.fields(cls))
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):  # a NamedTuple
        return tuple(cls._fields)
    return tuple(name for k in reversed(cls.__mro__) for name in getattr(k, "__slots__", ()))


def _import(dotted: str) -> type:
    module, _, name = dotted.rpartition(".")
    found = getattr(importlib.import_module(module), name)
    assert isinstance(found, type)
    return found


def _annotation(owner: type, name: str) -> str | None:
    for k in owner.__mro__:
        ann = k.__dict__.get("__annotations__", {}).get(name)
        if ann is not None:
            return str(ann)
    return None


def record_problems(text: str, record: type, resolve: Callable[[str], type] = _import) -> list[str]:
    """What the page's table of the request record gets wrong about `record` (empty: nothing)."""
    section = text.split(RECORD_SECTION, 1)[1].split("\n## ", 1)[0] if RECORD_SECTION in text else ""
    rows = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("| `")
    ]
    if not rows:
        return [f"no '{RECORD_SECTION}' table"]
    problems: list[str] = []
    classes: dict[str, type] = {}  # part -> class
    for part, dotted, listed, writer in ((r + ["", "", "", ""])[:4] for r in rows):
        part, dotted = part.strip("`"), dotted.strip("`")
        try:
            cls = resolve(dotted)
        except (ImportError, AttributeError, AssertionError):
            problems.append(f"{part}: {dotted} does not exist")
            continue
        classes[part] = cls
        *path, name = part.split(".")
        owner = classes.get(".".join(path), record) if path else record
        ann = _annotation(owner, name)
        if ann is None or not re.search(rf"\b{cls.__name__}\b", ann):
            problems.append(f"{part}: {owner.__name__}.{name} is not a {cls.__name__} (annotated {ann!r})")
        fields = _fields(cls)
        if listed == "(frozen)":
            params = getattr(cls, "__dataclass_params__", None)
            is_tuple = issubclass(cls, tuple) and hasattr(cls, "_fields")  # a NamedTuple is immutable
            if not is_tuple and (params is None or not params.frozen):
                problems.append(f"{part}: {dotted} is not frozen")
        elif sorted(re.findall(r"`(\w+)`", listed)) != sorted(fields):
            problems.append(f"{part}: the page lists {listed}, {dotted} has {' '.join(fields)}")
        if len(fields) > MAX_FIELDS:
            problems.append(f"{part}: {dotted} holds {len(fields)} fields (at most {MAX_FIELDS})")
        if not writer:
            problems.append(f"{part}: no writing stage")
    undocumented = set(_fields(record)) - set(classes)
    if undocumented:
        problems.append(f"parts of {record.__name__} the page does not show: {sorted(undocumented)}")
    if len(_fields(record)) > MAX_FIELDS:
        problems.append(f"{record.__name__} holds {len(_fields(record))} fields (at most {MAX_FIELDS})")
    return problems


def test_the_request_record_table_is_the_records() -> None:
    from gateway.record import RequestRecord

    assert record_problems(DOC.read_text(), RequestRecord) == []


def test_every_part_class_of_the_record_module_is_on_the_page() -> None:
    import gateway.record

    text = DOC.read_text().split(RECORD_SECTION, 1)[1]
    defined = [
        name
        for name, cls in inspect.getmembers(gateway.record, inspect.isclass)
        if cls.__module__ == "gateway.record" and name != "RequestRecord"
    ]
    assert defined
    assert [n for n in defined if f"`gateway.record.{n}`" not in text] == []


def test_no_request_path_class_holds_more_than_15_fields() -> None:
    held = {}
    for module in REQUEST_PATH:
        for name, cls in inspect.getmembers(importlib.import_module(module), inspect.isclass):
            if cls.__module__ == module and (dataclasses.is_dataclass(cls) or "__slots__" in cls.__dict__):
                held[f"{module}.{name}"] = len(_fields(cls))
    assert "gateway.record.RequestRecord" in held and "gateway.edge.exchange.Exchange" in held
    assert {name: n for name, n in held.items() if n > MAX_FIELDS} == {}


def test_the_record_check_fails_on_a_wrong_table() -> None:
    """The checks above can fail: each of these pages misstates the record."""
    from gateway.record import RequestRecord

    text = DOC.read_text()
    answer_row = next(line for line in text.splitlines() if line.startswith("| `answer` |"))
    obs_row = next(line for line in text.splitlines() if line.startswith("| `obs` |"))
    wrong = {
        "a field missing": text.replace(answer_row, answer_row.replace("`usage_out` ", "")),
        "a field too many": text.replace(answer_row, answer_row.replace("`outcome`", "`outcome` `model`")),
        "a class that does not exist": text.replace("`gateway.record.Ask`", "`gateway.record.Asked`"),
        "the wrong class for a part": text.replace(
            "| `ask` | `gateway.record.Ask`", "| `ask` | `gateway.record.Budget`"
        ),
        "a mutable part called frozen": text.replace("`body` `alias` `adapter` `guard` `schema`", "(frozen)"),
        "a part left out": text.replace(obs_row + "\n", ""),
        "no writer": text.replace(obs_row, obs_row.rsplit("|", 2)[0] + "| |"),
    }
    for what, page in wrong.items():
        assert page != text, what
        assert record_problems(page, RequestRecord), what

    class Bloated:  # 16 fields
        __slots__ = tuple(f"f{i}" for i in range(16))

    class Record:
        __slots__ = ("bloated",)
        bloated: Bloated

    listed = " ".join(f"`f{i}`" for i in range(16))
    table = f"{RECORD_SECTION}\n\n| `bloated` | `x.Bloated` | {listed} | a stage |\n"
    problems = record_problems(table, Record, resolve=lambda dotted: Bloated)
    assert problems == ["bloated: x.Bloated holds 16 fields (at most 15)"]
