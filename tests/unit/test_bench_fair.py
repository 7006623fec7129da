"""eval.bench.pools.fair: the policy it stages is a valid one, and its per-tenant figures."""

from __future__ import annotations

from eval.bench.pools._load import Result
from eval.bench.pools.fair import _policy, table, tenant_figures
from gateway.config import parse_policy


def test_the_staged_policies_are_valid_and_differ_only_in_fairness() -> None:
    keys = {"a": "sk-a", "b": "sk-b", "c": "sk-c"}
    fair = parse_policy(_policy(9000, keys, True), "fair.yaml")
    fifo = parse_policy(_policy(9000, keys, False), "fifo.yaml")
    assert fair.pools[0].admission.fairness.enabled and not fifo.pools[0].admission.fairness.enabled
    assert {k.org for k in fair.tenancy.keys} == {"a", "b", "c"}


def test_goodput_counts_answers_within_the_ttft_slo() -> None:
    results = [Result(0.0, 0.5, 200, True), Result(1.0, 3.0, 200, True), Result(2.0, None, 503, False)]
    f = tenant_figures(results, duration=2.0, slo_s=1.0, wall_s=4.0)
    assert f == {
        "sent": 3, "ok": 2, "goodput_rps": 0.5, "slo_attainment": 0.333, "ttft_p99_s": 3.0,
        "answered_per_s": 0.5,
    }  # fmt: skip
    assert "fair       b" in table({"fair": {"b": f}})
