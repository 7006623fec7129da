"""`llmgw bench run` against one real simulator: a short mixed streaming/unary run and a two-level sweep.

Asserts the report's consistency (counts add up, usage tokens arrive, no errors, goodput <= throughput,
a knee entry for the sweep) and that the plots are written, never timings.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.support.stack import Stack


@pytest.fixture(scope="module")
def sim_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with Stack(tmp_path_factory.mktemp("sim")) as s:
        yield s.sim("bench-sim", "--profile", "small", "--api-key", "sk-bench", name="sim").url


def _bench(*args: str, env_key: str = "sk-bench") -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "bench", "run", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "LOADGEN_IT_KEY": env_key},
    )


def _workload(tmp_path: Path, url: str, extra: str = "") -> Path:
    path = tmp_path / "w.yaml"
    path.write_text(
        f"""
name: it
seed: 11
target: {{base_urls: ["{url}"], api: chat, timeout_s: 30}}
load: {{mode: open, arrival: poisson, rate: 8, duration_s: 3, warmup_s: 0.5}}
requests:
  prompt_tokens: {{dist: uniform, min: 20, max: 200}}
  output_tokens: {{dist: choice, values: [8, 16, 32]}}
  ignore_eos: true
  stream_share: 0.5
  prefix: {{groups: 2, tokens: 64, share: 0.5}}
tenants: [{{name: it, key_env: LOADGEN_IT_KEY}}]
aliases: [{{name: bench-sim}}]
slo_classes: {{relaxed: {{ttft_ms: 5000, tpot_ms: 1000, e2e_ms: 20000}}}}
default_slo_class: relaxed
{extra}"""
    )
    return path


def test_single_level_report_is_consistent(sim_url: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = _bench(str(_workload(tmp_path, sim_url)), "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    report = orjson.loads((out / "bench.json").read_bytes())
    assert report["format"] == "llmgw-bench/1"
    assert report["workload"]["tenants"][0]["key_env"] == "LOADGEN_IT_KEY"
    assert "sk-bench" not in (out / "bench.json").read_text()
    (level,) = report["levels"]
    req = level["requests"]
    assert req["sent"] == req["measured"] + req["warmup_excluded"] > 10
    assert req["ok"] == req["measured"] and level["errors"] == {}
    assert 0 < req["streamed"] < req["measured"]  # both streamed and unary requests ran
    assert req["missing_usage"] == 0
    tp, gp = level["throughput"], level["goodput"]
    assert tp["prompt_tokens"] > 0 and tp["completion_tokens"] > 0
    assert 0 < gp["requests_per_s"] <= tp["requests_per_s"]
    assert gp["slo_attainment"] == 1.0  # the relaxed SLO holds on an idle simulator
    lat = level["latency_ms"]
    assert lat["ttft"]["count"] == req["streamed"]
    assert lat["e2e"]["count"] == req["ok"]
    assert lat["ttft"]["p50"] <= lat["ttft"]["p99"] and lat["tpot"]["count"] > 0
    assert report["knee"] is None  # one level: no sweep
    assert (out / "bench-latency-cdf.png").stat().st_size > 1000
    assert "rate 8/s" in proc.stdout


def test_sweep_finds_a_knee_and_draws_it(sim_url: str, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    workload = _workload(tmp_path, sim_url, "sweep: {rates: [2, 4], knee_fraction: 0.9}\n")
    proc = _bench(str(workload), "--duration", "1.5", "--warmup", "0.2", "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    report = orjson.loads((out / "bench.json").read_bytes())
    assert [lvl["level"]["rate"] for lvl in report["levels"]] == [2, 4]
    assert report["knee"]["found"] and report["knee"]["level"]["rate"] == 4
    assert report["knee"]["highest_tested"]
    assert (out / "bench-sweep.png").stat().st_size > 1000


def test_wrong_key_is_reported_as_http_401(sim_url: str, tmp_path: Path) -> None:
    out = tmp_path / "bad"
    proc = _bench(
        str(_workload(tmp_path, sim_url)),
        "--duration",
        "1",
        "--warmup",
        "0",
        "--no-plots",
        "--out",
        str(out),
        "--quiet",
        env_key="sk-wrong",
    )
    # Every request failed: the report is written and the exit status says so (issue 44).
    assert proc.returncode == 1, proc.stderr
    assert "measured requests failed (100.0%; http_401 " in proc.stderr
    (level,) = orjson.loads((out / "bench.json").read_bytes())["levels"]
    assert level["requests"]["ok"] == 0 and level["errors"] == {"http_401": level["requests"]["measured"]}
    assert level["goodput"]["requests_per_s"] == 0


def test_bad_workload_exits_2_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("load: {rte: 3}\n")
    proc = _bench(str(path), "--no-plots")
    assert proc.returncode == 2
    assert f"{path}: unknown key 'load.rte'" in proc.stderr
