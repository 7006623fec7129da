"""Percentiles, SLO checks, the run summary (goodput <= throughput) and the knee rule."""

from __future__ import annotations

import pytest

from eval.loadgen.capacity import parse_gauges, thresholds
from eval.loadgen.client import Sample
from eval.loadgen.runner import Level, RunResult
from eval.loadgen.stats import find_knee, meets_slo, percentile, summarize, warnings
from gateway.config import SloClass


def test_percentile_interpolates_like_numpy() -> None:
    values = [float(v) for v in range(1, 11)]
    assert percentile(values, 50) == pytest.approx(5.5)
    assert percentile(values, 90) == pytest.approx(9.1)
    assert percentile(values, 99) == pytest.approx(9.91)
    assert percentile([3.0], 99) == 3.0
    assert percentile([5.0, 1.0], 0) == 1.0
    with pytest.raises(ValueError):
        percentile([], 50)


def _stream(start: float, ttft: float, tokens: int, tpot: float, **kw: object) -> Sample:
    s = Sample(0, "m", None, True, "c", start=start)
    s.ttft = ttft
    s.first_token = start + ttft
    s.last_token = s.first_token + tpot * (tokens - 1)
    s.end = s.last_token + 0.001
    s.completion_tokens, s.prompt_tokens = tokens, 100
    for k, v in kw.items():
        setattr(s, k, v)
    return s


def test_tpot_uses_usage_tokens() -> None:
    s = _stream(0, 0.1, 11, 0.02)
    assert s.tpot == pytest.approx(0.02)
    s.completion_tokens = 1
    assert s.tpot is None


def test_meets_slo_for_streams() -> None:
    slo = SloClass(ttft_ms=200, tpot_ms=30)
    assert meets_slo(_stream(0, 0.1, 10, 0.02), slo)
    assert not meets_slo(_stream(0, 0.3, 10, 0.02), slo)
    assert not meets_slo(_stream(0, 0.1, 10, 0.04), slo)
    assert not meets_slo(_stream(0, 0.1, 10, 0.02, error="http_500"), slo)
    assert meets_slo(_stream(0, 5, 10, 1), None)
    assert not meets_slo(_stream(0, 0.1, 100, 0.02), SloClass(e2e_ms=1000))


def test_unary_requests_are_judged_on_e2e_or_the_implied_deadline() -> None:
    unary = Sample(0, "m", None, False, "c", start=0.0, end=0.5, completion_tokens=11)
    assert meets_slo(unary, SloClass(e2e_ms=600))
    assert not meets_slo(unary, SloClass(e2e_ms=400))
    # implied: 200 + 30 * 10 = 500 ms
    assert meets_slo(unary, SloClass(ttft_ms=200, tpot_ms=30))
    assert not meets_slo(unary, SloClass(ttft_ms=190, tpot_ms=30))


def test_summary_counts_windows_and_goodput() -> None:
    slo = {"c": SloClass(ttft_ms=200)}
    samples = [
        _stream(0.5, 0.1, 10, 0.1, measured=False),  # warm-up: not measured, but finishes in the window
        _stream(1.0, 0.1, 10, 0.01),
        _stream(2.0, 0.5, 10, 0.01),  # too slow: ok, not good
        _stream(3.0, 0.1, 10, 0.01, error="stream_error"),
        _stream(3.9, 0.1, 10, 0.2),  # finishes after the window: measured, not in the rates
    ]
    s = summarize(RunResult(Level("open", rate=1.0), samples, window_end=4.0, wall_s=6.0), slo, warmup_s=1.0)
    assert s["requests"] == {
        "sent": 5,
        "warmup_excluded": 1,
        "measured": 4,
        "ok": 3,
        "good": 2,
        "streamed": 4,
        "missing_usage": 0,
        "finished_in_window": 3,
    }
    assert s["errors"] == {"stream_error": 1}
    assert s["window_s"] == 3.0 and s["offered_rps"] == pytest.approx(4 / 3)
    assert s["throughput"]["requests_per_s"] == pytest.approx(1.0)
    assert s["throughput"]["output_tokens_per_s"] == pytest.approx(10.0)
    assert s["goodput"]["requests_per_s"] == pytest.approx(2 / 3)
    assert s["goodput"]["slo_attainment"] == 0.5
    assert s["goodput"]["by_alias"] == {"m": {"good": 2, "total": 4, "attainment": 0.5}}
    assert s["goodput"]["by_class"] == {"c": {"good": 2, "total": 4, "attainment": 0.5}}
    assert s["goodput"]["by_tenant"] == {}  # no keys in this workload
    assert s["goodput"]["requests_per_s"] <= s["throughput"]["requests_per_s"]
    assert s["latency_ms"]["ttft"]["count"] == 3
    assert s["latency_ms"]["ttft"]["p50"] == pytest.approx(100)


def test_summary_per_tenant() -> None:
    slo = {"c": SloClass(ttft_ms=200)}
    samples = [
        _stream(1.0, 0.1, 10, 0.01, tenant="b"),
        _stream(1.5, 0.1, 10, 0.01, tenant="a"),
        _stream(2.0, 0.9, 10, 0.01, tenant="a"),  # the flooder's backlog: too slow
        _stream(2.5, 0.1, 10, 0.01, tenant="a", error="stream_error"),
    ]
    s = summarize(RunResult(Level("open", rate=1.0), samples, window_end=4.0, wall_s=6.0), slo, warmup_s=1.0)
    by = s["goodput"]["by_tenant"]
    assert by["b"] == {"good": 1, "total": 1, "attainment": 1.0, "goodput_rps": pytest.approx(1 / 3),
                       "ttft_p99_ms": pytest.approx(100)}  # fmt: skip
    assert by["a"]["good"] == 1 and by["a"]["total"] == 3 and by["a"]["ttft_p99_ms"] == pytest.approx(892)


def test_knee_is_the_top_of_the_passing_run_from_the_lowest_load() -> None:
    assert find_knee([(1, 1.0), (2, 0.97), (4, 0.91), (8, 0.5)], 0.9) == 2
    assert find_knee([(8, 0.5), (1, 1.0), (4, 0.95), (2, 1.0)], 0.9) == 2  # order does not matter
    assert (
        find_knee([(1, 1.0), (2, 0.8), (4, 0.95)], 0.9) == 0
    )  # a lucky point after a failure is not capacity
    assert find_knee([(1, 0.5), (2, 0.4)], 0.9) is None
    assert find_knee([(1, 1.0), (2, 1.0)], 0.9) == 1
    assert find_knee([], 0.9) is None


def test_metrics_gauges_and_thresholds() -> None:
    text = (
        "# HELP vllm:num_requests_waiting x\n"
        'vllm:num_requests_waiting{model_name="sim"} 3.0\n'
        'vllm:num_requests_running{model_name="sim"} 8.0\n'
        'vllm:gpu_cache_usage_perc{model_name="sim"} 0.5\n'
        'vllm:prompt_tokens_total{model_name="sim"} 100.0\n'
    )
    assert parse_gauges(text) == {"waiting": 3.0, "running": 8.0, "kv_usage": 0.5}
    assert parse_gauges(text + 'vllm:kv_cache_usage_perc{model_name="sim"} 0.25\n')["kv_usage"] == 0.25
    level = {"observed": {"waiting": {"p50": 0.0, "p90": 2.2, "max": 4}, "kv_usage": {"p90": 0.81234}}}
    assert thresholds(level) == {"num_requests_waiting": 3, "kv_cache_usage_perc": 0.812}
    assert thresholds({"observed": {"waiting": {"p90": 0.0}, "kv_usage": None}})["num_requests_waiting"] == 1


def test_warnings_for_short_warmup_and_few_requests() -> None:
    assert warnings(100, 5.0, 1.0) == []
    (short,) = warnings(100, 1.0, 3.0)
    assert "shorter than the median E2E" in short
    (few,) = warnings(10, 5.0, None)
    assert "only 10 measured requests" in few


def test_past_knee_is_the_next_level_or_the_first_without_a_knee() -> None:
    from eval.loadgen.capacity import _past_knee

    levels = [
        {"level": {"x": x}, "goodput": {"slo_attainment": a}, "observed": {"x": x}}
        for x, a in ((1, 1.0), (2, 0.5))
    ]
    assert _past_knee(levels, 0) == {"level": {"x": 2}, "slo_attainment": 0.5, "observed": {"x": 2}}
    assert _past_knee(levels, 1) is None
    assert _past_knee(levels, None) is not None and _past_knee(levels, None)["level"] == {"x": 1}  # type: ignore[index]
