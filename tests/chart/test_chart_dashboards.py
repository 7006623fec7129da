"""The chart's Grafana dashboards are well-formed: unique panel ids, panels that do not overlap on the
24-column grid, every query on the `$datasource` variable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.chart import CHART

DASHBOARDS = sorted((CHART / "files" / "dashboards").glob("*.json"))
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=[p.name for p in DASHBOARDS])
def test_dashboard_layout(path: Path) -> None:
    dash = json.loads(path.read_text())
    panels = dash["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {sorted(ids)}"
    taken: dict[tuple[int, int], str] = {}
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, f"{p['title']}: outside the grid"
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in taken, f"{p['title']} overlaps {taken[(x, y)]}"
                taken[(x, y)] = p["title"]
        if p["type"] == "row":
            continue
        assert p["datasource"] == DATASOURCE, p["title"]
        assert p["targets"], f"{p['title']}: no query"
        for t in p["targets"]:
            assert t["datasource"] == DATASOURCE and t["expr"], p["title"]
    assert [v["name"] for v in dash["templating"]["list"]][:1] == ["datasource"]


def test_every_dashboard_is_checked() -> None:
    assert len(DASHBOARDS) >= 3
