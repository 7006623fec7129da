"""Flags override the workload: a single explicit level replaces its sweep; sweeps pick the mode."""

from __future__ import annotations

import argparse
from pathlib import Path

from eval.loadgen.cli import load, register
from eval.loadgen.sweep import resolve_levels


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser)
    return parser.parse_args(["run", *argv])


def test_explicit_rate_replaces_the_workload_sweep(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("sweep: {rates: [1, 2, 4]}\nload: {duration_s: 9}\n")
    workload, _ = load(_args(str(path), "--rate", "5", "--knee-fraction", "0.8", "--seed", "3"))
    assert [(lv.mode, lv.rate) for lv in resolve_levels(workload)] == [("open", 5.0)]
    assert workload.sweep is not None and workload.sweep.knee_fraction == 0.8
    assert (workload.seed, workload.load.duration_s) == (3, 9)


def test_sweep_flags_choose_open_or_closed_levels() -> None:
    workload, _ = load(_args("--rates", "4,1,2", "--url", "http://a", "http://b"))
    assert [lv.rate for lv in resolve_levels(workload)] == [1.0, 2.0, 4.0]
    assert workload.target.base_urls == ["http://a", "http://b"]
    workload, _ = load(_args("--concurrencies", "8,2", "--model", "x", "--api-key", "sk-1"))
    assert [(lv.mode, lv.concurrency) for lv in resolve_levels(workload)] == [("closed", 2), ("closed", 8)]
    assert [a.name for a in workload.aliases] == ["x"] and workload.tenants[0].resolve_key() == "sk-1"
