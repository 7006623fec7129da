"""Reading Prometheus text exposition in tests."""

from __future__ import annotations

import re


def metric(text: str, name: str, labels: str = "") -> float:
    """Sum of a metric's samples whose label set contains `labels` (e.g. 'finished_reason="abort"')."""
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", line)
        if m and labels in (m.group(1) or ""):
            total += float(m.group(2))
    return total
