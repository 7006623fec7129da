"""Pure math of the peer comparison: per-round cells -> added latency -> medians over rounds -> ratios.

A round holds, for every side (the upstream `direct`, then each gateway), one cell per measurement:
latency cells `unary@1`, `unary@8`, `stream@1`, `stream@8` with percentiles in ms (stream cells also
TTFT percentiles), and throughput cells `unary@32`, `stream@32` with req/s. "Added" is always taken
inside one round (gateway minus direct, same percentile, same cell), then the median over rounds is
reported: drift between rounds then cancels instead of landing on whichever side ran during it.

Unit-tested in tests/unit/test_peers_stats.py.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DIRECT = "direct"
OURS = ("ours", "ours-spec", "ours-routed")
PEERS = ("litellm", "portkey", "floor")

Round = Mapping[str, Mapping[str, Mapping[str, Any]]]  # side -> cell -> figures

# (summary metric, cell, field in the cell, added?) per mode; `added` subtracts direct in the round.
_METRICS: dict[str, tuple[tuple[str, str, str, bool], ...]] = {
    "unary": (
        ("added_p50_c1_ms", "unary@1", "p50_ms", True),
        ("added_p99_c8_ms", "unary@8", "p99_ms", True),
        ("rps_c32", "unary@32", "rps", False),
    ),
    "stream": (
        ("added_p50_c1_ms", "stream@1", "p50_ms", True),
        ("added_p99_c8_ms", "stream@8", "p99_ms", True),
        ("ttft_added_p50_c1_ms", "stream@1", "ttft_p50_ms", True),
        ("ttft_added_p99_c8_ms", "stream@8", "ttft_p99_ms", True),
        ("rps_c32", "stream@32", "rps", False),
    ),
}


def median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 4) if values else None


def _value(rnd: Round, side: str, cell: str, field: str) -> float | None:
    v = rnd.get(side, {}).get(cell, {}).get(field)
    return float(v) if isinstance(v, int | float) else None


def per_round(rounds: Sequence[Round], side: str, cell: str, field: str, added: bool) -> list[float]:
    """The figure in every round that has it; with `added`, minus direct's in the same round."""
    out: list[float] = []
    for rnd in rounds:
        v = _value(rnd, side, cell, field)
        if v is None:
            continue
        if added:
            d = _value(rnd, DIRECT, cell, field)
            if d is None:
                continue
            v -= d
        out.append(v)
    return out


def summarize(rounds: Sequence[Round], sides: Sequence[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """side -> mode -> metric -> median over rounds. Direct gets its absolute figures (added = 0 by
    definition): `p50_c1_ms`, `p99_c8_ms`, TTFT, `rps_c32`, the reference every added figure is over."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for side in sides:
        modes: dict[str, dict[str, Any]] = {}
        for mode, metrics in _METRICS.items():
            row: dict[str, Any] = {}
            for name, cell, field, added in metrics:
                if side == DIRECT:
                    name = name.replace("added_", "") if added else name
                    vals = per_round(rounds, side, cell, field, added=False)
                else:
                    vals = per_round(rounds, side, cell, field, added)
                row[name] = median(vals)
                row[name + "_rounds"] = [round(v, 4) for v in vals]
            modes[mode] = row
        out[side] = modes
    return out


def ratio(ours: float | None, peer: float | None) -> float | None:
    """ours / peer, or None when either is missing or the peer's figure is not positive (an added
    latency at or below zero is noise around nothing: a ratio over it means nothing)."""
    if ours is None or peer is None or peer <= 0:
        return None
    return round(ours / peer, 3)


def ratios(summary: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """`ours/litellm`, `ours/portkey`, `ours/floor` (and the same for ours-routed): for each metric,
    ours over the peer. Latency: below 1 is better; throughput: above 1 is better."""
    out: dict[str, dict[str, Any]] = {}
    for mine in OURS:
        for peer in PEERS:
            if mine not in summary or peer not in summary:
                continue
            cell: dict[str, Any] = {}
            for mode, metrics in _METRICS.items():
                for name, *_ in metrics:
                    cell[f"{mode}.{name}"] = ratio(
                        summary[mine][mode].get(name), summary[peer][mode].get(name)
                    )
            out[f"{mine}/{peer}"] = cell
    return out


@dataclass(frozen=True, slots=True)
class Target:
    """One acceptance target of the issue over the summary (`ratios` for `x/y` sources)."""

    name: str
    source: str  # a side ("ours") or a ratio key ("ours/litellm")
    metric: str  # "mode.metric"
    op: str  # "<=" or ">="
    threshold: float


TARGETS: tuple[Target, ...] = (
    Target("added P50, non-streaming, c=1 (ms)", "ours", "unary.added_p50_c1_ms", "<=", 0.5),
    Target("added P99, non-streaming, c=8 (ms)", "ours", "unary.added_p99_c8_ms", "<=", 3.0),
    Target("throughput, non-streaming, c=32 (req/s)", "ours", "unary.rps_c32", ">=", 3000),
    Target("throughput, streaming, c=32 (req/s)", "ours", "stream.rps_c32", ">=", 2500),
    Target("non-streaming req/s vs LiteLLM (x)", "ours/litellm", "unary.rps_c32", ">=", 20),
    Target("streaming req/s vs LiteLLM (x)", "ours/litellm", "stream.rps_c32", ">=", 20),
    Target("non-streaming req/s vs Portkey (x)", "ours/portkey", "unary.rps_c32", ">=", 2),
    Target("streaming req/s vs Portkey (x)", "ours/portkey", "stream.rps_c32", ">=", 2),
    Target("streaming TTFT added, P50 c=1 (ms)", "ours", "stream.ttft_added_p50_c1_ms", "<=", 1.0),
    Target(
        "speculative admission: added P50, non-streaming, c=1 (ms)",
        "ours-spec",
        "unary.added_p50_c1_ms",
        "<=",
        0.5,
    ),
    Target(
        "speculative admission: added P99, non-streaming, c=8 (ms)",
        "ours-spec",
        "unary.added_p99_c8_ms",
        "<=",
        3.0,
    ),
    Target(
        "speculative admission: throughput, non-streaming, c=32 (req/s)",
        "ours-spec",
        "unary.rps_c32",
        ">=",
        3000,
    ),
    Target(
        "speculative admission: throughput, streaming, c=32 (req/s)",
        "ours-spec",
        "stream.rps_c32",
        ">=",
        2500,
    ),
    Target(
        "speculative admission: streaming TTFT added, P50 c=1 (ms)",
        "ours-spec",
        "stream.ttft_added_p50_c1_ms",
        "<=",
        1.0,
    ),
    Target(
        "routing on: added P50, non-streaming, c=1 (ms)", "ours-routed", "unary.added_p50_c1_ms", "<=", 6.0
    ),
)


def evaluate(
    summary: Mapping[str, Mapping[str, Mapping[str, Any]]], ratio_table: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Each target with its measured value and `pass` (None when the figure is missing)."""
    out: list[dict[str, Any]] = []
    for t in TARGETS:
        if "/" in t.source:
            value = ratio_table.get(t.source, {}).get(t.metric)
        else:
            mode, metric = t.metric.split(".", 1)
            value = summary.get(t.source, {}).get(mode, {}).get(metric)
        ok = None if value is None else (value <= t.threshold if t.op == "<=" else value >= t.threshold)
        out.append(
            {
                "target": t.name,
                "source": t.source,
                "metric": t.metric,
                "op": t.op,
                "threshold": t.threshold,
                "value": value,
                "pass": ok,
            }
        )
    return out
