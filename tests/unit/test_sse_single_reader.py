"""Exactly one runtime module splits SSE bytes into events: gateway/sse.py. Every other reader of events
(the relay, the dialects, the schema check, the response cache, the request log) reads them through
it, or is handed what it found.

The check is structural, over the syntax tree of every runtime module (gateway/, cache/, router/,
pools/, ratelimit/; eval/ is tooling): a call that cuts text at SSE framing is a string method that
finds or splits (`split`, `find`, `partition`, `replace`, ...) given a bytes line end, a blank line
(`\\n\\n`, `\\r\\n`) or `data:` (as a literal, or a module constant holding one), or a regular
expression built from line-end alternations. Writing events (`b"data: " + x + b"\\n\\n"`) is not
reading them and is not flagged. The check must find gateway/sse.py itself, and the old splitters
this replaced, or it could not fail."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ("gateway", "cache", "router", "pools", "ratelimit")
THE_READER = "gateway/sse.py"

_CUTTING = frozenset(
    {"split", "rsplit", "partition", "rpartition", "find", "rfind", "index", "rindex", "replace", "count"}
)
_REGEX = frozenset({"compile", "split", "finditer", "findall", "search", "match", "fullmatch", "sub", "subn"})


def _framing(value: object) -> bool:
    """Whether a literal is SSE framing: `data:`, a blank line, a bytes line end, or the source of a
    regular expression matching line ends."""
    if isinstance(value, bytes):
        text = value.decode("latin-1")
        if "\n" in text or "\r" in text:
            return True
    elif isinstance(value, str):
        text = value
    else:
        return False
    if "data:" in text or "\n\n" in text or "\r\n" in text:
        return True
    # a regular expression's source (raw strings keep the backslashes)
    return "\\n\\n" in text or "\\r\\n|" in text or "\\r|\\n" in text or "\\n|\\r" in text


def _constants(tree: ast.Module) -> dict[str, object]:
    """The module's `NAME = <literal>` assignments."""
    out: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = node.value.value
    return out


def sse_splits(source: str) -> list[str]:
    """The lines of `source` that cut text at SSE framing."""
    tree = ast.parse(source)
    constants = _constants(tree)

    def framing(arg: ast.expr) -> bool:
        if isinstance(arg, ast.Constant):
            return _framing(arg.value)
        return isinstance(arg, ast.Name) and arg.id in constants and _framing(constants[arg.id])

    found: list[str] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        method, receiver = node.func.attr, node.func.value
        regex = isinstance(receiver, ast.Name) and receiver.id == "re"
        if (method in _REGEX) if regex else (method in _CUTTING):
            if any(framing(arg) for arg in node.args):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def _runtime_modules() -> list[Path]:
    return sorted(p for package in RUNTIME for p in (ROOT / package).rglob("*.py"))


def test_exactly_one_runtime_module_splits_sse() -> None:
    splitting = {}
    for path in _runtime_modules():
        found = sse_splits(path.read_text())
        if found:
            splitting[path.relative_to(ROOT).as_posix()] = found
    assert THE_READER in splitting, "the check no longer recognises gateway/sse.py: it cannot fail"
    others = {path: lines for path, lines in splitting.items() if path != THE_READER}
    assert not others, f"SSE split outside {THE_READER} (read events through it): {others}"


# The splitters this replaced (cache/entry.py, observability/request_log.py, dialects/exchange.py and
# upstream/sse.py before issue 38), each of which the check must catch.
_OLD = {
    "cache": 'def _events(sse):\n    for block in sse.split(b"\\n\\n"):\n        yield block',
    "request_log": 'def text(raw):\n    return [line for line in raw.split(b"\\n")]',
    "dialects": (
        'def _events(self, data):\n    data = data.replace(b"\\r\\n", b"\\n")\n'
        '    end = data.rfind(b"\\n\\n")\n    return data[:end]'
    ),
    "constant": '_SEP = b"\\n\\n"\ndef cut(buf):\n    return buf.find(_SEP)',
    "regex": 'import re\n_LINE = re.compile(rb"\\r\\n|\\r|\\n")',
    "data-line": 'def data(line):\n    return line.partition("data:")[2]',
}


@pytest.mark.parametrize("name", sorted(_OLD))
def test_the_check_catches_a_splitter(name: str) -> None:
    assert sse_splits(_OLD[name]), f"the check misses {name!r}"


def test_writing_events_is_not_splitting_them() -> None:
    writer = (
        'DONE = b"data: [DONE]\\n\\n"\n'
        'def event(kind, data):\n    return b"event: " + kind + b"\\ndata: " + data + b"\\n\\n"\n'
        'def ended(out):\n    return out.endswith(DONE) or "\\n".join(["a", "b"]).count("\\n")'
    )
    assert sse_splits(writer) == []
