"""The soak's report: RSS (and USS) over time and over requests as a PNG, and the Markdown table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eval.bench.peers.soak.figures import CONCURRENCY, RSS_TARGET_MB


def plot(report: dict[str, Any], path: Path) -> bool:
    """RSS (and USS) over time and over requests; False when matplotlib is not installed."""
    try:
        # A bare Figure on the Agg canvas: no pyplot, so no backend is selected for the whole process.
        from matplotlib.figure import Figure
    except ImportError:
        return False
    fig = Figure(figsize=(12, 4.5))
    by_t, by_req = fig.subplots(1, 2)
    for name, side in report["sides"].items():
        samples = side["samples"]
        t = [s["t_s"] / 60 for s in samples]
        req = [s["requests"] / 1e6 for s in samples]
        for key, style in (("rss_mb", "-"), ("uss_mb", ":")):
            ys = [s.get(key, float("nan")) for s in samples]
            label = f"{name} {key.removesuffix('_mb').upper()}"
            by_t.plot(t, ys, style, label=label)
            by_req.plot(req, ys, style, label=label)
        by_t.axvline(side["warmup_seconds"] / 60, color="grey", lw=0.8, ls="--")
    for ax, xlabel in ((by_t, "minutes under load"), (by_req, "requests served (millions)")):
        ax.axhline(RSS_TARGET_MB, color="red", lw=0.8, ls="--", label=f"{RSS_TARGET_MB:.0f} MB target")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("MB")
        ax.grid(alpha=0.3)
    by_t.legend(fontsize=8)
    fig.suptitle(f"gateway memory at concurrency {CONCURRENCY} (unary/stream alternating)")
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    return True


def render_table(report: dict[str, Any]) -> str:
    def f(v: object, fmt: str = ".1f") -> str:
        return format(v, fmt) if isinstance(v, int | float) else "-"

    rows = [
        "| side | baseline MB | after warm-up MB | end MB | growth % | max MB | USS growth % | requests"
        " | errors | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, side in report["sides"].items():
        s, v = side["summary"], side["verdict"]
        info = " (info)" if name != "ours" else ""
        rows.append(
            f"| {name} | {f(side['baseline'].get('rss_mb'))} | {f(s['rss_after_warmup_mb'])}"
            f" | {f(s['rss_end_mb'])}"
            f" | {f(s['growth_pct'], '+.2f')} | {f(v['peak_rss_mb'])} | {f(s['uss_growth_pct'], '+.2f')}"
            f" | {s['requests']} | {s['errors']} | {'PASS' if v['pass'] else 'FAIL'}{info} |"
        )
    return "\n".join(rows)
