"""The pure parts of the memory soak (eval/bench/peers/soak/): /proc parsing, requests by time, growth,
the leak slope and the verdict against issue 9's targets (< 5 % growth, <= 300 MB)."""

from __future__ import annotations

import os

import pytest

from eval.bench.peers.soak.figures import (
    Chunk,
    growth_pct,
    requests_at,
    slope_per_million,
    summarize,
    value_at,
    verdict,
)
from eval.bench.peers.soak.memory import parse_smaps_rollup, parse_status, read_memory
from eval.bench.peers.soak.report import render_table

STATUS = """\
Name:\tpython
State:\tS (sleeping)
VmPeak:\t  812345 kB
VmHWM:\t  122880 kB
VmRSS:\t  102400 kB
RssAnon:\t   81920 kB
RssFile:\t   20480 kB
RssShmem:\t       0 kB
Threads:\t4
"""

SMAPS_ROLLUP = """\
560b81131000-7ffe66076000 ---p 00000000 00:00 0                          [rollup]
Rss:              102400 kB
Pss:               90112 kB
Shared_Clean:      16384 kB
Shared_Dirty:          0 kB
Private_Clean:      4096 kB
Private_Dirty:     81920 kB
Swap:                  0 kB
"""


def test_status_gives_rss_peak_anon_and_file_in_mb() -> None:
    assert parse_status(STATUS) == {"hwm_mb": 120.0, "rss_mb": 100.0, "anon_mb": 80.0, "file_mb": 20.0}


def test_smaps_rollup_gives_pss_and_uss_as_private_clean_plus_dirty() -> None:
    assert parse_smaps_rollup(SMAPS_ROLLUP) == {"pss_mb": 88.0, "uss_mb": 84.0}
    # An older kernel or a truncated read: only what is there.
    assert parse_smaps_rollup("Pss:  1024 kB\n") == {"pss_mb": 1.0}
    assert parse_smaps_rollup("") == {}


def test_read_memory_of_this_process() -> None:
    mem = read_memory(os.getpid())
    assert mem["rss_mb"] > 0
    assert mem["hwm_mb"] >= mem["rss_mb"] - 0.01


def _chunks() -> list[Chunk]:
    return [
        Chunk("unary", 0.0, 10.0, 1000, 0, 100.0, 5.0),
        Chunk("stream", 10.0, 20.0, 500, 2, 50.0, 9.0),
    ]


def test_requests_interpolate_inside_the_running_chunk() -> None:
    chunks = _chunks()
    assert requests_at(0.0, chunks) == 0
    assert requests_at(5.0, chunks) == 500
    assert requests_at(10.0, chunks) == 1000
    assert requests_at(15.0, chunks) == 1250
    assert requests_at(30.0, chunks) == 1500
    assert requests_at(3.0, []) == 0


def test_growth_and_value_after_warmup() -> None:
    assert growth_pct(100.0, 104.0) == 4.0
    assert growth_pct(100.0, 98.0) == -2.0
    assert growth_pct(None, 100.0) is None
    assert growth_pct(0.0, 100.0) is None
    samples = [{"t_s": 0.0, "rss_mb": 90.0}, {"t_s": 55.0, "rss_mb": 99.0}, {"t_s": 60.0, "rss_mb": 100.0}]
    assert value_at(samples, 60.0) == 100.0
    assert value_at(samples, 58.0) == 100.0  # the first sample at or after the time
    assert value_at(samples, 999.0) == 100.0  # past the end: the last sample
    assert value_at([], 1.0) is None


def test_slope_shows_a_steady_leak_per_million_requests() -> None:
    leak = [{"t_s": float(t), "requests": t * 1000.0, "rss_mb": 100.0 + t * 0.01} for t in range(0, 600, 5)]
    assert slope_per_million(leak, 60.0) == pytest.approx(10.0)
    flat = [{**s, "rss_mb": 100.0} for s in leak]
    assert slope_per_million(flat, 60.0) == 0.0
    assert slope_per_million(leak[:2], 0.0) is None


def test_summary_and_verdict() -> None:
    samples = [
        {"t_s": 0.0, "requests": 0.0, "rss_mb": 95.0, "uss_mb": 70.0},
        {"t_s": 10.0, "requests": 1000.0, "rss_mb": 100.0, "uss_mb": 80.0},
        {"t_s": 15.0, "requests": 1250.0, "rss_mb": 103.0, "uss_mb": 81.0},
        {"t_s": 20.0, "requests": 1500.0, "rss_mb": 102.0, "uss_mb": 82.0},
    ]
    s = summarize(samples, _chunks(), warmup_s=10.0, final_hwm_mb=110.0)
    assert s["rss_after_warmup_mb"] == 100.0
    assert s["rss_end_mb"] == 102.0
    assert s["growth_pct"] == 2.0
    assert s["uss_growth_pct"] == 2.5
    assert s["max_rss_sampled_mb"] == 103.0
    assert (s["requests"], s["errors"], s["rps"]) == (1500, 2, 75.0)
    v = verdict(s)
    assert v["growth_ok"] and v["rss_ok"]
    assert v["peak_rss_mb"] == 110.0  # the kernel's peak counts when above every sample
    assert not v["no_errors"] and not v["pass"]
    assert verdict({**s, "errors": 0})["pass"]


@pytest.mark.parametrize(
    ("growth", "peak", "ok"),
    [(4.99, 300.0, True), (5.0, 200.0, False), (-3.0, 300.1, False), (None, 200.0, False)],
)
def test_verdict_edges(growth: float | None, peak: float, ok: bool) -> None:
    v = verdict({"growth_pct": growth, "max_rss_sampled_mb": peak, "hwm_mb": None, "errors": 0})
    assert v["pass"] is ok


def test_table_marks_the_routed_side_as_information() -> None:
    s = summarize([{"t_s": 0.0, "requests": 0.0, "rss_mb": 100.0}], [], 0.0, None)
    side = {"baseline": {"rss_mb": 90.0}, "summary": s, "verdict": verdict(s)}
    table = render_table({"sides": {"ours": side, "ours-routed": side}})
    assert "| ours | 90.0 | 100.0 | 100.0 | +0.00 | 100.0 | - | 0 | 0 | PASS |" in table
    assert "PASS (info)" in table
