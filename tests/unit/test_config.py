from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.config import ConfigError, default_policy, load_policy, parse_policy

GOOD = """\
pools:
  - name: small
    model: m-small
    endpoints: {static: ["http://127.0.0.1:8001"]}
models:
  - name: fast
    route: {pool: small}
    max_tokens: {default: 10, cap: 20}
slo_classes:
  interactive: {ttft_ms: 450}
"""


def test_good_policy_parses_and_is_frozen() -> None:
    p = parse_policy(GOOD, "good.yaml")
    assert p.models[0].max_tokens.cap == 20
    with pytest.raises(ValidationError):
        p.models[0].name = "other"  # type: ignore[misc]


def test_embedded_default_has_small_and_large() -> None:
    p = default_policy()
    assert [m.name for m in p.models] == ["small", "large"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            GOOD.replace("model: m-small", "model: m-small\n    colour: red"),
            "bad.yaml:4: pools[0].colour: unknown key",
        ),
        (GOOD.replace("pool: small}", "pool: big}"), "bad.yaml:7: models[0].route.pool: unknown pool 'big'"),
        (
            GOOD.replace("default: 10", "default: 30"),
            "models[0].max_tokens: Value error, default (30) must not exceed",
        ),
        (GOOD.replace("cap: 20", "cap: -1"), "bad.yaml:8: models[0].max_tokens.cap: Input should be greater"),
        (GOOD.replace('["http://127.0.0.1:8001"]', '["ftp://x"]'), "pools[0].endpoints.static[0]"),
        (GOOD.replace("ttft_ms: 450", "p99: 1"), "slo_classes.interactive.p99: unknown key"),
        (GOOD + "extra_top: 1\n", "extra_top: unknown key"),
        ("- just a list\n", "the policy must be a mapping"),
        ("pools: [\n", "not valid YAML"),
    ],
)
def test_errors_name_file_line_and_key_path(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy(text, "bad.yaml")
    assert expected in str(info.value)
    assert str(info.value).startswith("bad.yaml")


def test_duplicate_names_are_rejected() -> None:
    text = GOOD + "  - {name: fast, route: {pool: small}}\n"
    text = text.replace("slo_classes:\n  interactive: {ttft_ms: 450}\n", "") + "slo_classes: {}\n"
    with pytest.raises(ConfigError, match=r"models\[1\]\.name: duplicate model name 'fast'"):
        parse_policy(text, "dup.yaml")


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nope.yaml: cannot read policy file"):
        load_policy(tmp_path / "nope.yaml")


def test_cli_check_and_schema(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("pool: small}", "pool: big}"))
    ok = subprocess.run(
        [sys.executable, "-m", "gateway", "config", "check", str(good)], capture_output=True, text=True
    )
    assert ok.returncode == 0, ok.stderr
    assert "OK" in ok.stdout
    ko = subprocess.run(
        [sys.executable, "-m", "gateway", "config", "check", str(bad)], capture_output=True, text=True
    )
    assert ko.returncode == 1
    assert f"{bad}:7: models[0].route.pool" in ko.stderr
    schema = subprocess.run(
        [sys.executable, "-m", "gateway", "config", "schema"], capture_output=True, text=True
    )
    doc = json.loads(schema.stdout)
    assert doc["additionalProperties"] is False
    assert {"pools", "models", "slo_classes"} <= set(doc["properties"])


def test_shipped_example_config_is_valid() -> None:
    root = Path(__file__).resolve().parents[2]
    for f in sorted((root / "config").glob("*.yaml")):
        load_policy(f)
