"""`bench-lora`'s figures (pure): per side mean/P99 TTFT and swaps per 1,000 requests, the ratios, a table."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from eval.bench.pools._load import Result, percentile


def summarize(
    name: str, results: Sequence[Result], swaps: float, adapters: Sequence[str] | None = None
) -> dict[str, Any]:
    """One side's row. `adapters[i]` is request i's adapter (for the per-adapter TTFT)."""
    ttfts = [r.ttft for r in results if r.ok and r.ttft is not None]
    n = len(results)
    row: dict[str, Any] = {
        "strategy": name,
        "requests": n,
        "ok": sum(r.ok for r in results),
        "ttft_mean_s": round(statistics.fmean(ttfts), 4) if ttfts else None,
        "ttft_p50_s": round(percentile(ttfts, 50), 4) if ttfts else None,
        "ttft_p99_s": round(percentile(ttfts, 99), 4) if ttfts else None,
        "swaps": swaps,
        "swaps_per_1k": round(1000 * swaps / n, 1) if n else None,
    }
    if ttfts:  # a queue that grows through the run shows as a later half slower than the first
        mid = max(r.sent_at for r in results) / 2
        halves = ([r for r in results if r.sent_at < mid], [r for r in results if r.sent_at >= mid])
        row["ttft_mean_s_halves"] = [
            _mean([r.ttft for r in h if r.ok and r.ttft is not None]) for h in halves
        ]
    if adapters is not None:
        by: dict[str, list[float]] = defaultdict(list)
        for r, a in zip(results, adapters, strict=False):
            if r.ok and r.ttft is not None:
                by[a].append(r.ttft)
        row["ttft_mean_s_by_adapter"] = {a: round(statistics.fmean(v), 4) for a, v in sorted(by.items())}
    return row


def _mean(values: Sequence[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def ratios(baseline: dict[str, Any], aware: dict[str, Any]) -> dict[str, float | None]:
    """baseline / adapter-aware for each figure (> 1: adapter-aware is better)."""
    out: dict[str, float | None] = {}
    for key in ("ttft_mean_s", "ttft_p99_s", "swaps_per_1k"):
        b, a = baseline.get(key), aware.get(key)
        out[key] = (
            round(b / a, 2) if isinstance(b, int | float) and isinstance(a, int | float) and a else None
        )
    return out


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1000 * seconds:.0f}"


def table(rows: Sequence[dict[str, Any]], ratio: dict[str, float | None]) -> str:
    head = (
        f"{'strategy':<14} {'requests':>8} {'ok':>6} {'mean TTFT ms':>13} {'P99 TTFT ms':>12} "
        f"{'swaps/1k req':>13}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        swaps = "-" if r["swaps_per_1k"] is None else f"{r['swaps_per_1k']:.1f}"
        lines.append(
            f"{r['strategy']:<14} {r['requests']:>8} {r['ok']:>6} {_ms(r['ttft_mean_s']):>13} "
            f"{_ms(r['ttft_p99_s']):>12} {swaps:>13}"
        )

    def x(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}x"

    lines.append(
        f"{'ratio (rr/aw)':<14} {'':>8} {'':>6} {x(ratio['ttft_mean_s']):>13} {x(ratio['ttft_p99_s']):>12} "
        f"{x(ratio['swaps_per_1k']):>13}"
    )
    return "\n".join(lines)
