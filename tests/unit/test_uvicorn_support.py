"""The edge protocol subclasses uvicorn's private HttpToolsProtocol: the gateway declares the uvicorn
range it is tested with, and refuses to start outside it with a message naming both versions."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import uvicorn

from gateway.edge.protocol import (
    SUPPORTED_UVICORN,
    EdgeLimits,
    UnsupportedUvicorn,
    check_uvicorn,
    guarded_protocol,
)
from gateway.edge.server import serve

ROOT = Path(__file__).resolve().parents[2]


def _range() -> str:
    (lo_major, lo_minor), (hi_major, hi_minor) = SUPPORTED_UVICORN
    return f">={lo_major}.{lo_minor},<{hi_major}.{hi_minor}"


def test_the_installed_uvicorn_is_supported() -> None:
    check_uvicorn()
    assert guarded_protocol(EdgeLimits()).limits == EdgeLimits()  # type: ignore[attr-defined]


@pytest.mark.parametrize("version", ["0.54.9", "0.56.0", "1.55.0", "0.30.6", "dev"])
def test_other_versions_are_refused_naming_both(version: str) -> None:
    with pytest.raises(UnsupportedUvicorn) as caught:
        check_uvicorn(version)
    assert f"uvicorn {version} is installed" in str(caught.value)
    assert _range() in str(caught.value)


@pytest.mark.parametrize("version", ["0.55.0", "0.55.17"])
def test_every_patch_of_the_minor_is_accepted(version: str) -> None:
    check_uvicorn(version)


def test_pyproject_and_constraints_name_the_same_range() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [uv] = [d for d in deps if re.match(r"uvicorn\b", d)]
    assert uv == f"uvicorn[standard]{_range()}"
    pinned = re.search(r"^uvicorn==(\S+)$", (ROOT / "constraints" / "gateway.txt").read_text(), re.M)
    assert pinned is not None
    check_uvicorn(pinned[1])


def test_serve_refuses_to_start_with_an_unsupported_uvicorn(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(uvicorn, "__version__", "0.99.1")
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: pytest.fail("uvicorn.run was called"))
    assert serve(None, None, None, None) == 2
    err = capsys.readouterr().err
    assert "llmgw: cannot start" in err and "uvicorn 0.99.1 is installed" in err and _range() in err
