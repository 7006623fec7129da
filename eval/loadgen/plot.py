"""PNG plots of bench results: latency CDFs per load level, goodput/throughput vs offered load with the
knee marked, and the knee vs replica count of a capacity run.

Figures are bare `matplotlib.figure.Figure` objects saved through the Agg canvas (no pyplot, no global
figure registry, no display backend); matplotlib is imported inside the functions so that importing
this module, e.g. from the CLI's `register`, costs nothing and a run with `--no-plots` never loads it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eval.loadgen.client import Sample

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _figure(width: float = 8, height: float = 5) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=110)


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", bbox_inches="tight")
    return path


def plot_latency_cdfs(runs: Sequence[tuple[str, Sequence[Sample]]], path: Path) -> Path:
    """TTFT, TPOT and E2E CDFs (ms, log x), one line per load level, successful measured requests."""
    fig = _figure(14, 4.5)
    axes = fig.subplots(1, 3)
    getters: tuple[tuple[str, Callable[[Sample], float | None]], ...] = (
        ("TTFT", lambda s: s.ttft),
        ("TPOT", lambda s: s.tpot),
        ("E2E latency", lambda s: s.e2e),
    )
    for ax, (title, get) in zip(axes, getters, strict=True):
        for label, samples in runs:
            values = sorted(1000 * v for s in samples if s.measured and s.ok and (v := get(s)) is not None)
            if not values:
                continue
            ys = [(i + 1) / len(values) for i in range(len(values))]
            ax.step(values, ys, where="post", label=label)
        ax.set_title(title)
        ax.set_xlabel("ms")
        ax.set_xscale("log")
        ax.set_ylim(0, 1.01)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("fraction of requests")
    for ax in axes:
        # Unary-only runs have no TTFT/TPOT lines; a legend needs at least one.
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
            break
    return _save(fig, path)


def plot_sweep(levels: Sequence[dict[str, Any]], knee: int | None, fraction: float, path: Path) -> Path:
    """Goodput and throughput (req/s) vs offered load, the ideal y = x, the knee threshold, the knee."""
    order = sorted(range(len(levels)), key=lambda i: levels[i]["offered_rps"])
    xs = [levels[i]["offered_rps"] for i in order]
    fig = _figure(12, 4.8)
    left, right = fig.subplots(1, 2)
    left.plot(xs, [levels[i]["throughput"]["requests_per_s"] for i in order], "o-", label="throughput")
    left.plot(xs, [levels[i]["goodput"]["requests_per_s"] for i in order], "s-", label="goodput")
    top = max(xs) if xs else 1.0
    left.plot([0, top], [0, top], ":", color="grey", label="offered (y = x)")
    left.plot([0, top], [0, fraction * top], "--", color="grey", label=f"{fraction:.0%} of offered")
    if knee is not None:
        k = levels[knee]
        left.plot([k["offered_rps"]], [k["goodput"]["requests_per_s"]], "r*", markersize=16, label="knee")
        left.axvline(k["offered_rps"], color="red", alpha=0.3)
    left.set_xlabel("offered load (req/s)")
    left.set_ylabel("req/s")
    left.set_title("Goodput and throughput vs offered load")
    left.grid(True, alpha=0.3)
    left.legend(fontsize=8)
    right.plot(xs, [levels[i]["throughput"]["output_tokens_per_s"] for i in order], "o-", label="output")
    right.plot(xs, [levels[i]["throughput"]["input_tokens_per_s"] for i in order], "s-", label="input")
    right.set_xlabel("offered load (req/s)")
    right.set_ylabel("tokens/s")
    right.set_title("Token throughput vs offered load")
    right.grid(True, alpha=0.3)
    right.legend(fontsize=8)
    return _save(fig, path)


def plot_capacity(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """Goodput at the knee vs replica count (with perfect linear scaling from the first point)."""
    fig = _figure()
    ax = fig.subplots()
    xs = [r["replicas"] for r in rows]
    ys = [r["knee"]["goodput_rps"] if r["knee"]["found"] else 0.0 for r in rows]
    ax.plot(xs, ys, "o-", label="goodput at the knee")
    if rows and ys[0] > 0:
        ax.plot(xs, [ys[0] * x / xs[0] for x in xs], ":", color="grey", label="linear scaling")
    ax.set_xlabel("replicas")
    ax.set_ylabel("req/s")
    ax.set_title("Knee goodput vs replicas")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)
