"""The soak's figures (pure): requests served by a time, RSS growth after warm-up, the leak slope, and the
verdict against issue 9's targets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

GROWTH_TARGET_PCT = 5.0
RSS_TARGET_MB = 300.0
CONCURRENCY = 32  # the max sustained load of the peer benchmark's throughput runs


@dataclass(frozen=True, slots=True)
class Chunk:
    """One wrk run: when it ran (seconds since load start) and what it served."""

    mode: str
    start_s: float
    end_s: float
    requests: int
    errors: int
    rps: float
    p99_ms: float


def requests_at(t: float, chunks: Sequence[Chunk]) -> int:
    """Requests served by `t`: whole chunks before it, a linear share of the chunk running at `t` (wrk
    only reports at the end of a run; within 30 s at a steady rate the error is small)."""
    total = 0.0
    for c in chunks:
        if t >= c.end_s:
            total += c.requests
        elif t > c.start_s and c.end_s > c.start_s:
            total += c.requests * (t - c.start_s) / (c.end_s - c.start_s)
    return round(total)


def value_at(samples: Sequence[dict[str, float]], t: float, key: str = "rss_mb") -> float | None:
    """`key` of the first sample taken at or after `t` (the last one if none is)."""
    if not samples:
        return None
    for s in samples:
        if s["t_s"] >= t and key in s:
            return s[key]
    return samples[-1].get(key)


def growth_pct(start: float | None, end: float | None) -> float | None:
    if start is None or end is None or start <= 0:
        return None
    return round((end - start) / start * 100, 2)


def slope_per_million(
    samples: Sequence[dict[str, float]], after_s: float, key: str = "rss_mb"
) -> float | None:
    """Least-squares MB per million requests after warm-up: a leak shows as a steady positive slope even
    when the end-point growth is inside the target."""
    pts = [(s["requests"], s[key]) for s in samples if s["t_s"] >= after_s and key in s]
    if len(pts) < 3:
        return None
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    if sxx == 0:
        return None
    sxy = sum((x - mx) * (y - my) for x, y in pts)
    return round(sxy / sxx * 1e6, 3)


def summarize(
    samples: Sequence[dict[str, float]], chunks: Sequence[Chunk], warmup_s: float, final_hwm_mb: float | None
) -> dict[str, Any]:
    """RSS after warm-up and at the end, growth between them, maxima, requests and errors."""
    rss = [s["rss_mb"] for s in samples if "rss_mb" in s]
    start, end = value_at(samples, warmup_s), (samples[-1].get("rss_mb") if samples else None)
    uss_start, uss_end = (
        value_at(samples, warmup_s, "uss_mb"),
        (samples[-1].get("uss_mb") if samples else None),
    )
    seconds = sum(c.end_s - c.start_s for c in chunks)
    requests = sum(c.requests for c in chunks)
    return {
        "rss_after_warmup_mb": start,
        "rss_end_mb": end,
        "growth_pct": growth_pct(start, end),
        "uss_after_warmup_mb": uss_start,
        "uss_end_mb": uss_end,
        "uss_growth_pct": growth_pct(uss_start, uss_end),
        "max_rss_sampled_mb": max(rss) if rss else None,
        # VmHWM is the kernel's peak, between samples included (and the start-up peak).
        "hwm_mb": final_hwm_mb,
        "slope_mb_per_million_requests": slope_per_million(samples, warmup_s),
        "requests": requests,
        "errors": sum(c.errors for c in chunks),
        "rps": round(requests / seconds, 1) if seconds else 0.0,
        "load_seconds": round(seconds, 1),
    }


def verdict(
    summary: dict[str, Any], growth_target: float = GROWTH_TARGET_PCT, rss_target: float = RSS_TARGET_MB
) -> dict[str, Any]:
    """Pass/fail per target; a figure that is missing fails (no evidence is not a pass). The RSS ceiling
    is checked against the worst of the sampled maximum and the kernel's peak (VmHWM)."""
    growth = summary.get("growth_pct")
    peaks = [v for v in (summary.get("max_rss_sampled_mb"), summary.get("hwm_mb")) if v is not None]
    peak = max(peaks) if peaks else None
    growth_ok = growth is not None and growth < growth_target
    rss_ok = peak is not None and peak <= rss_target
    no_errors = summary.get("errors", 0) == 0
    return {
        "growth_pct": growth,
        "growth_target_pct": growth_target,
        "growth_ok": growth_ok,
        "peak_rss_mb": peak,
        "rss_target_mb": rss_target,
        "rss_ok": rss_ok,
        "no_errors": no_errors,
        "pass": growth_ok and rss_ok and no_errors,
    }
