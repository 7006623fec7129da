"""Every alert of the chart has a promtool case where it fires and one where it stays quiet."""

from __future__ import annotations

import yaml

from tests.chart.test_chart_alerts import RULE_TESTS
from tests.support.chart import CHART


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    alerts: set[str] = set()
    for path in (CHART / "files" / "alerts").glob("*.yaml"):
        for group in yaml.safe_load(path.read_text())["groups"]:
            alerts |= {r["alert"] for r in group["rules"] if "alert" in r}
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in RULE_TESTS.glob("*.test.yaml"):
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    assert len(alerts) >= 20
    assert alerts - firing == set(), "alerts without a firing case"
    assert alerts - quiet == set(), "alerts without a quiet case"
