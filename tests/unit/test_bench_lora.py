"""bench-lora's pure parts: Zipf workload, the gateway policy it renders, counters and figures."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

from eval.bench.lora.report import ratios, summarize, table
from eval.bench.lora.stack import AWARE, BASELINE, MODEL, Replicas, policy, policy_yaml
from eval.bench.lora.workload import Workload, adapter_names, zipf_weights
from eval.bench.pools._load import Result
from eval.bench.procs import metric_sum
from gateway.config import parse_policy

ADAPTERS = {n: Path(f"/adapters/{n}") for n in adapter_names(8)}


def test_zipf_weights_fall_with_rank_and_sum_to_one() -> None:
    w = zipf_weights(8, 1.1)
    assert sum(w) == pytest.approx(1.0)
    assert all(a > b for a, b in zip(w, w[1:], strict=False))
    assert w[0] == pytest.approx(0.399, abs=0.002) and w[7] == pytest.approx(0.040, abs=0.002)
    assert zipf_weights(4, 0.0) == [0.25] * 4
    with pytest.raises(ValueError):
        zipf_weights(0, 1.1)


def test_workload_is_seeded_skewed_and_streams_to_the_adapter_alias() -> None:
    wl = Workload.zipf(8, 1.1, seed=3, count=5000)
    assert wl.picks == Workload.zipf(8, 1.1, seed=3, count=5000).picks
    assert wl.picks != Workload.zipf(8, 1.1, seed=4, count=5000).picks
    shares = wl.shares(5000)
    assert shares["a0"] == pytest.approx(0.399, abs=0.03) and shares["a0"] > shares["a3"] > shares["a7"]
    body = wl.body(12)
    assert body["model"] == wl.adapter(12) and body["stream"] is True and body["ignore_eos"] is True
    assert body["max_tokens"] == 64 and wl.adapter(5000 + 12) == wl.adapter(12)  # wraps, never raises


def test_policy_renders_the_lora_contract_for_each_side() -> None:
    for side, strategy, affinity in ((BASELINE, "round_robin", False), (AWARE, "least_load", True)):
        doc = yaml.safe_load(policy_yaml(policy(side, [8001, 8002], ADAPTERS, Replicas())))
        (pool,) = doc["pools"]
        assert pool["model"] == MODEL and pool["balancing"]["strategy"] == strategy
        assert pool["endpoints"]["static"] == ["http://127.0.0.1:8001", "http://127.0.0.1:8002"]
        lora = pool["lora"]
        assert lora["affinity"] is affinity and lora["runtime_loading"] is False
        assert lora["max_loras"] == 2 and lora["max_rank"] == 8
        assert [a["name"] for a in lora["adapters"]] == list(ADAPTERS)
        assert lora["adapters"][3] == {"name": "a3", "source": "/adapters/a3", "rank": 8}
        assert [m["route"] for m in doc["models"]] == [{"pool": "base", "adapter": n} for n in ADAPTERS]


def test_policy_is_accepted_by_the_gateway_when_it_has_lora() -> None:
    for side in (BASELINE, AWARE):
        parsed = parse_policy(policy_yaml(policy(side, [1, 2], ADAPTERS, Replicas())), "bench")
        assert parsed.pools[0].lora is not None and len(parsed.pools[0].lora.adapters) == 8


def test_replica_flags_give_every_adapter_and_the_swap_cost() -> None:
    flags = Replicas(swap_ms=25).flags(ADAPTERS)
    assert flags[flags.index("--max-loras") + 1] == "2" and flags[flags.index("--lora-swap-ms") + 1] == "25"
    assert "--enable-lora" in flags and flags[-8:] == [f"a{i}=/adapters/a{i}" for i in range(8)]


def test_metric_sum_adds_every_label_set_of_one_name() -> None:
    page = (
        "# TYPE sim:lora_swaps_total counter\n"
        'sim:lora_swaps_total{engine="0",model_name="m"} 12.0\n'
        'sim:lora_swaps_total{engine="1",model_name="m"} 3.0\n'
        'sim:lora_swaps_total_other{engine="0"} 100.0\n'
    )
    assert metric_sum(page, "sim:lora_swaps_total") == 15.0
    assert metric_sum(page, "vllm:absent") == 0.0


def _results(ttfts: Sequence[float | None]) -> list[Result]:
    return [Result(float(i), t, 200 if t is not None else 503, t is not None) for i, t in enumerate(ttfts)]


def test_summarize_and_ratio() -> None:
    rr = summarize(
        "round_robin", _results([0.1] * 98 + [2.0, None]), swaps=50, adapters=["a0"] * 50 + ["a1"] * 50
    )
    aw = summarize("adapter_aware", _results([0.05] * 99 + [0.5]), swaps=10)
    assert rr["requests"] == 100 and rr["ok"] == 99 and rr["swaps_per_1k"] == 500.0
    assert rr["ttft_p99_s"] == 0.1 and aw["ttft_p99_s"] == 0.05
    # a1: 48 x 0.1 s and one 2.0 s; the failed request is left out
    assert rr["ttft_mean_s_by_adapter"] == {"a0": 0.1, "a1": pytest.approx(6.8 / 49, abs=1e-4)}
    assert rr["ttft_mean_s_halves"] == [0.1, pytest.approx(6.8 / 49, abs=1e-4)]  # the slow one came late
    r = ratios(rr, aw)
    assert r["swaps_per_1k"] == 5.0 and r["ttft_p99_s"] == 2.0
    assert r["ttft_mean_s"] == pytest.approx(rr["ttft_mean_s"] / aw["ttft_mean_s"], abs=0.01)
    text = table([rr, aw], r)
    assert "round_robin" in text and "adapter_aware" in text and "5.00x" in text


def test_ratio_of_a_missing_figure_is_none() -> None:
    empty = summarize("x", [], swaps=0)
    assert empty["ttft_mean_s"] is None and empty["swaps_per_1k"] is None
    assert ratios(empty, empty) == {"ttft_mean_s": None, "ttft_p99_s": None, "swaps_per_1k": None}
