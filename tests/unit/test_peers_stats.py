"""The pure math of the peer benchmark (eval/bench/peers/stats.py, report.py): added latency inside a round,
medians over rounds, ratios, targets and the Markdown tables. No timing is measured here."""

from __future__ import annotations

from typing import Any

import pytest

from eval.bench.peers.report import figures_table, fmt, ratios_table, render_markdown, targets_table
from eval.bench.peers.stats import TARGETS, evaluate, median, per_round, ratio, ratios, summarize


def _round(direct_p50: float, ours_p50: float, ours_rps: float, litellm_rps: float) -> dict[str, Any]:
    def lat(p50: float) -> dict[str, Any]:
        return {"p50_ms": p50, "p99_ms": p50 * 4, "ttft_p50_ms": p50 / 2, "ttft_p99_ms": p50 * 2}

    return {
        "direct": {
            "unary@1": lat(direct_p50),
            "unary@8": lat(direct_p50),
            "stream@1": lat(direct_p50),
            "stream@8": lat(direct_p50),
            "unary@32": {"rps": 50000.0},
            "stream@32": {"rps": 20000.0},
        },
        "ours": {
            "unary@1": lat(ours_p50),
            "unary@8": lat(ours_p50),
            "stream@1": lat(ours_p50),
            "stream@8": lat(ours_p50),
            "unary@32": {"rps": ours_rps},
            "stream@32": {"rps": ours_rps},
        },
        "litellm": {
            "unary@1": lat(10.0),
            "unary@8": lat(10.0),
            "stream@1": lat(10.0),
            "stream@8": lat(10.0),
            "unary@32": {"rps": litellm_rps},
            "stream@32": {"rps": litellm_rps},
        },
    }


def test_added_is_taken_inside_each_round_before_the_median() -> None:
    # Round 2 is slow for everyone (drift): subtracting inside the round cancels it, so the added
    # figure is 0.3 in every round, whereas medians taken per side first would not line up.
    rounds = [_round(0.1, 0.4, 3000, 150), _round(5.1, 5.4, 2000, 100), _round(0.2, 0.5, 3200, 140)]
    assert per_round(rounds, "ours", "unary@1", "p50_ms", added=True) == pytest.approx([0.3, 0.3, 0.3])
    summary = summarize(rounds, ["direct", "ours", "litellm"])
    assert summary["ours"]["unary"]["added_p50_c1_ms"] == 0.3
    assert summary["ours"]["unary"]["rps_c32"] == 3000
    assert summary["ours"]["stream"]["ttft_added_p50_c1_ms"] == 0.15
    # Direct keeps its absolute figures, under names without "added".
    assert summary["direct"]["unary"]["p50_c1_ms"] == 0.2
    assert "added_p50_c1_ms" not in summary["direct"]["unary"]
    assert summary["ours"]["unary"]["added_p50_c1_ms_rounds"] == [0.3, 0.3, 0.3]


def test_a_round_without_the_direct_reference_is_left_out_of_added_figures() -> None:
    rounds = [_round(0.1, 0.4, 3000, 150), _round(0.1, 0.9, 3000, 150)]
    del rounds[1]["direct"]["unary@1"]
    assert per_round(rounds, "ours", "unary@1", "p50_ms", added=True) == pytest.approx([0.3])
    assert per_round(rounds, "ours", "unary@1", "p50_ms", added=False) == [0.4, 0.9]


def test_median_and_ratio() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([1.0, 2.0, 3.0, 10.0]) == 2.5
    assert median([]) is None
    assert ratio(3000.0, 150.0) == 20.0
    assert ratio(0.5, 2.0) == 0.25
    assert ratio(None, 2.0) is None
    # A peer whose added latency is at or below zero is noise: no ratio over it.
    assert ratio(0.5, 0.0) is None
    assert ratio(0.5, -0.1) is None


def test_ratios_are_ours_over_each_peer_present() -> None:
    summary = summarize([_round(0.1, 0.4, 3000, 150)], ["direct", "ours", "litellm"])
    table = ratios(summary)
    assert set(table) == {"ours/litellm"}  # no portkey, floor or routed side in this run
    assert table["ours/litellm"]["unary.rps_c32"] == 20.0
    assert table["ours/litellm"]["unary.added_p50_c1_ms"] == round(0.3 / 9.9, 3)


def test_targets_pass_miss_and_missing() -> None:
    summary = summarize([_round(0.1, 0.4, 3000, 150)], ["direct", "ours", "litellm"])
    results = {t["target"]: t for t in evaluate(summary, ratios(summary))}
    assert len(results) == len(TARGETS)
    assert results["added P50, non-streaming, c=1 (ms)"]["pass"] is True  # 0.3 <= 0.5
    assert results["added P99, non-streaming, c=8 (ms)"]["pass"] is True  # 1.2 <= 3
    assert results["throughput, streaming, c=32 (req/s)"]["pass"] is True  # 3000 >= 2500
    assert results["non-streaming req/s vs LiteLLM (x)"]["pass"] is True  # 20 >= 20
    assert results["non-streaming req/s vs Portkey (x)"]["pass"] is None  # not measured
    slow = summarize([_round(0.1, 0.9, 2000, 150)], ["direct", "ours", "litellm"])
    missed = {t["target"]: t for t in evaluate(slow, ratios(slow))}
    assert missed["added P50, non-streaming, c=1 (ms)"]["pass"] is False
    assert missed["non-streaming req/s vs LiteLLM (x)"]["pass"] is False  # 13.3x


def test_markdown_tables() -> None:
    rounds = [_round(0.1, 0.4, 3000, 150)]
    summary = summarize(rounds, ["direct", "ours", "litellm"])
    table = figures_table(summary, ["direct", "ours", "litellm"])
    lines = table.splitlines()
    assert len(lines) == 5 and lines[1].startswith("|---|")
    assert "absolute latency" in lines[2] and "3,000" in lines[3]
    assert "ours/litellm" in ratios_table(ratios(summary))
    assert "**miss**" not in targets_table(evaluate(summary, ratios(summary))).split("LiteLLM")[0]
    assert fmt(None) == "–" and fmt(1234.5) == "1,234" and fmt(0.123, 3) == "0.123"
    report = {
        "started_at": "t",
        "wall_seconds": 1.0,
        "config": {
            "gateways": ["ours", "litellm"],
            "rounds": 1,
            "latency_seconds": 2,
            "throughput_seconds": 4,
            "gateway_cpu": 0,
            "load_cpu": 1,
            "upstream": "static",
        },
        "environment": {"git_commit": "abc"},
        "summary": summary,
        "ratios": ratios(summary),
        "targets": evaluate(summary, ratios(summary)),
        "warnings": ["only 1 round(s): a smoke run, not a measurement"],
    }
    md = render_markdown(report)
    assert md.startswith("# Gateway peers benchmark") and "## Targets" in md and "smoke run" in md
