"""The Markdown report: figures per gateway, ratios of ours over each peer, and the issue's targets.

Pure rendering over the JSON report (unit-tested in tests/unit/test_peers_report.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

LABELS = {
    "direct": "upstream directly (reference)",
    "ours": "ours: auth + Redis limiter + metrics",
    "ours-spec": "ours, admission overlapped with the pool call (`limits.speculative`)",
    "ours-routed": "ours + routing (`auto`, 2 pools)",
    "litellm": "LiteLLM proxy 1.108.7",
    "portkey": "Portkey gateway 1.15.2 (Node)",
    "floor": "floor: bare uvicorn + aiohttp relay",
}

# (column title, mode, metric) of the main table; direct shows absolute values under the same titles.
_COLUMNS = (
    ("added P50 c=1 (ms)", "unary", "added_p50_c1_ms"),
    ("added P99 c=8 (ms)", "unary", "added_p99_c8_ms"),
    ("req/s c=32", "unary", "rps_c32"),
    ("stream added P50 c=1 (ms)", "stream", "added_p50_c1_ms"),
    ("stream added P99 c=8 (ms)", "stream", "added_p99_c8_ms"),
    ("TTFT added P50 c=1 (ms)", "stream", "ttft_added_p50_c1_ms"),
    ("stream req/s c=32", "stream", "rps_c32"),
)


def fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.{digits}f}"
    return str(value)


def _direct_metric(metric: str) -> str:
    return metric.replace("added_", "")


def figures_table(summary: Mapping[str, Mapping[str, Mapping[str, Any]]], sides: Sequence[str]) -> str:
    head = "| gateway | " + " | ".join(t for t, _, _ in _COLUMNS) + " |"
    rule = "|---|" + "---:|" * len(_COLUMNS)
    rows = [head, rule]
    for side in sides:
        cells = []
        for _, mode, metric in _COLUMNS:
            key = _direct_metric(metric) if side == "direct" else metric
            cells.append(fmt(summary.get(side, {}).get(mode, {}).get(key)))
        label = LABELS.get(side, side)
        if side == "direct":
            label += " — absolute latency, not added"
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def ratios_table(ratio_table: Mapping[str, Mapping[str, Any]]) -> str:
    head = "| ratio | " + " | ".join(t for t, _, _ in _COLUMNS) + " |"
    rows = [head, "|---|" + "---:|" * len(_COLUMNS)]
    for key, cell in ratio_table.items():
        vals = [fmt(cell.get(f"{mode}.{metric}"), 3) for _, mode, metric in _COLUMNS]
        rows.append(f"| {key} | " + " | ".join(vals) + " |")
    return "\n".join(rows)


def targets_table(targets: Sequence[Mapping[str, Any]]) -> str:
    rows = ["| target | measured | goal | |", "|---|---:|---:|---|"]
    for t in targets:
        verdict = "–" if t["pass"] is None else ("pass" if t["pass"] else "**miss**")
        goal = f"{t['op']} {fmt(t['threshold'])}"
        rows.append(f"| {t['target']} ({t['source']}) | {fmt(t['value'], 3)} | {goal} | {verdict} |")
    return "\n".join(rows)


def render_markdown(report: Mapping[str, Any]) -> str:
    cfg = report["config"]
    env = report["environment"]
    sides = ["direct", *cfg["gateways"]]
    lines = [
        f"# Gateway peers benchmark — {report['started_at']}",
        "",
        f"{cfg['rounds']} interleaved round(s); latency batches of {cfg['latency_seconds']:g} s at "
        f"concurrency 1 and 8, wrk runs of {cfg['throughput_seconds']:g} s at concurrency 32; gateways on "
        f"cpu {cfg['gateway_cpu']}, load generator + upstream + Redis on cpu {cfg['load_cpu']}; "
        f"upstream: {cfg['upstream']}. Medians over rounds; 'added' = through the gateway minus directly "
        "to the upstream, same percentile, same round.",
        "",
        f"Commit {env.get('git_commit', '?')}{' (gateway/ modified)' if env.get('gateway_dirty') else ''}, "
        f"{env.get('cpu_model', '?')}, Python {env.get('python', '?')}, wall {report['wall_seconds']:.0f} s.",
        "",
        "## Figures",
        "",
        figures_table(report["summary"], sides),
        "",
        "## Ratios (ours / peer: latency below 1 and throughput above 1 favour ours)",
        "",
        ratios_table(report["ratios"]),
        "",
        "## Targets (issue 9)",
        "",
        targets_table(report["targets"]),
    ]
    if report.get("warnings"):
        lines += ["", "## Warnings", "", *(f"- {w}" for w in report["warnings"])]
    return "\n".join(lines) + "\n"
