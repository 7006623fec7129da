"""PNG plots for routing reports: quality vs strong share (RouteLLM's figure) and quality vs cost.

Figures are bare `matplotlib.figure.Figure` objects rendered by the Agg canvas that `savefig` picks for
PNG: pyplot is never imported, so no display backend is selected, no global figure registry holds them,
and the process-wide backend setting of a caller is left alone. matplotlib is imported inside the
functions so that importing this module (e.g. by a CLI's `register`) costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from eval.routing.metrics import CostQuality, RoutingCurve

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _figure() -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(8, 5), dpi=110)


def _save(fig: Figure, path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", bbox_inches="tight")
    return out


def plot_quality_vs_share(
    curves: Mapping[str, RoutingCurve], path: str | Path, title: str = "Quality vs strong-model calls"
) -> Path:
    """One line per router: expected quality as the strong share goes 0 -> 100 %, with both models."""
    if not curves:
        raise ValueError("nothing to plot: no curves")
    fig = _figure()
    ax = fig.add_subplot()
    first = next(iter(curves.values()))
    for name, curve in curves.items():
        ax.plot(100 * curve.shares, curve.performance, label=name, linewidth=1.5)
    ax.axhline(first.perf_strong, color="red", linestyle="--", linewidth=1, label="strong only")
    ax.axhline(first.perf_weak, color="grey", linestyle="--", linewidth=1, label="weak only")
    ax.set_xlabel("strong-model calls (%)")
    ax.set_ylabel("mean quality")
    ax.set_xlim(0, 100)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    return _save(fig, path)


def plot_cost_quality(
    curves: Mapping[str, Sequence[tuple[float, float]]],
    path: str | Path,
    models: Mapping[str, CostQuality] | None = None,
    title: str = "Quality vs cost",
    cost_label: str = "total cost (USD)",
) -> Path:
    """Lines of (cost, quality) points per router or cascade, and single-model points as markers.

    Cost is whatever the caller measured: USD with real prices, or strong-call share when the data has
    none (then say so in `cost_label`).
    """
    if not curves and not models:
        raise ValueError("nothing to plot: no curves and no model points")
    fig = _figure()
    ax = fig.add_subplot()
    for name, points in curves.items():
        pts = sorted(points)
        # Markers help on a 10-point sweep and smear a per-row curve into a thick band.
        marker = "." if len(pts) <= 50 else None
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=name, linewidth=1.5)
    for name, point in (models or {}).items():
        ax.scatter([point.cost_usd], [point.quality], marker="x", s=40, zorder=3)
        ax.annotate(
            name, (point.cost_usd, point.quality), fontsize=7, xytext=(3, 3), textcoords="offset points"
        )
    ax.set_xlabel(cost_label)
    ax.set_ylabel("mean quality")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if curves:
        ax.legend(loc="lower right")
    return _save(fig, path)


def plot_learning_curve(
    runs: Sequence[Sequence[Mapping[str, float]]], path: str | Path, title: str = "APGR vs labels"
) -> Path:
    """APGR of the memory-blended router against labels seen, one line per run, the prior dashed."""
    if not runs or not any(runs):
        raise ValueError("nothing to plot: no curve points")
    fig = _figure()
    ax = fig.add_subplot()
    for n, points in enumerate(runs):
        xs = [p["labels"] for p in points]
        ax.plot(xs, [p["apgr"] for p in points], marker=".", linewidth=1.5, label=f"run {n + 1}")
        ax.plot(xs, [p["apgr_prior"] for p in points], color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("labelled rows in memory")
    ax.set_ylabel("APGR on rows not yet labelled")
    ax.set_title(title + " (dashed: prior alone)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    return _save(fig, path)
