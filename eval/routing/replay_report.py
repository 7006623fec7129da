"""Outputs of `llmgw router replay`: report.json (one run's keys, or the first run plus every run and a
mean/spread summary over seeds), the learning-curve PNG and the per-row scores file."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from eval.routing.data import FloatArray
from eval.routing.plot import plot_learning_curve

__all__ = ["SUMMARY_KEYS", "at_labels", "combine", "format_text", "write_outputs", "write_scores"]

SUMMARY_KEYS = (
    "apgr_prior",
    "apgr",
    "labels",
    "strong_share",
    "explore_cost_share",
    "quality_share_estimate",
    "quality_share_true",
)


def at_labels(report: dict[str, Any], labels: int) -> dict[str, Any] | None:
    """The learning-curve point at exactly `labels` labels, if the run reached it."""
    return next((p for p in report["curve"] if p["labels"] == labels), None)


def _stats(values: Sequence[float]) -> dict[str, float | int]:
    v = np.array([x for x in values if math.isfinite(x)], dtype=np.float64)
    if v.size == 0:
        return {"mean": math.nan, "std": math.nan, "n": 0}
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if v.size > 1 else 0.0, "n": int(v.size)}


def combine(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out = dict(runs[0])
    if len(runs) > 1:
        summary = {k: _stats([r[k] for r in runs]) for k in SUMMARY_KEYS}
        for labels in (100, 300):
            points = [at_labels(r, labels) for r in runs]
            gains = [p["apgr"] - p["apgr_prior"] for p in points if p is not None]
            summary[f"gain_at_{labels}"] = _stats(gains)
        out["summary"] = summary
        out["runs"] = list(runs)
    return out


def format_text(report: dict[str, Any]) -> str:
    lines = []
    for r in report.get("runs", [report]):
        lo, hi = r["quality_share_ci90"]
        lines.append(
            f"seed {r['seed']}: rows {r['rows']} labels {r['labels']} APGR prior {r['apgr_prior']:.4f} "
            f"-> {r['apgr']:.4f}; strong {r['strong_share']:.3f}; quality share est "
            f"{r['quality_share_estimate']:.4f} [{lo:.4f}, {hi:.4f}] true {r['quality_share_true']:.4f}"
        )
        pts = ", ".join(f"{p['labels']}:{p['apgr'] - p['apgr_prior']:+.4f}" for p in r["curve"])
        lines.append(f"  gain on unseen rows by labels {pts}")
    for k, v in report.get("summary", {}).items():
        lines.append(f"  {k}: mean {v['mean']:.4f} std {v['std']:.4f} (n {v['n']})")
    return "\n".join(lines)


def write_outputs(report: dict[str, Any], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.json"
    path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    runs = [r["curve"] for r in report.get("runs", [report])]
    return [path, plot_learning_curve(runs, out / "learning_curve.png")]


def write_scores(path: Path, ids: Sequence[str], difficulty: FloatArray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        for rid, d in zip(ids, difficulty, strict=True):
            fh.write(orjson.dumps({"id": rid, "difficulty": round(float(d), 6)}) + b"\n")
    return path
