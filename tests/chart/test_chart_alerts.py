"""The chart's alert rules: valid for promtool and firing as their unit tests expect."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.chart import CHART

RULE_TESTS = Path(__file__).parent / "rules"


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool is missing: apt-get install -y --no-install-recommends prometheus (.ci/run does)"
        )
    return path


def test_rule_files_check() -> None:
    files = sorted(str(p) for p in (CHART / "files" / "alerts").glob("*.yaml"))
    assert files
    proc = subprocess.run([promtool(), "check", "rules", *files], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_rule_unit_tests_pass() -> None:
    tests = sorted(str(p) for p in RULE_TESTS.glob("*.test.yaml"))
    assert tests
    proc = subprocess.run(
        [promtool(), "test", "rules", *tests], capture_output=True, text=True, cwd=RULE_TESTS
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_rule_unit_tests_can_fail(tmp_path: Path) -> None:
    """A wrong expectation must fail promtool, or the passing run above proves nothing."""
    text = (RULE_TESTS / "alerts.test.yaml").read_text()
    broken = text.replace("pool: large}", "pool: small}", 1).replace(
        "../../../helm/", f"{CHART.parents[1]}/helm/"
    )
    assert broken != text
    path = tmp_path / "broken.test.yaml"
    path.write_text(broken)
    proc = subprocess.run([promtool(), "test", "rules", str(path)], capture_output=True, text=True)
    assert proc.returncode != 0 and "LLMGatewayPoolBacklog" in proc.stdout + proc.stderr, proc.stdout
