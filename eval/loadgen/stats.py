"""Summaries of one load level, goodput against SLO classes, and the goodput knee of a sweep.

Two populations. Latencies, error counts and SLO attainment are over *measured* requests (started
after warm-up). Rates are steady-state rates over the measurement window [warmup_s, window_end]
(window_end = duration_s for time-bounded runs): throughput, token rates and goodput count the
requests that *finished* inside the window, whenever they started, divided by its length. So an
overloaded server shows throughput below the offered load (its backlog finishes after the window), a
keeping-up one shows throughput ~ offered without a bias from the last requests' tail, and
goodput <= throughput always holds.

Goodput: a request is good when it succeeded and meets every threshold of its SLO class: TTFT <=
ttft_ms, TPOT <= tpot_ms, E2E <= e2e_ms. A non-streamed request has no TTFT/TPOT; it is judged on e2e_ms,
or, when its class has none, on the deadline the class implies for a stream of the same length,
ttft_ms + tpot_ms * (completion_tokens - 1). A request without an SLO class is good when it succeeds.

Knee: the levels of a sweep are sorted by offered load; `slo_attainment` is good / measured requests,
which equals goodput counted over the offered window divided by the offered rate. The knee is the
highest offered load L such that attainment >= `fraction` (default 0.9) at L *and at every lower
level*: past it, adding load no longer turns into proportionally more goodput. Requiring every lower
level to pass keeps one lucky high point after a failure from being reported as capacity. No passing
level means no knee (`null`): the first level is already overloaded.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from eval.loadgen.client import Sample
from eval.loadgen.runner import RunResult
from gateway.config import SloClass


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); `q` in [0, 100]."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def distribution_ms(values: Sequence[float]) -> dict[str, float | int] | None:
    """P50/P90/P99/mean/max of seconds, reported in milliseconds; None for no values."""
    if not values:
        return None
    return {
        "count": len(values),
        "mean": 1000 * sum(values) / len(values),
        "p50": 1000 * percentile(values, 50),
        "p90": 1000 * percentile(values, 90),
        "p99": 1000 * percentile(values, 99),
        "max": 1000 * max(values),
    }


def meets_slo(sample: Sample, slo: SloClass | None) -> bool:
    if not sample.ok:
        return False
    if slo is None:
        return True
    if slo.e2e_ms is not None and sample.e2e * 1000 > slo.e2e_ms:
        return False
    if sample.stream:
        ttft, tpot = sample.ttft, sample.tpot
        if slo.ttft_ms is not None and (ttft is None or ttft * 1000 > slo.ttft_ms):
            return False
        # One-token answers have no TPOT; there is nothing to violate.
        return slo.tpot_ms is None or tpot is None or tpot * 1000 <= slo.tpot_ms
    if slo.e2e_ms is not None:
        return True
    tokens = sample.completion_tokens or 1
    deadline = (slo.ttft_ms or 0.0) + (slo.tpot_ms or 0.0) * (tokens - 1)
    return sample.e2e * 1000 <= deadline


def _attainment(good: Counter[str], total: Counter[str]) -> dict[str, dict[str, float | int]]:
    items = sorted(total.items())
    return {name: {"good": good[name], "total": n, "attainment": good[name] / n} for name, n in items}


def _by_tenant(
    measured: Sequence[Sample], finished: Sequence[Sample], good: Callable[[Sample], bool], window: float
) -> dict[str, dict[str, float | int | None]]:
    """Per tenant: SLO attainment, goodput (good answers finished in the window, per second) and P99
    TTFT; empty without tenants."""
    out: dict[str, dict[str, float | int | None]] = {}
    for name in sorted({s.tenant for s in measured if s.tenant is not None}):
        mine = [s for s in measured if s.tenant == name]
        ttfts = [s.ttft for s in mine if s.ok and s.ttft is not None]
        n_good = sum(1 for s in mine if good(s))
        out[name] = {
            "good": n_good,
            "total": len(mine),
            "attainment": n_good / len(mine),
            "goodput_rps": sum(1 for s in finished if s.tenant == name and good(s)) / window,
            "ttft_p99_ms": percentile(ttfts, 99) * 1000 if ttfts else None,
        }
    return out


def warnings(measured: int, warmup_s: float, e2e_p50_s: float | None) -> list[str]:
    """Conditions under which the window rates are not steady-state rates."""
    out = []
    if e2e_p50_s is not None and warmup_s < e2e_p50_s:
        out.append(
            f"warm-up ({warmup_s:g} s) is shorter than the median E2E ({e2e_p50_s:.1f} s): the window starts "
            "before the server is in steady state, so throughput and goodput read low"
        )
    if measured < 50:
        out.append(f"only {measured} measured requests: rates and P99 are noisy; run longer")
    return out


def summarize(result: RunResult, slo_classes: Mapping[str, SloClass], warmup_s: float) -> dict[str, Any]:
    def good_(s: Sample) -> bool:
        return meets_slo(s, slo_classes.get(s.slo_class) if s.slo_class else None)

    measured = [s for s in result.samples if s.measured]
    ok = [s for s in measured if s.ok]
    good_by: dict[str, Counter[str]] = {"class": Counter(), "alias": Counter()}
    total_by: dict[str, Counter[str]] = {"class": Counter(), "alias": Counter()}
    good = 0
    for s in measured:
        is_good = good_(s)
        good += is_good
        for dim, name in (("class", s.slo_class or "none"), ("alias", s.alias)):
            total_by[dim][name] += 1
            good_by[dim][name] += is_good
    window = max(result.window_end - warmup_s, 1e-9)
    finished = [s for s in result.samples if s.ok and warmup_s <= s.end <= result.window_end]
    prompt_tokens = sum(s.prompt_tokens or 0 for s in finished)
    completion_tokens = sum(s.completion_tokens or 0 for s in finished)
    errors = Counter(s.error for s in measured if s.error is not None)
    level = result.level
    return {
        "level": {"mode": level.mode, "rate": level.rate, "concurrency": level.concurrency, "x": level.x},
        "window_s": window,
        "wall_s": result.wall_s,
        "offered_rps": len(measured) / window,
        "requests": {
            "sent": len(result.samples),
            "warmup_excluded": len(result.samples) - len(measured),
            "measured": len(measured),
            "ok": len(ok),
            "good": good,
            "streamed": sum(1 for s in measured if s.stream),
            "missing_usage": sum(1 for s in ok if s.completion_tokens is None),
            "finished_in_window": len(finished),
        },
        "errors": dict(sorted(errors.items())),
        "throughput": {
            "requests_per_s": len(finished) / window,
            "input_tokens_per_s": prompt_tokens / window,
            "output_tokens_per_s": completion_tokens / window,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
        },
        "goodput": {
            "requests_per_s": sum(1 for s in finished if good_(s)) / window,
            "slo_attainment": good / len(measured) if measured else 0.0,
            "by_class": _attainment(good_by["class"], total_by["class"]),
            # Per alias shows which pool misses its SLO when several sit behind one gateway.
            "by_alias": _attainment(good_by["alias"], total_by["alias"]),
            # Per tenant (a workload with several keys): who keeps its goodput when one floods.
            "by_tenant": _by_tenant(measured, finished, good_, window),
        },
        "warnings": warnings(len(measured), warmup_s, percentile([s.e2e for s in ok], 50) if ok else None),
        "latency_ms": {
            "ttft": distribution_ms([s.ttft for s in ok if s.ttft is not None]),
            "tpot": distribution_ms([t for s in ok if (t := s.tpot) is not None]),
            "e2e": distribution_ms([s.e2e for s in ok]),
        },
    }


def find_knee(levels: Sequence[tuple[float, float]], fraction: float) -> int | None:
    """Index (into `levels`) of the knee; `levels` are (offered load, slo_attainment) pairs.

    See the module docstring: the highest load of the passing run that starts at the lowest load.
    """
    order = sorted(range(len(levels)), key=lambda i: levels[i][0])
    knee: int | None = None
    for i in order:
        if levels[i][1] < fraction:
            break
        knee = i
    return knee
